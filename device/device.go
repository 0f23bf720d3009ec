package device

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/impact-sched/nomad-impact/device/gpu"
	"github.com/impact-sched/nomad-impact/device/gpu/fake"
	"github.com/impact-sched/nomad-impact/device/gpu/nvml"
	"github.com/impact-sched/nomad-impact/internal/version"
	"github.com/impact-sched/nomad-impact/plugin"
	"github.com/impact-sched/nomad-impact/plugin/proto/devicepb"
	"github.com/impact-sched/nomad-impact/plugin/proto/hclspecpb"
)

// PluginName is the name Nomad knows the plugin by (PluginInfo.name).
const PluginName = "impact-gpu"

// Version is the plugin's version: the one of all three binaries
// (internal/version).
const Version = version.Version

// errNotEnabled is what every RPC answers when enabled = false; Nomad then
// stops the plugin.
var errNotEnabled = status.Error(codes.FailedPrecondition, "device is not enabled")

// errShutdown is what RPCs answer after Shutdown.
var errShutdown = status.Error(codes.Unavailable, "device plugin is shutting down")

// Plugin is the impact-gpu device plugin.
type Plugin struct {
	devicepb.UnimplementedDevicePluginServer

	logger hclog.Logger
	// roots are where device nodes (/dev) and the driver's proc files
	// (/proc: MIG capabilities) are read.
	roots hostRoots
	// backendFor, when set, builds the GPU backend instead of NVML or the
	// fake backend (newBackend): the package's tests give their doubles.
	backendFor func(backend, fakeTopology string, logger hclog.Logger) (gpu.Backend, error)

	mu       sync.Mutex
	s        *settings
	fakeTopo *fake.Topology
	// mon is started by the first RPC that needs it and replaced when a
	// new config arrives; open streams follow it (see snapshot).
	mon      *monitor
	shutdown bool
}

var _ plugin.DevicePlugin = (*Plugin)(nil)

// New returns an unconfigured plugin; Nomad configures it with SetConfig.
func New(logger hclog.Logger) *Plugin {
	return &Plugin{logger: logger.Named(PluginName), roots: hostRoots{Dev: "/dev", Proc: "/proc"}}
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
}

// Shutdown stops the monitor and releases the backend; open streams end
// with Unavailable and later RPCs fail.
func (p *Plugin) Shutdown() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.shutdown = true
	p.stopLocked()
}

// monitor starts the backend and the monitor on first use. Stats may be
// opened before Fingerprint (after a crash the client relaunches the plugin
// from its stats loop), so every RPC goes through here.
func (p *Plugin) monitor() (*monitor, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shutdown {
		return nil, errShutdown
	}
	if p.s == nil {
		// Nomad always configures first; a missing config means the
		// defaults.
		s, err := defaultConfig().parse()
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
	p.mon = startMonitor(b, *p.s, p.logger, time.Now)
	return p.mon, nil
}

// snapshot returns the current monitor, its latest device state and a
// channel closed when that state is replaced. A monitor stopped by a new
// config is followed to the next one, so open streams carry on with the
// new settings; after Shutdown, or with enabled = false, it fails.
func (p *Plugin) snapshot(ctx context.Context) (*monitor, *snapshot, <-chan struct{}, error) {
	for {
		m, err := p.monitor()
		if err != nil {
			return nil, nil, nil, err
		}
		snap, changed, err := m.current(ctx)
		switch {
		case errors.Is(err, errStopped):
			continue
		case err != nil:
			return nil, nil, nil, status.FromContextError(err).Err()
		}
		return m, snap, changed, nil
	}
}

func (p *Plugin) newBackend() (gpu.Backend, error) {
	if p.backendFor != nil {
		return p.backendFor(p.s.backend, p.s.fake, p.logger)
	}
	switch p.s.backend {
	case BackendFake:
		return fake.New(p.fakeTopo, p.logger), nil
	case BackendNVML:
		return nvml.New(p.logger), nil
	}
	return nil, fmt.Errorf("unknown backend %q", p.s.backend)
}

// Fingerprint streams the device groups: the current set at once, then a
// new full set whenever it changes. The stream stays open until the client
// goes away: a stream that ends makes Nomad drop the devices for good.
func (p *Plugin) Fingerprint(_ *devicepb.FingerprintRequest, stream devicepb.DevicePlugin_FingerprintServer) error {
	ctx := stream.Context()
	var sent []group
	first := true
	for {
		m, snap, changed, err := p.snapshot(ctx)
		if err != nil {
			return err
		}
		// A monitor publishes only changed groups, but a new monitor
		// (after a new config) may start from the same ones.
		if first || !reflect.DeepEqual(snap.groups, sent) {
			if err := stream.Send(fingerprintResponse(snap.groups)); err != nil {
				return err
			}
			sent, first = snap.groups, false
		}
		select {
		case <-changed:
		case <-m.stopped:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

// Reserve tells the client how to give the task its GPUs.
func (p *Plugin) Reserve(ctx context.Context, req *devicepb.ReserveRequest) (*devicepb.ReserveResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, snap, _, err := p.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	res, warnings, err := reserve(snap, req.GetDeviceIds(), p.roots)
	for _, w := range warnings {
		p.logger.Warn("reserve: device not passed to the task", "reason", w)
	}
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
// goes away. A failed sample is skipped (and logged when the error
// changes), not sent as an error: an error would end the stream.
func (p *Plugin) Stats(req *devicepb.StatsRequest, stream devicepb.DevicePlugin_StatsServer) error {
	interval := statsInterval(req)
	ctx := stream.Context()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var lastErr string
	for {
		m, snap, _, err := p.snapshot(ctx)
		if err != nil {
			return err
		}
		resp, err := m.stats(ctx, snap)
		switch {
		case errors.Is(err, errStopped):
			// Reconfigured meanwhile: the next tick reads the new monitor.
		case err != nil:
			if err.Error() != lastErr {
				p.logger.Warn("stats collection failed", "error", err)
				lastErr = err.Error()
			}
		default:
			lastErr = ""
			if err := stream.Send(resp); err != nil {
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

// Bounds of the stats collection interval. Nomad asks for its client's
// collection interval (1s by default); a request for less than
// minStatsInterval would have the plugin spin on NVML calls, and none at
// all gets Nomad's default.
const (
	minStatsInterval     = 100 * time.Millisecond
	defaultStatsInterval = time.Second
)

// statsInterval is the interval a Stats request asks for, within bounds.
func statsInterval(req *devicepb.StatsRequest) time.Duration {
	d := req.GetCollectionInterval()
	if d == nil || !d.IsValid() || d.AsDuration() <= 0 {
		return defaultStatsInterval
	}
	return max(d.AsDuration(), minStatsInterval)
}
