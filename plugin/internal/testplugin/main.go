// Command testplugin is a minimal Nomad plugin built on package plugin, used
// by the plugin package's conformance tests and to show a real agent loading
// it. By default it is a device plugin exposing fake devices; with -driver it
// is a task driver that only fingerprints (it runs no tasks).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/impact-sched/nomad-impact/plugin"
	"github.com/impact-sched/nomad-impact/plugin/hclspec"
	"github.com/impact-sched/nomad-impact/plugin/proto/devicepb"
	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
	"github.com/impact-sched/nomad-impact/plugin/proto/hclspecpb"
	"github.com/impact-sched/nomad-impact/plugin/proto/structspb"
)

func main() {
	driver := flag.Bool("driver", false, "serve as a task driver instead of a device plugin")
	flag.Parse()
	var err error
	if *driver {
		err = plugin.ServeDriver(&testDriver{}, plugin.ServeOptions{})
	} else {
		err = plugin.ServeDevice(&testDevice{}, plugin.ServeOptions{})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// island is one entry of the repeated island block.
type island struct {
	ID   int     `cty:"id"`
	Name *string `cty:"name"`
}

// deviceConfig mirrors deviceSchema field by field.
type deviceConfig struct {
	Vendor  string            `cty:"vendor"`
	Enabled bool              `cty:"enabled"`
	Devices int               `cty:"devices"`
	Model   string            `cty:"model"`
	Scale   *float64          `cty:"scale"`
	Labels  map[string]string `cty:"labels"`
	Tags    []string          `cty:"tags"`
	Islands []island          `cty:"island"`
}

func deviceSchema() *hclspecpb.Spec {
	return hclspec.Object(hclspec.Attrs{
		"vendor":  hclspec.RequiredAttr("vendor", "string"),
		"enabled": hclspec.AttrDefault("enabled", "bool", "true"),
		"devices": hclspec.AttrDefault("devices", "number", "2"),
		"model":   hclspec.Default(hclspec.Attr("model", "string"), hclspec.String("Fake GPU")),
		"scale":   hclspec.Attr("scale", "number"),
		"labels":  hclspec.Attr("labels", "map(string)"),
		"tags":    hclspec.AttrDefault("tags", "list(string)", "[]"),
		"island": hclspec.BlockList("island", 0, 4, hclspec.Object(hclspec.Attrs{
			"id":   hclspec.RequiredAttr("", "number"),
			"name": hclspec.Attr("", "string"),
		})),
	})
}

type testDevice struct {
	devicepb.UnimplementedDevicePluginServer
	mu  sync.Mutex
	cfg *deviceConfig
}

func (d *testDevice) PluginInfo() plugin.Info {
	return plugin.Info{Name: "impact-test-device", Version: "0.1.0"}
}

func (d *testDevice) ConfigSchema() *hclspecpb.Spec { return deviceSchema() }

func (d *testDevice) SetConfig(_ context.Context, c *plugin.Config) error {
	var cfg deviceConfig
	if err := c.Decode(&cfg); err != nil {
		return err
	}
	if cfg.Devices < 0 || cfg.Devices > 64 {
		return fmt.Errorf("config field %q: %d is outside 0..64", "devices", cfg.Devices)
	}
	if cfg.Vendor == "" {
		return fmt.Errorf("config field %q: must not be empty", "vendor")
	}
	d.mu.Lock()
	d.cfg = &cfg
	d.mu.Unlock()
	return nil
}

func (d *testDevice) config() (*deviceConfig, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cfg == nil {
		return nil, status.Error(codes.FailedPrecondition, "SetConfig has not been called")
	}
	if !d.cfg.Enabled {
		return nil, status.Error(codes.FailedPrecondition, "device is not enabled")
	}
	return d.cfg, nil
}

func (d *testDevice) group(cfg *deviceConfig) *devicepb.DeviceGroup {
	g := &devicepb.DeviceGroup{
		Vendor:     cfg.Vendor,
		DeviceType: "gpu",
		DeviceName: cfg.Model,
		Attributes: map[string]*structspb.Attribute{
			"memory":  {Value: &structspb.Attribute_IntVal{IntVal: 1024}, Unit: "MiB"},
			"islands": {Value: &structspb.Attribute_IntVal{IntVal: int64(len(cfg.Islands))}},
		},
	}
	if cfg.Scale != nil {
		g.Attributes["scale"] = &structspb.Attribute{Value: &structspb.Attribute_FloatVal{FloatVal: *cfg.Scale}}
	}
	if len(cfg.Tags) > 0 {
		g.Attributes["tags"] = &structspb.Attribute{Value: &structspb.Attribute_StringVal{StringVal: strings.Join(cfg.Tags, ",")}}
	}
	keys := make([]string, 0, len(cfg.Labels))
	for k := range cfg.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		g.Attributes["label_"+k] = &structspb.Attribute{Value: &structspb.Attribute_StringVal{StringVal: cfg.Labels[k]}}
	}
	for i := range cfg.Devices {
		g.Devices = append(g.Devices, &devicepb.DetectedDevice{ID: fmt.Sprintf("fake-%d", i), Healthy: true})
	}
	return g
}

func (d *testDevice) Fingerprint(_ *devicepb.FingerprintRequest, stream devicepb.DevicePlugin_FingerprintServer) error {
	cfg, err := d.config()
	if err != nil {
		return err
	}
	if err := stream.Send(&devicepb.FingerprintResponse{DeviceGroup: []*devicepb.DeviceGroup{d.group(cfg)}}); err != nil {
		return err
	}
	// The device set never changes; the stream must stay open.
	<-stream.Context().Done()
	return stream.Context().Err()
}

func (d *testDevice) Reserve(_ context.Context, req *devicepb.ReserveRequest) (*devicepb.ReserveResponse, error) {
	cfg, err := d.config()
	if err != nil {
		return nil, err
	}
	known := map[string]bool{}
	for _, dev := range d.group(cfg).Devices {
		known[dev.ID] = true
	}
	for _, id := range req.GetDeviceIds() {
		if !known[id] {
			return nil, status.Errorf(codes.InvalidArgument, "unknown device ID %q", id)
		}
	}
	return &devicepb.ReserveResponse{ContainerRes: &devicepb.ContainerReservation{
		Envs: map[string]string{"FAKE_VISIBLE_DEVICES": strings.Join(req.GetDeviceIds(), ",")},
	}}, nil
}

func (d *testDevice) Stats(req *devicepb.StatsRequest, stream devicepb.DevicePlugin_StatsServer) error {
	cfg, err := d.config()
	if err != nil {
		return err
	}
	interval := req.GetCollectionInterval().AsDuration()
	if interval <= 0 {
		interval = time.Second
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		g := d.group(cfg)
		stats := &devicepb.DeviceGroupStats{Vendor: g.Vendor, Type: g.DeviceType, Name: g.DeviceName, InstanceStats: map[string]*devicepb.DeviceStats{}}
		now := timestamppb.Now()
		for _, dev := range g.Devices {
			v := &structspb.StatValue{IntNumeratorVal: wrapperspb.Int64(0), Unit: "%", Desc: "fake utilization"}
			stats.InstanceStats[dev.ID] = &devicepb.DeviceStats{
				Summary:   v,
				Stats:     &structspb.StatObject{Attributes: map[string]*structspb.StatValue{"utilization": v}},
				Timestamp: now,
			}
		}
		if err := stream.Send(&devicepb.StatsResponse{Groups: []*devicepb.DeviceGroupStats{stats}}); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-ticker.C:
		}
	}
}

// testDriver only fingerprints and publishes schemas.
type testDriver struct {
	driverpb.UnimplementedDriverServer
}

func (d *testDriver) PluginInfo() plugin.Info {
	return plugin.Info{Name: "impact-test-driver", Version: "0.1.0"}
}

// ConfigSchema is empty but present: with no schema Nomad refuses even an
// empty config block.
func (d *testDriver) ConfigSchema() *hclspecpb.Spec { return hclspec.Object(nil) }

func (d *testDriver) SetConfig(context.Context, *plugin.Config) error { return nil }

func (d *testDriver) TaskConfigSchema(context.Context, *driverpb.TaskConfigSchemaRequest) (*driverpb.TaskConfigSchemaResponse, error) {
	return &driverpb.TaskConfigSchemaResponse{Spec: hclspec.Object(hclspec.Attrs{
		"command": hclspec.RequiredAttr("command", "string"),
		"args":    hclspec.AttrDefault("args", "list(string)", "[]"),
	})}, nil
}

func (d *testDriver) Capabilities(context.Context, *driverpb.CapabilitiesRequest) (*driverpb.CapabilitiesResponse, error) {
	return &driverpb.CapabilitiesResponse{Capabilities: &driverpb.DriverCapabilities{
		SendSignals: false,
		Exec:        false,
		FsIsolation: driverpb.DriverCapabilities_NONE,
	}}, nil
}

func (d *testDriver) Fingerprint(_ *driverpb.FingerprintRequest, stream driverpb.Driver_FingerprintServer) error {
	err := stream.Send(&driverpb.FingerprintResponse{
		Attributes:        map[string]*structspb.Attribute{"driver.impact-test-driver": {Value: &structspb.Attribute_BoolVal{BoolVal: true}}},
		Health:            driverpb.FingerprintResponse_HEALTHY,
		HealthDescription: "healthy",
	})
	if err != nil {
		return err
	}
	<-stream.Context().Done()
	return stream.Context().Err()
}

// TaskEvents stays open: it has no events to send, and a stream that ends
// makes the client re-subscribe at once.
func (d *testDriver) TaskEvents(_ *driverpb.TaskEventsRequest, stream driverpb.Driver_TaskEventsServer) error {
	<-stream.Context().Done()
	return stream.Context().Err()
}
