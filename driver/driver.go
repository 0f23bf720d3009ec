package driver

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/internal/version"
	"github.com/impact-sched/nomad-impact/plugin"
	"github.com/impact-sched/nomad-impact/plugin/config"
	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
	"github.com/impact-sched/nomad-impact/plugin/proto/hclspecpb"
	"github.com/impact-sched/nomad-impact/plugin/proto/structspb"
)

// PluginName is the driver's name: jobs use driver = "impact-exec".
const PluginName = "impact-exec"

const (
	pluginName        = PluginName
	pluginVersion     = version.Version // the one of all three binaries
	fingerprintPeriod = 30 * time.Second
)

// Driver implements the Nomad Driver service.
type Driver struct {
	driverpb.UnimplementedDriverServer

	logger hclog.Logger
	exe    string // this binary, re-executed as `supervise`

	mu     sync.Mutex
	cfg    Config
	cfgGen chan struct{} // closed when the config changes
	tasks  map[string]*taskHandle
	// startingIDs holds the IDs of StartTask calls in progress (starting).
	startingIDs map[string]bool
	decoder     *config.Decoder
	events      *eventBroker
}

// New returns a driver. exe is the path of the impact-exec binary that
// tasks' supervisors run from (os.Executable() in production).
func New(logger hclog.Logger, exe string) *Driver {
	dec, err := config.NewDecoder(taskConfigSpec)
	if err != nil {
		panic(fmt.Sprintf("impact-exec task config schema is invalid: %v", err)) // a programming error
	}
	return &Driver{logger: logger.Named("driver"), exe: exe, cfg: defaultConfig(),
		cfgGen: make(chan struct{}), tasks: map[string]*taskHandle{}, startingIDs: map[string]bool{}, decoder: dec, events: newEventBroker()}
}

var _ plugin.DriverPlugin = (*Driver)(nil)

// PluginInfo identifies the driver; jobs use driver = "impact-exec".
func (d *Driver) PluginInfo() plugin.Info {
	return plugin.Info{Name: pluginName, Version: pluginVersion}
}

// ConfigSchema is the plugin block's schema.
func (d *Driver) ConfigSchema() *hclspecpb.Spec { return configSpec }

// SetConfig validates and applies the plugin config (idempotent).
func (d *Driver) SetConfig(_ context.Context, c *plugin.Config) error {
	var cfg Config
	if err := c.Decode(&cfg); err != nil {
		return fmt.Errorf("impact-exec config: %w", err)
	}
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("impact-exec config: %w", err)
	}
	d.mu.Lock()
	d.cfg = cfg
	close(d.cfgGen)
	d.cfgGen = make(chan struct{})
	d.mu.Unlock()
	return nil
}

func (d *Driver) config() (Config, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg, d.cfgGen
}

// Init and Shutdown exist from Nomad 2.0.4; nothing to do (tasks outlive us).
func (d *Driver) Init(context.Context, *driverpb.InitRequest) (*driverpb.InitResponse, error) {
	return &driverpb.InitResponse{}, nil
}

func (d *Driver) Shutdown(context.Context, *driverpb.ShutdownRequest) (*driverpb.ShutdownResponse, error) {
	return &driverpb.ShutdownResponse{}, nil
}

func (d *Driver) TaskConfigSchema(context.Context, *driverpb.TaskConfigSchemaRequest) (*driverpb.TaskConfigSchemaResponse, error) {
	return &driverpb.TaskConfigSchemaResponse{Spec: taskConfigSpec}, nil
}

func (d *Driver) Capabilities(context.Context, *driverpb.CapabilitiesRequest) (*driverpb.CapabilitiesResponse, error) {
	return &driverpb.CapabilitiesResponse{Capabilities: &driverpb.DriverCapabilities{
		SendSignals: true,
		Exec:        true,
		FsIsolation: driverpb.DriverCapabilities_NONE,
		NetworkIsolationModes: []driverpb.NetworkIsolationSpec_NetworkIsolationMode{
			driverpb.NetworkIsolationSpec_HOST,
		},
		MountConfigs: driverpb.DriverCapabilities_NO_MOUNTS,
	}}, nil
}

// Fingerprint sends the driver's health now, on config changes and
// periodically, until the client goes away.
func (d *Driver) Fingerprint(_ *driverpb.FingerprintRequest, stream driverpb.Driver_FingerprintServer) error {
	ticker := time.NewTicker(fingerprintPeriod)
	defer ticker.Stop()
	for {
		cfg, changed := d.config()
		if err := stream.Send(d.fingerprint(cfg)); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-ticker.C:
		case <-changed:
		}
	}
}

func (d *Driver) fingerprint(cfg Config) *driverpb.FingerprintResponse {
	attrs := map[string]*structspb.Attribute{
		"driver." + pluginName:              {Value: &structspb.Attribute_BoolVal{BoolVal: true}},
		"driver." + pluginName + ".version": {Value: &structspb.Attribute_StringVal{StringVal: pluginVersion}},
	}
	desc := "healthy; gang barrier needs a rendezvous_addr in each task's gang block"
	switch {
	case cfg.RendezvousAddr != "":
		attrs["driver."+pluginName+".rendezvous"] = &structspb.Attribute{Value: &structspb.Attribute_StringVal{StringVal: cfg.RendezvousAddr}}
		desc = "healthy; rendezvous at " + cfg.RendezvousAddr
	case cfg.ConsulService != "":
		desc = "healthy; rendezvous found in consul: a passing instance of service " + cfg.ConsulService
		if cfg.ConsulTag != "" {
			desc += " with tag " + cfg.ConsulTag
		}
	}
	if _, err := os.Stat(d.exe); err != nil {
		return &driverpb.FingerprintResponse{Attributes: attrs, Health: driverpb.FingerprintResponse_UNHEALTHY,
			HealthDescription: fmt.Sprintf("supervisor binary %s missing: %v", d.exe, err)}
	}
	return &driverpb.FingerprintResponse{Attributes: attrs, Health: driverpb.FingerprintResponse_HEALTHY, HealthDescription: desc}
}
