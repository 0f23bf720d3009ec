package device_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/impact-sched/nomad-impact/device"
	"github.com/impact-sched/nomad-impact/device/gpu/fake"
	"github.com/impact-sched/nomad-impact/device/topology"
	"github.com/impact-sched/nomad-impact/plugin"
	"github.com/impact-sched/nomad-impact/plugin/config"
	"github.com/impact-sched/nomad-impact/plugin/hclspec"
	"github.com/impact-sched/nomad-impact/plugin/plugintest"
	"github.com/impact-sched/nomad-impact/plugin/proto/basepb"
	"github.com/impact-sched/nomad-impact/plugin/proto/devicepb"
)

// The conformance tests drive the built impact-gpu binary the way a Nomad
// client does (plugintest), with the fake backend on the two-island example
// topology and a control file to inject events.

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

func pluginBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		// A prebuilt binary, for machines without a Go toolchain (the
		// GPU machine the real-NVML test runs on).
		if b := os.Getenv("IMPACT_GPU_BIN"); b != "" {
			binary = b
			return
		}
		dir, err := os.MkdirTemp("", "impact-gpu-conformance")
		if err != nil {
			buildErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		binary, buildErr = plugintest.BuildMain(ctx, "../cmd/impact-gpu", dir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// node is a temporary copy of the two-island example with its control file.
type node struct {
	topo, ctl string
}

func newNode(t *testing.T) node {
	t.Helper()
	src, err := os.ReadFile("../example/topologies/two-islands-8x-a100.hcl")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	n := node{topo: filepath.Join(dir, "topo.hcl"), ctl: filepath.Join(dir, "two-islands.ctl")}
	if err := os.WriteFile(n.topo, src, 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n node) inject(t *testing.T, lines ...string) {
	t.Helper()
	f, err := os.OpenFile(n.ctl, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, l := range lines {
		if _, err := fmt.Fprintln(f, l); err != nil {
			t.Fatal(err)
		}
	}
}

func (n node) config(extra string) string {
	return fmt.Sprintf("backend = \"fake\"\nfake_topology = %q\nfingerprint_period = \"1h\"\n%s", n.topo, extra)
}

// stream is a server stream read into a channel, so tests can wait with
// deadlines. err is the stream's end, readable once msgs is closed (the
// reader never logs: it may outlive the test).
type stream[T any] struct {
	msgs chan T
	err  error
}

func recv[T any](next func() (T, error)) *stream[T] {
	s := &stream[T]{msgs: make(chan T, 16)}
	go func() {
		defer close(s.msgs)
		for {
			m, err := next()
			if err != nil {
				s.err = err
				return
			}
			s.msgs <- m
		}
	}()
	return s
}

func wait[T any](t *testing.T, s *stream[T], what string) T {
	t.Helper()
	select {
	case m, ok := <-s.msgs:
		if !ok {
			t.Fatalf("%s: stream ended: %v", what, s.err)
		}
		return m
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: nothing within 15s", what)
	}
	var zero T
	return zero
}

// nextFingerprint waits for the next fingerprint and applies the Nomad
// client's checks to it: one bad attribute would make a real client drop
// every device and stop the plugin.
func nextFingerprint(t *testing.T, s *stream[*devicepb.FingerprintResponse], what string) *devicepb.FingerprintResponse {
	t.Helper()
	fp := wait(t, s, what)
	if err := plugin.ValidateFingerprint(fp); err != nil {
		t.Fatalf("%s: a Nomad client would reject this fingerprint: %v", what, err)
	}
	return fp
}

// instances indexes a fingerprint by instance ID.
func instances(resp *devicepb.FingerprintResponse) map[string]*devicepb.DetectedDevice {
	out := map[string]*devicepb.DetectedDevice{}
	for _, g := range resp.GetDeviceGroup() {
		for _, d := range g.GetDevices() {
			out[d.GetID()] = d
		}
	}
	return out
}

func uuidOf(t *testing.T, resp *devicepb.FingerprintResponse, index int) string {
	t.Helper()
	n, err := topology.FromAttributes(device.GroupsFromFingerprint(resp))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range n.GPUs {
		if g.Index == index {
			return g.ID
		}
	}
	t.Fatalf("no GPU with index %d", index)
	return ""
}

func TestConformanceFingerprintHealthReserveStats(t *testing.T) {
	n := newNode(t)
	inst := plugintest.LoadLikeNomad(t, pluginBinary(t), plugin.KindDevice, n.config(""), plugintest.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	fp, err := inst.Device.Fingerprint(ctx, &devicepb.FingerprintRequest{})
	if err != nil {
		t.Fatal(err)
	}
	fps := recv(fp.Recv)
	first := nextFingerprint(t, fps, "first fingerprint")

	// The default grouping: one group of all eight (one model), the
	// islands in typed per-instance attributes, no group-wide island.
	if len(first.GetDeviceGroup()) != 1 {
		t.Fatalf("%d groups, want 1 (group_by defaults to model)", len(first.GetDeviceGroup()))
	}
	for _, g := range first.GetDeviceGroup() {
		if g.GetVendor() != "nvidia" || g.GetDeviceType() != "gpu" || len(g.GetDevices()) != 8 ||
			g.GetDeviceName() != "NVIDIA A100-SXM4-80GB" {
			t.Fatalf("group %s/%s/%s with %d devices", g.GetVendor(), g.GetDeviceType(), g.GetDeviceName(), len(g.GetDevices()))
		}
		if _, ok := g.GetAttributes()["island"]; ok {
			t.Fatalf("a group spanning two islands has an island attribute: %v", g.GetAttributes()["island"])
		}
		if v := g.GetAttributes()["group_by"].GetStringVal(); v != "model" {
			t.Fatalf("group_by attribute %q, want model", v)
		}
		if a := g.GetAttributes()["memory"]; a.GetIntVal() != 81920 || a.GetUnit() != "MiB" {
			t.Fatalf("memory attribute %v", a)
		}
		for _, d := range g.GetDevices() {
			if !d.GetHealthy() || !strings.HasPrefix(d.GetID(), "GPU-") || d.GetHwLocality().GetPciBusId() == "" {
				t.Fatalf("device %v", d)
			}
			if _, ok := g.GetAttributes()["gpu."+d.GetID()+".island"]; !ok {
				t.Fatalf("no per-instance island attribute for %s", d.GetID())
			}
		}
	}
	node, err := topology.FromAttributes(device.GroupsFromFingerprint(first))
	if err != nil {
		t.Fatal(err)
	}
	if len(node.Islands) != 2 || len(node.Islands[0]) != 4 || node.IslandSize[1] != 4 {
		t.Fatalf("topology read back: %+v", node.Islands)
	}
	gpu1, gpu2, gpu3 := uuidOf(t, first, 1), uuidOf(t, first, 2), uuidOf(t, first, 3)

	// An application XID changes nothing; a critical one does. Only one
	// new message may arrive, and it must already have gpu2 unhealthy.
	n.inject(t, "xid gpu1 13", "xid gpu2 79")
	second := nextFingerprint(t, fps, "fingerprint after XID")
	devs := instances(second)
	if !devs[gpu1].GetHealthy() {
		t.Fatalf("application XID 13 made gpu1 unhealthy: %v", devs[gpu1])
	}
	if devs[gpu2].GetHealthy() || !strings.Contains(devs[gpu2].GetHealthDescription(), "XID 79") {
		t.Fatalf("gpu2 after XID 79: %v", devs[gpu2])
	}

	// A GPU that disappears stays listed, unhealthy; recovery is reported.
	n.inject(t, "lost gpu3")
	third := nextFingerprint(t, fps, "fingerprint after lost")
	if d := instances(third)[gpu3]; d == nil || d.GetHealthy() || !strings.Contains(d.GetHealthDescription(), "lost") {
		t.Fatalf("gpu3 after lost: %v", d)
	}
	n.inject(t, "recover gpu3")
	fourth := nextFingerprint(t, fps, "fingerprint after recover")
	if d := instances(fourth)[gpu3]; !d.GetHealthy() || d.GetHealthDescription() != "" {
		t.Fatalf("gpu3 after recover: %v", d)
	}
	if d := instances(fourth)[gpu2]; d.GetHealthy() {
		t.Fatalf("recovering gpu3 cleared gpu2's XID: %v", d)
	}
	// The GPU with the XID is reset and usable again.
	n.inject(t, "recover gpu2")
	fifth := nextFingerprint(t, fps, "fingerprint after gpu2 recovered")
	for id, d := range instances(fifth) {
		if !d.GetHealthy() {
			t.Fatalf("%s still unhealthy after every GPU recovered: %v", id, d)
		}
	}

	// Stats: every present GPU, with timestamps and units; injected
	// utilisation shows up.
	st, err := inst.Device.Stats(ctx, &devicepb.StatsRequest{CollectionInterval: durationpb.New(100 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	stats := recv(st.Recv)
	s := wait(t, stats, "first stats")
	count := 0
	for _, g := range s.GetGroups() {
		for id, ds := range g.GetInstanceStats() {
			count++
			if ds.GetTimestamp() == nil {
				t.Fatalf("%s: no timestamp", id)
			}
			mem := ds.GetStats().GetAttributes()[device.StatMemory]
			if mem.GetUnit() != "MiB" || mem.GetIntDenominatorVal().GetValue() != 81920 {
				t.Fatalf("%s memory stat %v", id, mem)
			}
			if p := ds.GetStats().GetAttributes()[device.StatPower]; p.GetUnit() != "W" || p.GetFloatDenominatorVal().GetValue() != 400 {
				t.Fatalf("%s power stat %v", id, p)
			}
		}
	}
	if count != 8 {
		t.Fatalf("stats for %d GPUs, want 8", count)
	}
	n.inject(t, "stats gpu1 utilization=77 memory_used_mib=4096 power_w=287.5 temperature_c=66")
	deadline := time.After(15 * time.Second)
	for found := false; !found; {
		select {
		case s, ok := <-stats.msgs:
			if !ok {
				t.Fatalf("stats stream ended: %v", stats.err)
			}
			for _, g := range s.GetGroups() {
				if ds, ok := g.GetInstanceStats()[gpu1]; ok && ds.GetSummary().GetIntNumeratorVal().GetValue() == 77 {
					a := ds.GetStats().GetAttributes()
					if a[device.StatGPUUtil].GetUnit() != "%" || a[device.StatMemory].GetIntNumeratorVal().GetValue() != 4096 ||
						a[device.StatPower].GetFloatNumeratorVal().GetValue() != 287.5 || a[device.StatTemperature].GetIntNumeratorVal().GetValue() != 66 {
						t.Fatalf("stats %v", a)
					}
					found = true
				}
			}
		case <-deadline:
			t.Fatal("injected utilisation never showed in stats")
		}
	}

	// Reserve: IDs of island 1 in scrambled order come back in order;
	// unknown IDs are a clear error.
	island1 := node.Islands[1]
	scrambled := []string{island1[2], island1[0], island1[3], island1[1]}
	res, err := inst.Device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: scrambled})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join(island1, ",")
	envs := res.GetContainerRes().GetEnvs()
	if envs["CUDA_VISIBLE_DEVICES"] != want || envs["NVIDIA_VISIBLE_DEVICES"] != want {
		t.Fatalf("envs %v, want %s", envs, want)
	}
	_, err = inst.Device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: []string{island1[0], "GPU-unknown"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "unknown device IDs: GPU-unknown") {
		t.Fatalf("reserve unknown: %v", err)
	}
	res, err = inst.Device.Reserve(ctx, &devicepb.ReserveRequest{})
	if err != nil || res.GetContainerRes() == nil {
		t.Fatalf("empty reserve: %v %v", res, err)
	}
}

func TestConformanceGroupByAndIgnored(t *testing.T) {
	n := newNode(t)
	topo, err := fake.LoadTopology(n.topo)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cases := []struct {
		extra string
		want  []string
	}{
		{``, []string{"NVIDIA A100-SXM4-80GB=8"}},
		{`group_by = "model"`, []string{"NVIDIA A100-SXM4-80GB=8"}},
		{`group_by = "island"`, []string{"NVIDIA A100-SXM4-80GB (island 0)=4", "NVIDIA A100-SXM4-80GB (island 1)=4"}},
		{`group_by = "numa"`, []string{"NVIDIA A100-SXM4-80GB (numa 0)=4", "NVIDIA A100-SXM4-80GB (numa 1)=4"}},
		{fmt.Sprintf("group_by = \"island\"\nignored_gpu_ids = [%q, %q]", topo.Labels["gpu0"], topo.Labels["gpu5"]),
			[]string{"NVIDIA A100-SXM4-80GB (island 0)=3", "NVIDIA A100-SXM4-80GB (island 1)=3"}},
	}
	for _, tc := range cases {
		inst := plugintest.Launch(t, pluginBinary(t), plugin.KindDevice, plugintest.Options{})
		if err := inst.SetConfigHCL(ctx, n.config(tc.extra), plugintest.DefaultNomadConfig()); err != nil {
			t.Fatal(err)
		}
		fp, err := inst.Device.Fingerprint(ctx, &devicepb.FingerprintRequest{})
		if err != nil {
			t.Fatal(err)
		}
		first := nextFingerprint(t, recv(fp.Recv), tc.extra)
		var got []string
		for _, g := range first.GetDeviceGroup() {
			got = append(got, fmt.Sprintf("%s=%d", g.GetDeviceName(), len(g.GetDevices())))
		}
		sort.Strings(got)
		if strings.Join(got, ";") != strings.Join(tc.want, ";") {
			t.Fatalf("%s: groups %v, want %v", tc.extra, got, tc.want)
		}
		inst.Kill()
	}
}

func TestConformanceBadConfig(t *testing.T) {
	n := newNode(t)
	inst := plugintest.Launch(t, pluginBinary(t), plugin.KindDevice, plugintest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cases := []struct {
		name, src, field string
	}{
		{"good config", n.config(`group_by = "island"`) + "\n" + `enabled = true` + "\n", ""},
		{"bad period", fmt.Sprintf("backend = \"fake\"\nfake_topology = %q\nfingerprint_period = \"soon\"", n.topo), "fingerprint_period"},
		{"negative period", `fingerprint_period = "-1s"`, "fingerprint_period"},
		{"bad backend", `backend = "dcgm"`, "backend"},
		{"bad group_by", fmt.Sprintf("backend = \"fake\"\nfake_topology = %q\ngroup_by = \"rack\"", n.topo), "group_by"},
		{"fake without topology", `backend = "fake"`, "fake_topology"},
		{"topology with nvml", fmt.Sprintf("fake_topology = %q", n.topo), "fake_topology"},
		{"missing topology file", `backend = "fake"` + "\n" + `fake_topology = "/nonexistent/topo.hcl"`, "fake_topology"},
		{"empty ignored id", `ignored_gpu_ids = [""]`, "ignored_gpu_ids"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := inst.SetConfigHCL(ctx, tc.src, nil)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("good config rejected: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err = %v, want it to name %q", err, tc.field)
			}
		})
	}
	// Config bytes of the wrong type, field by field (a client with
	// another schema version, or a corrupted message): InvalidArgument
	// naming the field, and the plugin stays up.
	schema, err := inst.Base.ConfigSchema(ctx, &basepb.ConfigSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defaults, err := hclspec.DecodeHCL(schema.GetSpec(), nil, "empty.hcl")
	if err != nil {
		t.Fatal(err)
	}
	wrong := map[string]cty.Value{
		"enabled":            cty.StringVal("yes"),
		"ignored_gpu_ids":    cty.StringVal("GPU-1"),
		"fingerprint_period": cty.ListVal([]cty.Value{cty.StringVal("1m")}),
		"backend":            cty.ObjectVal(map[string]cty.Value{"name": cty.StringVal("nvml")}),
		"fake_topology":      cty.ListValEmpty(cty.String),
		"group_by":           cty.TupleVal([]cty.Value{cty.True}),
	}
	if len(wrong) != len(defaults.Type().AttributeTypes()) {
		t.Fatalf("schema has %d fields, the test covers %d", len(defaults.Type().AttributeTypes()), len(wrong))
	}
	for field, v := range wrong {
		m := defaults.AsValueMap()
		m[field] = v
		data, err := config.Marshal(cty.ObjectVal(m))
		if err != nil {
			t.Fatal(err)
		}
		_, err = inst.Base.SetConfig(ctx, &basepb.SetConfigRequest{MsgpackConfig: data, PluginApiVersion: plugin.APIVersion})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"`+field+`"`) {
			t.Errorf("%s of the wrong type: %v, want InvalidArgument naming it", field, err)
		}
	}
	if _, err := inst.Base.PluginInfo(ctx, &basepb.PluginInfoRequest{}); err != nil || inst.Exited() {
		t.Fatalf("plugin died on malformed config: %v", err)
	}

	// A bad topology file names the file and the problem.
	bad := filepath.Join(t.TempDir(), "bad.hcl")
	if err := os.WriteFile(bad, []byte("gpu \"a\" {\n  uuid = \"nope\"\n  model = \"m\"\n  memory_mib = 1\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = inst.SetConfigHCL(ctx, fmt.Sprintf("backend = \"fake\"\nfake_topology = %q", bad), nil)
	if err == nil || !strings.Contains(err.Error(), "bad.hcl") || !strings.Contains(err.Error(), `uuid "nope"`) {
		t.Fatalf("bad topology: %v", err)
	}
}

func TestConformanceDisabled(t *testing.T) {
	n := newNode(t)
	inst := plugintest.LoadLikeNomad(t, pluginBinary(t), plugin.KindDevice, n.config("enabled = false"), plugintest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fp, err := inst.Device.Fingerprint(ctx, &devicepb.FingerprintRequest{})
	if err == nil {
		_, err = fp.Recv()
	}
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "device is not enabled") {
		t.Fatalf("fingerprint of a disabled plugin: %v", err)
	}
}

func TestConformanceNoNVML(t *testing.T) {
	// The default backend on a machine without libnvidia-ml: no devices,
	// and the stream stays open (an empty first message, then nothing).
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("this machine has an NVIDIA driver")
	}
	inst := plugintest.LoadLikeNomad(t, pluginBinary(t), plugin.KindDevice, "", plugintest.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fp, err := inst.Device.Fingerprint(ctx, &devicepb.FingerprintRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first := nextFingerprint(t, recv(fp.Recv), "fingerprint without NVML")
	if len(first.GetDeviceGroup()) != 0 {
		t.Fatalf("groups without NVML: %v", first.GetDeviceGroup())
	}
	if inst.Exited() {
		t.Fatal("plugin exited")
	}
}

// TestRunByHand: started without Nomad's handshake, the binary explains
// what it is and how to install it (exit 1); -version and -help answer
// with exit 0.
func TestRunByHand(t *testing.T) {
	bin := pluginBinary(t)
	run := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, plugin.MagicCookieKey+"=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return string(out), 0
		case errors.As(err, &exit):
			return string(out), exit.ExitCode()
		}
		t.Fatal(err)
		return "", -1
	}
	out, code := run()
	if code != 1 || !strings.Contains(out, "Nomad device plugin") || !strings.Contains(out, `plugin "impact-gpu"`) || !strings.Contains(out, "plugin_dir") {
		t.Fatalf("bare run: exit %d, output:\n%s", code, out)
	}
	if out, code := run("-version"); code != 0 || !strings.HasPrefix(out, "impact-gpu "+device.Version) {
		t.Fatalf("-version: exit %d, output %q", code, out)
	}
	if out, code := run("-help"); code != 0 || !strings.Contains(out, "fake_topology") {
		t.Fatalf("-help: exit %d, output %q", code, out)
	}
}
