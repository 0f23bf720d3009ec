// Package plugin serves Nomad external plugins (device plugins and task
// drivers) over Nomad's go-plugin/gRPC protocol without importing Nomad.
//
// A plugin binary implements [Base] (identity, config schema, typed config)
// plus the generated gRPC server interface of its kind, and hands itself to
// [ServeDevice] or [ServeDriver] from main. The package takes care of the
// go-plugin handshake Nomad expects (app protocol 2, Nomad's magic cookie,
// gRPC only), of the BasePlugin service, and of decoding the MessagePack
// config Nomad sends against the plugin's hclspec schema.
//
// Sub-packages:
//
//   - plugin/proto/... : the generated protobuf/gRPC code (basepb, devicepb,
//     driverpb, hclspecpb, structspb).
//   - plugin/hclspec   : a builder for hclspec schemas, plus the conversion to
//     HCL's hcldec that Nomad applies (used to derive the cty type and by the
//     test harness to encode config exactly as Nomad does).
//   - plugin/config    : MessagePack (go-cty encoding) to cty.Value to Go
//     struct decoding with errors naming the bad field; also the encoder.
//   - plugin/plugintest: a conformance harness that launches a plugin binary
//     as a Nomad client would and returns gRPC clients.
//   - plugin/units     : the units the client accepts on device attributes
//     (no dependencies, so pure packages share the one list).
//
// Usage, for a device plugin:
//
//	type Config struct {
//		Enabled bool   `cty:"enabled"`
//		Period  string `cty:"fingerprint_period"`
//	}
//
//	type Device struct {
//		devicepb.UnimplementedDevicePluginServer // required by grpc-go
//		cfg Config
//	}
//
//	func (d *Device) PluginInfo() plugin.Info {
//		return plugin.Info{Name: "impact-gpu", Version: "0.1.0"}
//	}
//
//	func (d *Device) ConfigSchema() *hclspecpb.Spec {
//		return hclspec.Object(hclspec.Attrs{
//			"enabled":            hclspec.AttrDefault("enabled", "bool", "true"),
//			"fingerprint_period": hclspec.AttrDefault("fingerprint_period", "string", hclspec.Quote("1m")),
//		})
//	}
//
//	func (d *Device) SetConfig(ctx context.Context, c *plugin.Config) error {
//		var cfg Config
//		if err := c.Decode(&cfg); err != nil {
//			return err // already names the bad field
//		}
//		d.cfg = cfg // SetConfig may be called several times
//		return nil
//	}
//
//	// Fingerprint, Reserve and Stats implement devicepb.DevicePluginServer.
//
//	func main() {
//		if err := plugin.ServeDevice(&Device{}, plugin.ServeOptions{}); err != nil {
//			fmt.Fprintln(os.Stderr, err) // invalid PluginInfo or schema
//			os.Exit(1)
//		}
//	}
//
// A driver does the same with [ServeDriver] and driverpb.DriverServer
// (embedding driverpb.UnimplementedDriverServer); task configs are decoded
// with config.NewDecoder(taskSchema).Decode(task.MsgpackDriverConfig, &cfg),
// and StartTask failures are returned as [TaskError](err, recoverable) so the
// client knows whether to restart the task.
//
// Device plugins should check each fingerprint with [ValidateFingerprint]
// before sending it: one bad attribute makes the client drop all devices and
// stop the plugin. [IntAttr], [FloatAttr], [StringAttr] and [BoolAttr] build
// attributes; package plugin/units lists the units the client accepts.
//
// Tests: plugintest.StartDevice/StartDriver serve an implementation
// in-process; plugintest.Build + plugintest.Launch/LoadLikeNomad run a
// plugin binary exactly as the Nomad client does.
//
// Logging: ServeOptions.Logger (default: JSON hclog on the process's original
// stderr, which Nomad re-logs with the right level). After serving starts
// go-plugin replaces os.Stdout/os.Stderr, so never print to them directly.
package plugin
