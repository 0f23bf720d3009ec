package plugintest

import (
	"context"
	"testing"
	"time"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/impact-sched/nomad-impact/plugin"
)

// StartDevice serves impl in-process (go-plugin test mode, real gRPC over a
// local socket) and returns its clients; serving stops at test cleanup.
func StartDevice(tb testing.TB, impl plugin.DevicePlugin) *Instance {
	tb.Helper()
	return startInProcess(tb, plugin.KindDevice, func(opts plugin.ServeOptions) error {
		return plugin.ServeDevice(impl, opts)
	})
}

// StartDriver is StartDevice for a task driver.
func StartDriver(tb testing.TB, impl plugin.DriverPlugin) *Instance {
	tb.Helper()
	return startInProcess(tb, plugin.KindDriver, func(opts plugin.ServeOptions) error {
		return plugin.ServeDriver(impl, opts)
	})
}

func startInProcess(tb testing.TB, kind plugin.Kind, serve func(plugin.ServeOptions) error) *Instance {
	tb.Helper()
	logger := TestLogger(tb)
	ctx, cancel := context.WithCancel(context.Background())
	reattach := make(chan *goplugin.ReattachConfig, 1)
	closed := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- serve(plugin.ServeOptions{
			Logger: logger.Named("plugin"),
			Test:   &goplugin.ServeTestConfig{Context: ctx, ReattachConfigCh: reattach, CloseCh: closed},
		})
	}()
	var rc *goplugin.ReattachConfig
	select {
	case rc = <-reattach:
	case err := <-errc:
		cancel()
		tb.Fatalf("serve %s plugin: %v", kind, err)
	case <-time.After(30 * time.Second):
		cancel()
		tb.Fatalf("serve %s plugin: no reattach config within 30s", kind)
	}
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  plugin.Handshake(),
		Plugins:          plugin.ClientPluginSet(kind),
		Reattach:         rc,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		Logger:           logger.Named("client"),
	})
	inst, err := dispense(client, kind, false)
	if err != nil {
		client.Kill()
		cancel()
		tb.Fatalf("in-process %s plugin: %v", kind, err)
	}
	tb.Cleanup(func() {
		client.Kill()
		cancel()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			tb.Errorf("in-process %s plugin did not stop within 10s", kind)
		}
	})
	return inst
}
