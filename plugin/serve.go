package plugin

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/impact-sched/nomad-impact/plugin/hclspec"
	"github.com/impact-sched/nomad-impact/plugin/proto/basepb"
	"github.com/impact-sched/nomad-impact/plugin/proto/devicepb"
	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
)

// ServeOptions tune serving; the zero value is right for production.
type ServeOptions struct {
	// Logger receives the plugin's logs. Default: JSON hclog lines on the
	// process's original stderr at Debug level, which the Nomad client
	// re-logs with their level.
	Logger hclog.Logger
	// Test serves in-process in go-plugin's test mode (see
	// plugintest.StartDevice/StartDriver); nil for a real plugin binary.
	Test *goplugin.ServeTestConfig
}

// ServeDevice serves impl as a Nomad device plugin until the client kills
// the process. It returns an error without serving if impl's PluginInfo or
// ConfigSchema would make Nomad refuse the plugin.
func ServeDevice(impl DevicePlugin, opts ServeOptions) error {
	return serve(KindDevice, impl, goplugin.PluginSet{
		PluginSetDevice: &DeviceGRPCPlugin{Impl: impl},
	}, opts)
}

// ServeDriver serves impl as a Nomad task driver plugin, like ServeDevice.
func ServeDriver(impl DriverPlugin, opts ServeOptions) error {
	return serve(KindDriver, impl, goplugin.PluginSet{
		PluginSetDriver: &DriverGRPCPlugin{Impl: impl},
	}, opts)
}

func serve(kind Kind, impl Base, set goplugin.PluginSet, opts ServeOptions) error {
	info := impl.PluginInfo()
	if err := info.Validate(); err != nil {
		return fmt.Errorf("serve %s plugin: %w", kind, err)
	}
	if spec := impl.ConfigSchema(); spec != nil {
		if err := hclspec.Validate(spec); err != nil {
			return fmt.Errorf("serve %s plugin %q: config schema: %w", kind, info.Name, err)
		}
	}
	logger := opts.Logger
	if logger == nil {
		// Captured now: go-plugin swaps os.Stderr for a pipe once serving.
		logger = hclog.New(&hclog.LoggerOptions{
			Name:       info.Name,
			Level:      hclog.Debug,
			Output:     os.Stderr,
			JSONFormat: true,
		})
	}
	if opts.Test == nil {
		// When the agent dies our stderr becomes a broken pipe; without
		// this the next log line would kill the plugin (and, for drivers,
		// defeat reattachment). Notify rather than Ignore so children do
		// not inherit an ignored SIGPIPE.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	}
	set[PluginSetBase] = &BaseGRPCPlugin{Impl: NewBaseServer(kind, impl, logger)}
	grpcServer := goplugin.DefaultGRPCServer
	if opts.Test == nil {
		// A device plugin exits as soon as its client is gone; a driver
		// waits for a restarted client to reattach (see orphan.go).
		grace := time.Duration(0)
		if kind == KindDriver {
			grace = DefaultOrphanGrace
		}
		w := newOrphanWatch(grace, logger)
		go w.run(context.Background())
		grpcServer = func(o []grpc.ServerOption) *grpc.Server {
			return goplugin.DefaultGRPCServer(append(o, w.serverOptions()...))
		}
	}
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: Handshake(),
		Plugins:         set,
		GRPCServer:      grpcServer,
		Logger:          logger,
		Test:            opts.Test,
	})
	return nil
}

// ClientPluginSet is the plugin set a Nomad client uses to talk to a plugin
// of the given kind: base plus device or driver. Dispensing "base" yields a
// basepb.BasePluginClient, "device" a devicepb.DevicePluginClient, "driver"
// a driverpb.DriverClient. Nomad's fingerprint process uses a set with base
// only: see BaseOnlyPluginSet.
func ClientPluginSet(kind Kind) goplugin.PluginSet {
	set := BaseOnlyPluginSet()
	switch kind {
	case KindDevice:
		set[PluginSetDevice] = &DeviceGRPCPlugin{}
	case KindDriver:
		set[PluginSetDriver] = &DriverGRPCPlugin{}
	}
	return set
}

// BaseOnlyPluginSet is the set of the client's fingerprint process.
func BaseOnlyPluginSet() goplugin.PluginSet {
	return goplugin.PluginSet{PluginSetBase: &BaseGRPCPlugin{}}
}

// BaseGRPCPlugin registers BasePlugin (server side, Impl set) or wraps a
// connection in a BasePluginClient (client side).
type BaseGRPCPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	Impl basepb.BasePluginServer
}

func (p *BaseGRPCPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	basepb.RegisterBasePluginServer(s, p.Impl)
	return nil
}

func (p *BaseGRPCPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return basepb.NewBasePluginClient(c), nil
}

// DeviceGRPCPlugin registers DevicePlugin or wraps a DevicePluginClient.
type DeviceGRPCPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	Impl devicepb.DevicePluginServer
}

func (p *DeviceGRPCPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	devicepb.RegisterDevicePluginServer(s, p.Impl)
	return nil
}

func (p *DeviceGRPCPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return devicepb.NewDevicePluginClient(c), nil
}

// DriverGRPCPlugin registers Driver or wraps a DriverClient.
type DriverGRPCPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	Impl driverpb.DriverServer
}

func (p *DriverGRPCPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	driverpb.RegisterDriverServer(s, p.Impl)
	return nil
}

func (p *DriverGRPCPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return driverpb.NewDriverClient(c), nil
}
