package plugintest_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/impact-sched/nomad-impact/plugin"
	"github.com/impact-sched/nomad-impact/plugin/hclspec"
	"github.com/impact-sched/nomad-impact/plugin/plugintest"
	"github.com/impact-sched/nomad-impact/plugin/proto/basepb"
	"github.com/impact-sched/nomad-impact/plugin/proto/devicepb"
	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
	"github.com/impact-sched/nomad-impact/plugin/proto/hclspecpb"
)

// recorder is a Base that records what SetConfig received.
type recorder struct {
	info   plugin.Info
	schema *hclspecpb.Spec
	mu     sync.Mutex
	calls  []*plugin.Config
}

func (r *recorder) PluginInfo() plugin.Info { return r.info }

func (r *recorder) ConfigSchema() *hclspecpb.Spec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.schema
}
func (r *recorder) SetConfig(_ context.Context, c *plugin.Config) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
	return nil
}

type device struct {
	devicepb.UnimplementedDevicePluginServer
	*recorder
}

type driver struct {
	driverpb.UnimplementedDriverServer
	*recorder
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestInProcessDevice(t *testing.T) {
	ctx := ctxT(t)
	rec := &recorder{
		info:   plugin.Info{Name: "d", Version: "1.2.0-dev"},
		schema: hclspec.Object(hclspec.Attrs{"period": hclspec.AttrDefault("period", "string", hclspec.Quote("1m"))}),
	}
	inst := plugintest.StartDevice(t, device{recorder: rec})
	info, err := inst.Base.PluginInfo(ctx, &basepb.PluginInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetType() != basepb.PluginType_DEVICE || info.GetPluginVersion() != "1.2.0-dev" {
		t.Errorf("info = %v", info)
	}
	if err := inst.SetConfigHCL(ctx, ``, nil); err != nil {
		t.Fatal(err)
	}
	if err := inst.SetConfigHCL(ctx, `period = "5s"`, plugintest.DefaultNomadConfig()); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.calls) != 2 {
		t.Fatalf("SetConfig calls = %d", len(rec.calls))
	}
	var cfg struct {
		Period string `cty:"period"`
	}
	if err := rec.calls[0].Decode(&cfg); err != nil || cfg.Period != "1m" {
		t.Errorf("first config: %q, %v", cfg.Period, err)
	}
	if rec.calls[0].Nomad != nil || rec.calls[0].APIVersion != plugin.APIVersion {
		t.Errorf("validation-style call: nomad=%v api=%q", rec.calls[0].Nomad, rec.calls[0].APIVersion)
	}
	if err := rec.calls[1].Decode(&cfg); err != nil || cfg.Period != "5s" {
		t.Errorf("second config: %q, %v", cfg.Period, err)
	}
	if rec.calls[1].Nomad.GetDriver().GetClientMaxPort() == 0 {
		t.Errorf("runtime call lost the nomad config: %v", rec.calls[1].Nomad)
	}
	// Device RPCs the implementation does not provide are Unimplemented.
	if _, err := inst.Device.Reserve(ctx, &devicepb.ReserveRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Reserve: %v", err)
	}
}

func TestInProcessDriverWithoutSchema(t *testing.T) {
	ctx := ctxT(t)
	rec := &recorder{info: plugin.Info{Name: "x", Version: "0.1.0"}}
	inst := plugintest.StartDriver(t, driver{recorder: rec})
	info, err := inst.Base.PluginInfo(ctx, &basepb.PluginInfoRequest{})
	if err != nil || info.GetType() != basepb.PluginType_DRIVER {
		t.Fatalf("info = %v, %v", info, err)
	}
	schema, err := inst.Base.ConfigSchema(ctx, &basepb.ConfigSchemaRequest{})
	if err != nil || schema.GetSpec() != nil {
		t.Fatalf("schema = %v, %v", schema, err)
	}
	// No schema: empty bytes are accepted, any bytes are refused.
	if _, err := inst.Base.SetConfig(ctx, &basepb.SetConfigRequest{PluginApiVersion: plugin.APIVersion}); err != nil {
		t.Errorf("empty config refused: %v", err)
	}
	_, err = inst.Base.SetConfig(ctx, &basepb.SetConfigRequest{MsgpackConfig: []byte{0x80}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "takes no configuration") {
		t.Errorf("config without schema: %v", err)
	}
	if _, err := plugintest.EncodeConfig(nil, `a = 1`); err == nil {
		t.Error("EncodeConfig accepted config for a plugin without schema")
	}
}

func TestServeRefusesWhatNomadWouldRefuse(t *testing.T) {
	cases := []struct {
		name string
		rec  *recorder
		want string
	}{
		{"empty name", &recorder{info: plugin.Info{Version: "0.1.0"}}, "name is empty"},
		{"bad version", &recorder{info: plugin.Info{Name: "a", Version: "latest"}}, `"latest" is not a version`},
		{"bad API version", &recorder{info: plugin.Info{Name: "a", Version: "1.0.0", APIVersions: []string{"one"}}}, `"one"`},
		{"bad schema", &recorder{info: plugin.Info{Name: "a", Version: "1.0.0"}, schema: hclspec.Object(hclspec.Attrs{"a": hclspec.Attr("a", "")})}, "type expression is empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := plugin.ServeDevice(device{recorder: tc.rec}, plugin.ServeOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestNegotiateAPIVersion(t *testing.T) {
	cases := []struct {
		versions []string
		want     string
		err      string
	}{
		{[]string{"v0.1.0"}, "v0.1.0", ""},
		{[]string{"0.1.0"}, "0.1.0", ""},
		{[]string{"v0.2.0", "v0.1"}, "v0.1", ""},
		{[]string{"v0.2.0"}, "", "no overlap"},
		{nil, "", "no API versions"},
	}
	for _, tc := range cases {
		got, err := plugintest.NegotiateAPIVersion(&basepb.PluginInfoResponse{PluginApiVersions: tc.versions})
		if got != tc.want || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%v: got %q, %v; want %q, %q", tc.versions, got, err, tc.want, tc.err)
		}
	}
}

// TestEncodeConfigRoutesAgree: the agent reaches plugin config through HCL
// JSON; native HCL in tests must give the same bytes.
func TestEncodeConfigRoutesAgree(t *testing.T) {
	spec := hclspec.Object(hclspec.Attrs{
		"enabled": hclspec.AttrDefault("enabled", "bool", "true"),
		"ratio":   hclspec.Attr("ratio", "number"),
		"tags":    hclspec.AttrDefault("tags", "list(string)", "[]"),
		"island": hclspec.BlockList("island", 0, 0, hclspec.Object(hclspec.Attrs{
			"id": hclspec.RequiredAttr("", "number"),
		})),
	})
	native, err := plugintest.EncodeConfig(spec, "ratio = 0.1\ntags = [\"a\"]\nisland { id = 1 }\nisland { id = 300 }")
	if err != nil {
		t.Fatal(err)
	}
	viaJSON, err := plugintest.EncodeConfigJSON(spec, `{"ratio": 0.1, "tags": ["a"], "island": [{"id": 1}, {"id": 300}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if string(native) != string(viaJSON) {
		t.Errorf("native %x\n  json %x", native, viaJSON)
	}
	// 0.1 is not an exact binary fraction: go-cty writes it as a string.
	if !strings.Contains(string(native), "\xa30.1") {
		t.Errorf("0.1 not encoded as a decimal string: %x", native)
	}
}

// TestSetConfigErrorCodes: bytes that do not fit the schema are the
// client's fault (InvalidArgument); a schema that stopped converting is the
// plugin's own (Internal), since the client cannot fix it.
func TestSetConfigErrorCodes(t *testing.T) {
	ctx := ctxT(t)
	good := hclspec.Object(hclspec.Attrs{"n": hclspec.AttrDefault("n", "number", "1")})
	rec := &recorder{info: plugin.Info{Name: "d", Version: "0.1.0"}, schema: good}
	inst := plugintest.StartDevice(t, device{recorder: rec})
	if _, err := inst.Base.SetConfig(ctx, &basepb.SetConfigRequest{MsgpackConfig: []byte{0x81, 0xa1, 'n', 0xa1, 'x'}}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"n"`) {
		t.Errorf("bad bytes: %v, want InvalidArgument naming n", err)
	}
	rec.mu.Lock()
	rec.schema = hclspec.Object(hclspec.Attrs{"n": hclspec.Attr("n", "")})
	rec.mu.Unlock()
	if _, err := inst.Base.SetConfig(ctx, &basepb.SetConfigRequest{MsgpackConfig: []byte{0x80}}); status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "schema is invalid") {
		t.Errorf("invalid schema: %v, want Internal", err)
	}
}
