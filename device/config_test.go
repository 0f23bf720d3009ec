package device

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/impact-sched/nomad-impact/plugin/config"
	"github.com/impact-sched/nomad-impact/plugin/hclspec"
	"github.com/impact-sched/nomad-impact/plugin/plugintest"
)

// TestEmptyConfigIsDefaultConfig: what Nomad sends for an empty config {}
// decodes to defaultConfig, the settings an RPC before SetConfig uses.
func TestEmptyConfigIsDefaultConfig(t *testing.T) {
	data, err := plugintest.EncodeConfig(configSpec(), "")
	if err != nil {
		t.Fatal(err)
	}
	dec, err := config.NewDecoder(configSpec())
	if err != nil {
		t.Fatal(err)
	}
	var got Config
	if err := dec.Decode(data, &got); err != nil {
		t.Fatal(err)
	}
	if want := defaultConfig(); !reflect.DeepEqual(got, want) {
		t.Fatalf("empty config decodes to %+v, want %+v", got, want)
	}
	if _, err := got.parse(); err != nil {
		t.Fatalf("the defaults do not validate: %v", err)
	}
}

// pluginConfigBody returns the config {} body of a plugin "<name>" block in
// a Nomad agent file.
func pluginConfigBody(t *testing.T, path, name string) hcl.Body {
	t.Helper()
	f, diags := hclparse.NewParser().ParseHCLFile(path)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	top, _, diags := f.Body.PartialContent(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "plugin", LabelNames: []string{"name"}}}})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	for _, b := range top.Blocks {
		if b.Labels[0] != name {
			continue
		}
		inner, diags := b.Body.Content(&hcl.BodySchema{
			Attributes: []hcl.AttributeSchema{{Name: "args"}},
			Blocks:     []hcl.BlockHeaderSchema{{Type: "config"}},
		})
		if diags.HasErrors() || len(inner.Blocks) != 1 {
			t.Fatalf("plugin %q block: want exactly one config block: %v", name, diags)
		}
		return inner.Blocks[0].Body
	}
	t.Fatalf("%s has no plugin %q block", path, name)
	return nil
}

// TestExampleAgentConfig: example/agent.hcl's plugin block decodes against
// the plugin's schema, validates, and is what it says it is (the defaults);
// the fake topology it suggests exists.
func TestExampleAgentConfig(t *testing.T) {
	path := filepath.Join("..", "example", "agent.hcl")
	val, err := hclspec.DecodeBody(configSpec(), pluginConfigBody(t, path, PluginName))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var cfg Config
	if err := config.FromValue(val, &cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.parse(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if want := defaultConfig(); !reflect.DeepEqual(cfg, want) {
		t.Fatalf("%s claims to show the defaults but sets %+v, want %+v", path, cfg, want)
	}
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`fake_topology\s*=\s*"[^"]*/([^"/]+\.hcl)"`).FindSubmatch(src)
	if m == nil {
		t.Fatalf("%s no longer shows a fake_topology example", path)
	}
	if _, err := os.Stat(filepath.Join("..", "example", "topologies", string(m[1]))); err != nil {
		t.Fatalf("%s suggests a topology that does not ship: %v", path, err)
	}
}
