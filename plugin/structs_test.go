package plugin_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/impact-sched/nomad-impact/plugin"
	"github.com/impact-sched/nomad-impact/plugin/proto/devicepb"
	"github.com/impact-sched/nomad-impact/plugin/proto/structspb"
)

func TestValidateFingerprint(t *testing.T) {
	group := func(mut func(g *devicepb.DeviceGroup)) *devicepb.FingerprintResponse {
		g := &devicepb.DeviceGroup{
			Vendor: "nvidia", DeviceType: "gpu", DeviceName: "H100",
			Devices: []*devicepb.DetectedDevice{{ID: "GPU-1", Healthy: true}},
			Attributes: map[string]*structspb.Attribute{
				"memory": plugin.IntAttr(81559, "MiB"), "power": plugin.FloatAttr(700, "W"),
				"island": plugin.IntAttr(0, ""), "model": plugin.StringAttr("H100"), "nvlink": plugin.BoolAttr(true),
			},
		}
		if mut != nil {
			mut(g)
		}
		return &devicepb.FingerprintResponse{DeviceGroup: []*devicepb.DeviceGroup{g}}
	}
	cases := []struct {
		name string
		resp *devicepb.FingerprintResponse
		want string
	}{
		{"valid", group(nil), ""},
		{"empty response", &devicepb.FingerprintResponse{}, ""},
		{"missing vendor", group(func(g *devicepb.DeviceGroup) { g.Vendor = "" }), "vendor, device_type and device_name"},
		{"device without ID", group(func(g *devicepb.DeviceGroup) { g.Devices[0].ID = "" }), "device 0 has no ID"},
		{"unit on a string", group(func(g *devicepb.DeviceGroup) { g.Attributes["model"].Unit = "MiB" }), `"model": unit "MiB" on a non-numeric`},
		{"unknown unit", group(func(g *devicepb.DeviceGroup) { g.Attributes["memory"].Unit = "mib" }), `unknown unit "mib"`},
		{"no value", group(func(g *devicepb.DeviceGroup) { g.Attributes["x"] = &structspb.Attribute{} }), `"x": attribute has no value`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := plugin.ValidateFingerprint(tc.resp)
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestTaskErrorCarriesRecoverableDetail(t *testing.T) {
	for _, rec := range []bool{true, false} {
		err := plugin.TaskError(errors.New("image pull failed"), rec)
		st, _ := status.FromError(err)
		if st.Message() != "image pull failed" {
			t.Errorf("message = %q", st.Message())
		}
		// The client resolves the detail by this exact type URL.
		var found bool
		for _, d := range st.Proto().GetDetails() {
			if d.GetTypeUrl() == "type.googleapis.com/hashicorp.nomad.plugins.shared.structs.RecoverableError" {
				found = true
				var re structspb.RecoverableError
				if err := anypb.UnmarshalTo(d, &re, proto.UnmarshalOptions{}); err != nil || re.GetRecoverable() != rec {
					t.Errorf("detail = %v, %v", &re, err)
				}
			}
		}
		if !found {
			t.Errorf("no RecoverableError detail in %v", st.Proto())
		}
		if got, ok := plugin.IsRecoverable(err); !ok || got != rec {
			t.Errorf("IsRecoverable = %v, %v", got, ok)
		}
	}
	if plugin.TaskError(nil, true) != nil {
		t.Error("TaskError(nil) is not nil")
	}
	if _, ok := plugin.IsRecoverable(errors.New("plain")); ok {
		t.Error("plain error reported a detail")
	}
}
