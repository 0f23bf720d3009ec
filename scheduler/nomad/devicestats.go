package nomad

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// Device stats are the utilisation layer of the pyramid: whether admitted
// jobs actually keep their GPUs busy. Nomad has them from the device plugin
// of each client (impact-gpu's Stats RPC) and serves them through the
// servers at GET /v1/client/stats?node_id=<id> (api.Nodes().Stats), as
// HostStats.DeviceStats: one group per vendor/type/name, each instance keyed
// by the device ID the scheduler also sees in node resources and
// allocations. The server forwards the request to the client, so a slow or
// disconnected client costs one request, not the whole poll: each node gets
// its own timeout, and a bounded number are asked at once.

// Stat names impact-gpu publishes (device/stats.go, what `nomad node status
// -stats` shows). Matched case-insensitively, so a plugin that capitalises
// differently still counts; a test keeps them in step with the plugin.
const (
	StatGPUUtilization = "GPU utilization"
	StatMemoryState    = "Memory state"
	StatPowerUsage     = "Power usage"
	StatTemperature    = "Temperature"
)

// GPUStats is one GPU's latest device stats on a client node. A value the
// plugin did not report (MIG instances, an NVML call that failed: impact-gpu
// sends "N/A") has its Has* flag false, never a made-up zero.
type GPUStats struct {
	// NodeID is the Nomad node; DeviceID the device instance ID (GPU UUID).
	NodeID   string
	DeviceID string
	// Device is the device group's vendor/type/name, e.g.
	// "nvidia/gpu/A100-SXM4-80GB-island0".
	Device string

	UtilizationPct float64
	HasUtilization bool
	// MemoryUsedMiB / MemoryTotalMiB are the framebuffer in use and its
	// size; HasMemory needs both.
	MemoryUsedMiB, MemoryTotalMiB float64
	HasMemory                     bool
	PowerW                        float64
	HasPower                      bool
	TemperatureC                  float64
	HasTemperature                bool
	// At is when the plugin sampled it.
	At time.Time
}

// DeviceStatsConfig bounds a poll.
type DeviceStatsConfig struct {
	// Concurrency is how many nodes are asked at once (default 8).
	Concurrency int
	// NodeTimeout bounds one node's request (default 5s).
	NodeTimeout time.Duration
	// DeviceType selects the device groups read (default "gpu").
	DeviceType string
}

// DeviceStatsReader polls the device stats of client nodes. Safe for
// concurrent use.
type DeviceStatsReader struct {
	fetch func(ctx context.Context, nodeID string) (*api.HostStats, error)
	cfg   DeviceStatsConfig
	log   hclog.Logger

	polls, failures atomic.Uint64
}

// NewDeviceStatsReader builds a reader on c; nothing is sent until Poll.
func NewDeviceStatsReader(c *Client, cfg DeviceStatsConfig, logger hclog.Logger) *DeviceStatsReader {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.NodeTimeout <= 0 {
		cfg.NodeTimeout = 5 * time.Second
	}
	if cfg.DeviceType == "" {
		cfg.DeviceType = "gpu"
	}
	return &DeviceStatsReader{
		fetch: func(ctx context.Context, nodeID string) (*api.HostStats, error) {
			return c.api.Nodes().Stats(nodeID, c.q(ctx))
		},
		cfg: cfg,
		log: logger.Named("devicestats"),
	}
}

// DeviceStatsPoll is the result of one poll.
type DeviceStatsPoll struct {
	// GPUs are the stats read, ordered by node then device ID.
	GPUs []GPUStats
	// Failed maps the nodes whose stats could not be read to why.
	Failed map[string]error
}

// Poll reads the device stats of nodeIDs, Concurrency at a time, each
// bounded by NodeTimeout. A node that fails is logged, counted and reported
// in Failed; the others are still read. Poll returns early (with what it
// has) when ctx ends.
func (r *DeviceStatsReader) Poll(ctx context.Context, nodeIDs []string) DeviceStatsPoll {
	r.polls.Add(1)
	type result struct {
		node string
		gpus []GPUStats
		err  error
	}
	results := make([]result, len(nodeIDs))
	sem := make(chan struct{}, r.cfg.Concurrency)
	var wg sync.WaitGroup
	for i, id := range nodeIDs {
		results[i].node = id
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			results[i].err = fmt.Errorf("reading device stats of node %s: %w", id, ctx.Err())
			continue
		}
		wg.Add(1)
		go func(i int, id string) {
			defer wg.Done()
			defer func() { <-sem }()
			nctx, cancel := context.WithTimeout(ctx, r.cfg.NodeTimeout)
			defer cancel()
			hs, err := r.fetch(nctx, id)
			if err != nil {
				results[i].err = fmt.Errorf("reading device stats of node %s: %w", id, err)
				return
			}
			results[i].gpus = r.convert(id, hs)
		}(i, id)
	}
	wg.Wait()
	out := DeviceStatsPoll{Failed: map[string]error{}}
	for _, res := range results {
		if res.err != nil {
			r.failures.Add(1)
			out.Failed[res.node] = res.err
			r.log.Debug("device stats unavailable", "node", res.node, "error", res.err)
			continue
		}
		out.GPUs = append(out.GPUs, res.gpus...)
	}
	sort.Slice(out.GPUs, func(i, j int) bool {
		a, b := out.GPUs[i], out.GPUs[j]
		if a.NodeID != b.NodeID {
			return a.NodeID < b.NodeID
		}
		return a.DeviceID < b.DeviceID
	})
	return out
}

// Failures is how many node reads have failed since start.
func (r *DeviceStatsReader) Failures() uint64 { return r.failures.Load() }

// convert picks the GPU device groups out of a node's host stats.
func (r *DeviceStatsReader) convert(nodeID string, hs *api.HostStats) []GPUStats {
	if hs == nil {
		return nil
	}
	var out []GPUStats
	for _, g := range hs.DeviceStats {
		if g == nil || g.Type != r.cfg.DeviceType {
			continue
		}
		name := g.Vendor + "/" + g.Type + "/" + g.Name
		for id, ds := range g.InstanceStats {
			if ds == nil {
				continue
			}
			out = append(out, gpuStatsOf(nodeID, id, name, ds))
		}
	}
	return out
}

func gpuStatsOf(nodeID, id, device string, ds *api.DeviceStats) GPUStats {
	s := GPUStats{NodeID: nodeID, DeviceID: id, Device: device, At: ds.Timestamp}
	attr := func(name string) *api.StatValue {
		if ds.Stats == nil {
			return nil
		}
		if v, ok := ds.Stats.Attributes[name]; ok {
			return v
		}
		for k, v := range ds.Stats.Attributes {
			if strings.EqualFold(k, name) {
				return v
			}
		}
		return nil
	}
	util := attr(StatGPUUtilization)
	if util == nil {
		// The summary is the plugin's most informative value; for
		// impact-gpu (and Nomad's nvidia plugin) that is GPU utilisation.
		util = ds.Summary
	}
	if v, ok := numerator(util); ok && util.Unit == "%" {
		s.UtilizationPct, s.HasUtilization = v, true
	}
	if mem := attr(StatMemoryState); mem != nil {
		used, ok1 := numerator(mem)
		total, ok2 := denominator(mem)
		if ok1 && ok2 && total > 0 {
			s.MemoryUsedMiB, s.MemoryTotalMiB, s.HasMemory = used, total, true
		}
	}
	if v, ok := numerator(attr(StatPowerUsage)); ok {
		s.PowerW, s.HasPower = v, true
	}
	if v, ok := numerator(attr(StatTemperature)); ok {
		s.TemperatureC, s.HasTemperature = v, true
	}
	return s
}

// numerator is a stat's numeric value (int or float); false for strings
// ("N/A"), booleans and missing stats.
func numerator(v *api.StatValue) (float64, bool) {
	switch {
	case v == nil:
		return 0, false
	case v.IntNumeratorVal != nil:
		return float64(*v.IntNumeratorVal), true
	case v.FloatNumeratorVal != nil:
		return *v.FloatNumeratorVal, true
	}
	return 0, false
}

func denominator(v *api.StatValue) (float64, bool) {
	switch {
	case v == nil:
		return 0, false
	case v.IntDenominatorVal != nil:
		return float64(*v.IntDenominatorVal), true
	case v.FloatDenominatorVal != nil:
		return *v.FloatDenominatorVal, true
	}
	return 0, false
}
