package device

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/device/topology"
	"github.com/impact-sched/nomad-impact/plugin/hclspec"
	"github.com/impact-sched/nomad-impact/plugin/proto/hclspecpb"
)

// Backend names accepted in the backend config field.
const (
	BackendNVML = "nvml"
	BackendFake = "fake"
)

// Config is the plugin block's config {}, as decoded from Nomad.
type Config struct {
	Enabled           bool     `cty:"enabled"`
	IgnoredGPUIDs     []string `cty:"ignored_gpu_ids"`
	FingerprintPeriod string   `cty:"fingerprint_period"`
	Backend           string   `cty:"backend"`
	FakeTopology      string   `cty:"fake_topology"`
	GroupBy           string   `cty:"group_by"`
}

// defaultConfig is what an empty config {} (or no plugin block) means:
// enabled, NVML, a scan a minute, one device group per model (so any count
// up to a node's GPUs of one model can be placed; the impact scheduler pins
// the exact GPUs it chose, using the per-instance topology attributes). The
// schema's defaults are written from it, so the two cannot drift.
func defaultConfig() Config {
	return Config{
		Enabled:           true,
		IgnoredGPUIDs:     []string{},
		FingerprintPeriod: "1m",
		Backend:           BackendNVML,
		FakeTopology:      "",
		GroupBy:           string(topology.ByModel),
	}
}

// configSpec is the hclspec schema of Config; every field defaults to
// defaultConfig's value.
func configSpec() *hclspecpb.Spec {
	def := defaultConfig()
	str := func(name, v string) *hclspecpb.Spec { return hclspec.AttrDefault(name, "string", hclspec.Quote(v)) }
	return hclspec.Object(hclspec.Attrs{
		"enabled":            hclspec.AttrDefault("enabled", "bool", strconv.FormatBool(def.Enabled)),
		"ignored_gpu_ids":    hclspec.AttrDefault("ignored_gpu_ids", "list(string)", "[]"),
		"fingerprint_period": str("fingerprint_period", def.FingerprintPeriod),
		"backend":            str("backend", def.Backend),
		"fake_topology":      str("fake_topology", def.FakeTopology),
		"group_by":           str("group_by", def.GroupBy),
	})
}

// settings is a validated Config.
type settings struct {
	enabled bool
	ignored map[string]bool
	period  time.Duration
	backend string
	fake    string
	groupBy topology.GroupBy
}

// parse validates a Config; every error names the field at fault.
func (c Config) parse() (settings, error) {
	s := settings{enabled: c.Enabled, ignored: map[string]bool{}, backend: c.Backend, fake: c.FakeTopology}
	for i, id := range c.IgnoredGPUIDs {
		if strings.TrimSpace(id) == "" {
			return settings{}, fmt.Errorf("config field %q: entry %d is empty", "ignored_gpu_ids", i)
		}
		s.ignored[id] = true
	}
	d, err := time.ParseDuration(c.FingerprintPeriod)
	if err != nil {
		return settings{}, fmt.Errorf("config field %q: %q is not a duration like \"1m\"", "fingerprint_period", c.FingerprintPeriod)
	}
	if d <= 0 {
		return settings{}, fmt.Errorf("config field %q: %s must be positive", "fingerprint_period", d)
	}
	s.period = d
	switch c.Backend {
	case BackendNVML:
		if c.FakeTopology != "" {
			return settings{}, fmt.Errorf("config field %q: set only with backend = %q (backend is %q)", "fake_topology", BackendFake, c.Backend)
		}
	case BackendFake:
		if c.FakeTopology == "" {
			return settings{}, fmt.Errorf("config field %q: required with backend = %q", "fake_topology", BackendFake)
		}
	default:
		return settings{}, fmt.Errorf("config field %q: %q is not one of %q, %q", "backend", c.Backend, BackendNVML, BackendFake)
	}
	if s.groupBy, err = topology.ParseGroupBy(c.GroupBy); err != nil {
		return settings{}, fmt.Errorf("config field %q: %w", "group_by", err)
	}
	return s, nil
}

func (s settings) equal(o settings) bool {
	if s.enabled != o.enabled || s.period != o.period || s.backend != o.backend || s.fake != o.fake || s.groupBy != o.groupBy {
		return false
	}
	a, b := keys(s.ignored), keys(o.ignored)
	return slices.Equal(a, b)
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
