package plugin_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"github.com/zclconf/go-cty/cty"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/impact-sched/nomad-impact/plugin"
	"github.com/impact-sched/nomad-impact/plugin/config"
	"github.com/impact-sched/nomad-impact/plugin/hclspec"
	"github.com/impact-sched/nomad-impact/plugin/plugintest"
	"github.com/impact-sched/nomad-impact/plugin/proto/basepb"
	"github.com/impact-sched/nomad-impact/plugin/proto/devicepb"
	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
)

// testPluginBin is the test plugin binary, built once in TestMain and only
// read afterwards.
var testPluginBin string

func TestMain(m *testing.M) {
	os.Exit(plugintest.RunWithMain(m, "./internal/testplugin", &testPluginBin))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

const goodConfig = `
vendor = "impact"
devices = 3
scale = 0.1
tags = ["a", "b"]
labels = { zone = "z1" }
island {
  id = 0
  name = "left"
}
island { id = 1 }
`

func TestDevicePluginThroughHarness(t *testing.T) {
	ctx := ctxT(t)
	inst := plugintest.Launch(t, testPluginBin, plugin.KindDevice, plugintest.Options{})

	info, err := inst.Base.PluginInfo(ctx, &basepb.PluginInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetType() != basepb.PluginType_DEVICE || info.GetName() != "impact-test-device" ||
		info.GetPluginVersion() != "0.1.0" || strings.Join(info.GetPluginApiVersions(), ",") != plugin.APIVersion {
		t.Fatalf("PluginInfo = %v", info)
	}

	schema, err := inst.Base.ConfigSchema(ctx, &basepb.ConfigSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ty, err := hclspec.ImpliedType(schema.GetSpec())
	if err != nil {
		t.Fatalf("schema does not convert as Nomad would: %v", err)
	}
	for _, k := range []string{"vendor", "enabled", "devices", "model", "scale", "labels", "tags", "island"} {
		if !ty.HasAttribute(k) {
			t.Errorf("schema lacks %q: %s", k, ty.FriendlyName())
		}
	}

	if err := inst.SetConfigHCL(ctx, goodConfig, plugintest.DefaultNomadConfig()); err != nil {
		t.Fatalf("SetConfig: %v", err)
	}

	// The typed config shows through the fingerprint.
	stream, err := inst.Device.Fingerprint(ctx, &devicepb.FingerprintRequest{})
	if err != nil {
		t.Fatal(err)
	}
	fp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := plugin.ValidateFingerprint(fp); err != nil {
		t.Errorf("the client would reject this fingerprint: %v", err)
	}
	if len(fp.GetDeviceGroup()) != 1 {
		t.Fatalf("groups = %v", fp.GetDeviceGroup())
	}
	g := fp.GetDeviceGroup()[0]
	attrs := g.GetAttributes()
	switch {
	case g.GetVendor() != "impact" || g.GetDeviceName() != "Fake GPU" || len(g.GetDevices()) != 3:
		t.Errorf("group = %v", g)
	case attrs["scale"].GetFloatVal() != 0.1:
		t.Errorf("scale = %v (0.1 travels as a decimal string)", attrs["scale"])
	case attrs["tags"].GetStringVal() != "a,b" || attrs["label_zone"].GetStringVal() != "z1":
		t.Errorf("tags/labels = %v", attrs)
	case attrs["islands"].GetIntVal() != 2:
		t.Errorf("islands = %v", attrs["islands"])
	}

	res, err := inst.Device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: []string{"fake-0", "fake-2"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.GetContainerRes().GetEnvs()["FAKE_VISIBLE_DEVICES"]; got != "fake-0,fake-2" {
		t.Errorf("reserve env = %q", got)
	}
}

func TestLoadLikeNomad(t *testing.T) {
	ctx := ctxT(t)
	dev := plugintest.LoadLikeNomad(t, testPluginBin, plugin.KindDevice, `vendor = "impact"`, plugintest.Options{})
	stream, err := dev.Device.Stats(ctx, &devicepb.StatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(st.GetGroups()[0].GetInstanceStats()); n != 2 {
		t.Errorf("stats for %d devices, want the default 2", n)
	}

	drv := plugintest.LoadLikeNomad(t, testPluginBin, plugin.KindDriver, ``, plugintest.Options{Args: []string{"-driver"}})
	caps, err := drv.Driver.Capabilities(ctx, &driverpb.CapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if caps.GetCapabilities() == nil {
		t.Error("no capabilities")
	}
	schema, err := drv.Driver.TaskConfigSchema(ctx, &driverpb.TaskConfigSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := hclspec.Validate(schema.GetSpec()); err != nil {
		t.Errorf("task config schema: %v", err)
	}
	fs, err := drv.Driver.Fingerprint(ctx, &driverpb.FingerprintRequest{})
	if err != nil {
		t.Fatal(err)
	}
	fp, err := fs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if fp.GetHealth() != driverpb.FingerprintResponse_HEALTHY {
		t.Errorf("driver health = %v", fp.GetHealth())
	}
	// Unimplemented RPCs answer Unimplemented, which Nomad tolerates for
	// Init and Shutdown.
	if _, err := drv.Driver.Init(ctx, &driverpb.InitRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Init: %v, want Unimplemented", err)
	}
}

// TestMalformedConfigIsRejectedByField sends bad config bytes to a real
// plugin process; each must be refused with an error naming the field, and
// the process must survive (no panic).
func TestMalformedConfigIsRejectedByField(t *testing.T) {
	ctx := ctxT(t)
	inst := plugintest.Launch(t, testPluginBin, plugin.KindDevice, plugintest.Options{})
	schema, err := inst.Base.ConfigSchema(ctx, &basepb.ConfigSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	good, err := hclspec.DecodeHCL(schema.GetSpec(), []byte(`vendor = "impact"`), "c.hcl")
	if err != nil {
		t.Fatal(err)
	}
	with := func(k string, v cty.Value) []byte {
		m := good.AsValueMap()
		m[k] = v
		b, err := config.Marshal(cty.ObjectVal(m))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	island := func(id cty.Value) cty.Value {
		return cty.ListVal([]cty.Value{cty.ObjectVal(map[string]cty.Value{"id": id, "name": cty.NullVal(cty.String)})})
	}
	cases := []struct {
		name, field string
		data        []byte
	}{
		{"wrong type", "enabled", with("enabled", cty.StringVal("yes"))},
		{"missing required field", "vendor", with("vendor", cty.NullVal(cty.String))},
		{"plugin's own check", "devices", with("devices", cty.NumberIntVal(100))},
		{"fraction for an integer", "devices", with("devices", cty.MustParseNumberVal("2.5"))},
		{"nested block field", "island[0].id", with("island", island(cty.StringVal("x")))},
		{"garbage msgpack", "", []byte("\x82\xa6vendor\xc1garbage")},
		{"truncated msgpack", "", with("vendor", cty.StringVal("impact"))[:9]},
		{"empty config with a schema", "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := inst.Base.SetConfig(ctx, &basepb.SetConfigRequest{MsgpackConfig: tc.data, PluginApiVersion: plugin.APIVersion})
			if err == nil {
				t.Fatal("malformed config accepted")
			}
			t.Logf("error: %v", err)
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("code = %v, want InvalidArgument: %v", status.Code(err), err)
			}
			if tc.field != "" && !strings.Contains(err.Error(), `"`+tc.field+`"`) {
				t.Errorf("error does not name field %q: %v", tc.field, err)
			}
			if _, err := inst.Base.PluginInfo(ctx, &basepb.PluginInfoRequest{}); err != nil || inst.Exited() {
				t.Fatalf("plugin died after malformed config: %v", err)
			}
		})
	}
	// HCL that does not match the schema fails before reaching the plugin,
	// as in the agent.
	if _, err := plugintest.EncodeConfig(schema.GetSpec(), `devices = 1`); err == nil || !strings.Contains(err.Error(), `"vendor" is required`) {
		t.Errorf("EncodeConfig without vendor: %v", err)
	}
}

func TestHandshakeRejectsWrongCookie(t *testing.T) {
	cfg := plugintest.ClientConfig(testPluginBin, plugin.KindDevice, plugintest.Options{Logger: plugintest.TestLogger(t)})
	cfg.MagicCookieValue = "not-nomad"
	cfg.StartTimeout = 20 * time.Second
	client := goplugin.NewClient(cfg)
	defer client.Kill()
	if _, err := client.Client(); err == nil {
		t.Fatal("plugin served a client with the wrong magic cookie")
	}
	// Run bare, without any cookie: go-plugin's refusal and a non-zero exit.
	out, err := execBare(testPluginBin)
	if err == nil || !strings.Contains(out, "This binary is a plugin") {
		t.Errorf("bare run: err=%v out=%q", err, out)
	}
}
