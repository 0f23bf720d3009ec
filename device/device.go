package device

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/impact-sched/nomad-impact/device/gpu"
	"github.com/impact-sched/nomad-impact/device/gpu/fake"
	"github.com/impact-sched/nomad-impact/device/gpu/nvml"
	"github.com/impact-sched/nomad-impact/plugin"
	"github.com/impact-sched/nomad-impact/plugin/proto/devicepb"
	"github.com/impact-sched/nomad-impact/plugin/proto/hclspecpb"
)

// PluginName is the name Nomad knows the plugin by (PluginInfo.name).
const PluginName = "impact-gpu"

// Version is the plugin's version.
const Version = "0.1.0"

// errNotEnabled is what every RPC answers when enabled = false; Nomad then
// stops the plugin.
var errNotEnabled = status.Error(codes.FailedPrecondition, "device is not enabled")

// Options are hooks for tests; the zero value is right for production.
type Options struct {
	// NewBackend builds the GPU backend for validated settings. Default:
	// NVML or the fake backend, as configured.
	NewBackend func(backend, fakeTopology string, logger hclog.Logger) (gpu.Backend, error)
	// DevRoot is where device nodes are looked for; default "/dev".
	DevRoot string
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Plugin is the impact-gpu device plugin.
type Plugin struct {
	devicepb.UnimplementedDevicePluginServer

	logger hclog.Logger
	opts   Options

	mu       sync.Mutex
	s        *settings
	fakeTopo *fake.Topology
	mon      *monitor
	backend  gpu.Backend
}

var _ plugin.DevicePlugin = (*Plugin)(nil)

// New returns an unconfigured plugin; Nomad configures it with SetConfig.
func New(logger hclog.Logger, opts Options) *Plugin {
	if opts.DevRoot == "" {
		opts.DevRoot = "/dev"
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Plugin{logger: logger.Named(PluginName), opts: opts}
}

// PluginInfo identifies the plugin.
func (p *Plugin) PluginInfo() plugin.Info {
	return plugin.Info{Name: PluginName, Version: Version}
}

// ConfigSchema is the schema of the plugin's config block.
func (p *Plugin) ConfigSchema() *hclspecpb.Spec { return configSpec() }

// SetConfig validates and applies the config. It parses a fake topology
// file right away, so a bad file stops the agent with a clear message,
// but starts nothing: Nomad calls SetConfig in processes that never
// fingerprint.
func (p *Plugin) SetConfig(ctx context.Context, c *plugin.Config) error {
	var cfg Config
	if err := c.Decode(&cfg); err != nil {
		return err
	}
	s, err := cfg.parse()
	if err != nil {
		return err
	}
	var topo *fake.Topology
	if s.backend == BackendFake {
		if topo, err = fake.LoadTopology(s.fake); err != nil {
			return fmt.Errorf("config field %q: %w", "fake_topology", err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.s != nil && p.s.equal(s) {
		return nil
	}
	p.stopLocked()
	p.s, p.fakeTopo = &s, topo
	p.logger.Info("configured", "enabled", s.enabled, "backend", s.backend, "group_by", s.groupBy, "fingerprint_period", s.period.String(), "ignored", len(s.ignored))
	return nil
}

func (p *Plugin) stopLocked() {
	if p.mon != nil {
		p.mon.stop()
		p.mon = nil
	}
	if p.backend != nil {
		if err := p.backend.Close(); err != nil {
			p.logger.Warn("closing backend", "error", err)
		}
		p.backend = nil
	}
}

// Shutdown stops the monitor and releases the backend.
func (p *Plugin) Shutdown() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopLocked()
}

// monitor starts the backend and the monitor on first use. Stats may be
// opened before Fingerprint (after a crash the client relaunches the plugin
// from its stats loop), so every RPC goes through here.
func (p *Plugin) monitor() (*monitor, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.s == nil {
		// Nomad always configures first; a missing config means the
		// defaults.
		cfg := Config{Enabled: true, FingerprintPeriod: "1m", Backend: BackendNVML, GroupBy: "island"}
		s, err := cfg.parse()
		if err != nil {
			return nil, err
		}
		p.s = &s
	}
	if !p.s.enabled {
		return nil, errNotEnabled
	}
	if p.mon != nil {
		return p.mon, nil
	}
	b, err := p.newBackend()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "start %s backend: %v", p.s.backend, err)
	}
	p.backend = b
	p.mon = startMonitor(b, *p.s, p.logger, p.opts.Now)
	return p.mon, nil
}

func (p *Plugin) newBackend() (gpu.Backend, error) {
	if p.opts.NewBackend != nil {
		return p.opts.NewBackend(p.s.backend, p.s.fake, p.logger)
	}
	switch p.s.backend {
	case BackendFake:
		return fake.New(p.fakeTopo, p.logger, fake.Options{}), nil
	case BackendNVML:
		return nvml.New(p.logger), nil
	}
	return nil, fmt.Errorf("unknown backend %q", p.s.backend)
}

// Fingerprint streams the device groups: the current set at once, then a
// new full set whenever it changes. The stream stays open until the client
// goes away: a stream that ends makes Nomad drop the devices for good.
func (p *Plugin) Fingerprint(_ *devicepb.FingerprintRequest, stream devicepb.DevicePlugin_FingerprintServer) error {
	m, err := p.monitor()
	if err != nil {
		return err
	}
	ctx := stream.Context()
	var sent uint64
	for {
		snap, version, changed, err := m.current(ctx)
		if err != nil {
			return status.FromContextError(err).Err()
		}
		if version != sent {
			if err := stream.Send(fingerprintResponse(snap.groups)); err != nil {
				return err
			}
			sent = version
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

// Reserve tells the client how to give the task its GPUs.
func (p *Plugin) Reserve(ctx context.Context, req *devicepb.ReserveRequest) (*devicepb.ReserveResponse, error) {
	m, err := p.monitor()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	snap, _, _, err := m.current(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "no device state yet: %v", err)
	}
	res, err := reserve(snap, req.GetDeviceIds(), p.opts.DevRoot)
	if err != nil {
		var bad *requestError
		if errors.As(err, &bad) {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &devicepb.ReserveResponse{ContainerRes: res}, nil
}

// Stats streams per-GPU stats every collection interval until the client
// goes away.
func (p *Plugin) Stats(req *devicepb.StatsRequest, stream devicepb.DevicePlugin_StatsServer) error {
	m, err := p.monitor()
	if err != nil {
		return err
	}
	interval := time.Second
	if d := req.GetCollectionInterval(); d != nil && d.AsDuration() > 0 {
		interval = d.AsDuration()
	}
	ctx := stream.Context()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		snap, _, _, err := m.current(ctx)
		if err != nil {
			return status.FromContextError(err).Err()
		}
		p.mu.Lock()
		b := p.backend
		p.mu.Unlock()
		if b != nil {
			resp, err := collectStats(ctx, b, snap)
			if err != nil {
				p.logger.Warn("stats collection failed", "error", err)
			} else if err := stream.Send(resp); err != nil {
				return err
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}
