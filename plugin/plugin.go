package plugin

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	goplugin "github.com/hashicorp/go-plugin"
	"github.com/zclconf/go-cty/cty"

	"github.com/impact-sched/nomad-impact/plugin/config"
	"github.com/impact-sched/nomad-impact/plugin/proto/basepb"
	"github.com/impact-sched/nomad-impact/plugin/proto/devicepb"
	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
	"github.com/impact-sched/nomad-impact/plugin/proto/hclspecpb"
)

// Handshake values of Nomad's plugin protocol; unchanged since Nomad 0.9.
const (
	MagicCookieKey   = "NOMAD_PLUGIN_MAGIC_COOKIE"
	MagicCookieValue = "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255"
	// ProtocolVersion is go-plugin's application protocol version.
	ProtocolVersion = 2
	// APIVersion is the Nomad plugin API version both device and driver
	// plugins speak; the client accepts only this one.
	APIVersion = "v0.1.0"
)

// Plugin-set keys a Nomad client dispenses. With gRPC they are client-side
// names only, but Nomad serves exactly {base, device} or {base, driver}.
const (
	PluginSetBase   = "base"
	PluginSetDevice = "device"
	PluginSetDriver = "driver"
)

// Handshake is the go-plugin handshake a Nomad client and its plugins agree
// on. A function rather than a variable so nobody can change it.
func Handshake() goplugin.HandshakeConfig {
	return goplugin.HandshakeConfig{
		ProtocolVersion:  ProtocolVersion,
		MagicCookieKey:   MagicCookieKey,
		MagicCookieValue: MagicCookieValue,
	}
}

// Kind is the kind of plugin: device or driver.
type Kind int

const (
	KindDevice Kind = iota + 1
	KindDriver
)

func (k Kind) String() string {
	switch k {
	case KindDevice:
		return PluginSetDevice
	case KindDriver:
		return PluginSetDriver
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// PluginType is the type PluginInfo reports for this kind.
func (k Kind) PluginType() basepb.PluginType {
	switch k {
	case KindDevice:
		return basepb.PluginType_DEVICE
	case KindDriver:
		return basepb.PluginType_DRIVER
	}
	return basepb.PluginType_UNKNOWN
}

// Info identifies a plugin to Nomad.
type Info struct {
	// Name is what jobs use (driver = "<name>") and what the node's
	// device/driver maps are keyed by; it need not be the binary's name.
	Name string
	// Version is the plugin's own version, e.g. "0.1.0"; Nomad refuses to
	// load a plugin whose version does not parse.
	Version string
	// APIVersions are the Nomad plugin API versions spoken; empty means
	// []string{APIVersion}.
	APIVersions []string
}

// versionRE accepts a subset of what hashicorp/go-version parses, so that
// anything passing here also loads in Nomad.
var versionRE = regexp.MustCompile(`^v?[0-9]+(\.[0-9]+){0,2}(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// Validate reports problems that would make Nomad refuse to load the
// plugin (and with it abort the agent's start-up).
func (i Info) Validate() error {
	var errs []error
	if i.Name == "" {
		errs = append(errs, errors.New("plugin name is empty"))
	}
	if !versionRE.MatchString(i.Version) {
		errs = append(errs, fmt.Errorf("plugin version %q is not a version", i.Version))
	}
	for _, v := range i.APIVersions {
		if !versionRE.MatchString(v) {
			errs = append(errs, fmt.Errorf("plugin API version %q is not a version", v))
		}
	}
	return errors.Join(errs...)
}

func (i Info) apiVersions() []string {
	if len(i.APIVersions) == 0 {
		return []string{APIVersion}
	}
	return append([]string(nil), i.APIVersions...)
}

// Config is what SetConfig receives: the plugin block's config decoded
// against ConfigSchema, plus agent settings.
type Config struct {
	// Value is the config as a cty object of the schema's type (every
	// schema key present, null when unset and without default). It is
	// cty.EmptyObjectVal when the plugin publishes no schema.
	Value cty.Value
	// Nomad holds agent settings; nil in the validation process, where the
	// client only checks that the config is accepted.
	Nomad *basepb.NomadConfig
	// APIVersion is the negotiated plugin API version (the plugin's own
	// spelling from Info.APIVersions).
	APIVersion string
}

// Decode stores the config into target, a pointer to a struct with `cty`
// tags naming every schema attribute (see package plugin/config). Errors
// name the bad field.
func (c *Config) Decode(target any) error {
	return config.FromValue(c.Value, target)
}

// Base is what every plugin implements in addition to its kind's gRPC
// service.
type Base interface {
	// PluginInfo must be cheap and must not depend on SetConfig.
	PluginInfo() Info
	// ConfigSchema is the schema of the plugin block's config {}; nil means
	// the plugin takes no config (and Nomad then refuses any config block,
	// even an empty one, so prefer an empty hclspec.Object).
	ConfigSchema() *hclspecpb.Spec
	// SetConfig applies the config. It is called several times per
	// process (twice during validation, without Nomad settings), so it must
	// be idempotent. A returned error rejects the config; a Nomad agent
	// then refuses to start.
	SetConfig(ctx context.Context, cfg *Config) error
}

// DevicePlugin is a device plugin: Base plus the generated DevicePlugin
// service (embed devicepb.UnimplementedDevicePluginServer).
type DevicePlugin interface {
	Base
	devicepb.DevicePluginServer
}

// DriverPlugin is a task driver: Base plus the generated Driver service
// (embed driverpb.UnimplementedDriverServer).
type DriverPlugin interface {
	Base
	driverpb.DriverServer
}
