package device

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/device/gpu"
	"github.com/impact-sched/nomad-impact/device/gpu/fake"
	"github.com/impact-sched/nomad-impact/device/topology"
)

func exampleState(t *testing.T, name string) nodeState {
	t.Helper()
	top, err := fake.LoadTopology(filepath.Join("..", "example", "topologies", name))
	if err != nil {
		t.Fatal(err)
	}
	inv := top.Inventory
	st := nodeState{driverVersion: inv.DriverVersion, cudaDriverVersion: inv.CUDADriverVersion, nvswitch: inv.NVSwitch,
		devices: inv.Devices, links: inv.Links, present: map[string]bool{}}
	for _, d := range inv.Devices {
		st.present[d.UUID] = true
	}
	return st
}

func settingsFor(t *testing.T, by string) settings {
	t.Helper()
	s, err := Config{Enabled: true, FingerprintPeriod: "1m", Backend: BackendNVML, GroupBy: by}.parse()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func groupSummary(gs []group) []string {
	var out []string
	for _, g := range gs {
		out = append(out, fmt.Sprintf("%s=%d", g.Name, len(g.Instances)))
	}
	return out
}

// TestExampleTopologies parses every shipped topology and checks the
// device groups each grouping gives.
func TestExampleTopologies(t *testing.T) {
	cases := []struct {
		file, by string
		want     []string
	}{
		{"nvswitch-8x-h100.hcl", "island", []string{"NVIDIA H100 80GB HBM3 (island 0)=8"}},
		{"nvswitch-8x-h100.hcl", "numa", []string{"NVIDIA H100 80GB HBM3 (numa 0)=4", "NVIDIA H100 80GB HBM3 (numa 1)=4"}},
		{"two-islands-8x-a100.hcl", "island", []string{"NVIDIA A100-SXM4-80GB (island 0)=4", "NVIDIA A100-SXM4-80GB (island 1)=4"}},
		{"two-islands-8x-a100.hcl", "model", []string{"NVIDIA A100-SXM4-80GB=8"}},
		{"pcie-2numa-4x-l40s.hcl", "island", []string{"NVIDIA L40S (island 0)=1", "NVIDIA L40S (island 1)=1", "NVIDIA L40S (island 2)=1", "NVIDIA L40S (island 3)=1"}},
		{"pcie-2numa-4x-l40s.hcl", "numa", []string{"NVIDIA L40S (numa 0)=2", "NVIDIA L40S (numa 1)=2"}},
		{"mig-4x-a100.hcl", "island", []string{"NVIDIA A100-SXM4-80GB (island 0)=2", "NVIDIA A100-SXM4-80GB MIG 1g.10gb (island 0)=7", "NVIDIA A100-SXM4-80GB MIG 3g.40gb (island 0)=2"}},
	}
	files, _ := filepath.Glob(filepath.Join("..", "example", "topologies", "*.hcl"))
	covered := map[string]bool{}
	for _, tc := range cases {
		covered[tc.file] = true
		t.Run(tc.file+"/"+tc.by, func(t *testing.T) {
			st := exampleState(t, tc.file)
			snap, err := buildSnapshot(st, newHealth(), settingsFor(t, tc.by))
			if err != nil {
				t.Fatal(err)
			}
			if got := groupSummary(snap.groups); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("groups %v, want %v", got, tc.want)
			}
			// The scheduler can read the full topology back.
			var dgs []topology.DeviceGroup
			for _, g := range snap.groups {
				dg := topology.DeviceGroup{Vendor: Vendor, Type: DeviceType, Name: g.Name, Attributes: g.Attributes}
				for _, in := range g.Instances {
					if in.PCIBusID == "" || strings.ContainsRune(in.PCIBusID, 0) {
						t.Fatalf("instance %s bus id %q", in.ID, in.PCIBusID)
					}
					dg.Instances = append(dg.Instances, topology.Instance{ID: in.ID, Healthy: in.Healthy, PCIBusID: in.PCIBusID})
				}
				dgs = append(dgs, dg)
			}
			n, err := topology.FromAttributes(dgs)
			if err != nil {
				t.Fatal(err)
			}
			total := 0
			for _, g := range snap.groups {
				total += len(g.Instances)
			}
			if len(n.GPUs) != total || len(n.Islands) != len(snap.topo.Islands) {
				t.Fatalf("read back %d GPUs in %d islands, want %d in %d", len(n.GPUs), len(n.Islands), total, len(snap.topo.Islands))
			}
		})
	}
	for _, f := range files {
		if !covered[filepath.Base(f)] {
			t.Errorf("example topology %s has no test case", f)
		}
	}
}

func TestHardwareAttributes(t *testing.T) {
	snap, err := buildSnapshot(exampleState(t, "two-islands-8x-a100.hcl"), newHealth(), settingsFor(t, "island"))
	if err != nil {
		t.Fatal(err)
	}
	a := snap.groups[1].Attributes
	ints := map[string]struct {
		v    int64
		unit string
	}{
		"memory": {81920, "MiB"}, "power_limit": {400, "W"}, "pci_bandwidth": {31504, "MB/s"},
		"pcie_generation": {4, ""}, "pcie_width": {16, ""}, "nvlink_links": {12, ""}, "nvlink_bandwidth": {600, "GB/s"},
		"cuda_driver_version": {12040, ""}, "island": {1, ""}, "numa": {1, ""}, "island_size": {4, ""},
	}
	for k, want := range ints {
		if got := a[k]; got.Int == nil || *got.Int != want.v || got.Unit != want.unit {
			t.Errorf("%s = %+v, want %d %s", k, got, want.v, want.unit)
		}
	}
	if cc := a["compute_capability"]; cc.Float == nil || *cc.Float != 8.0 {
		t.Errorf("compute_capability = %+v, want float 8.0", cc)
	}
	for k, want := range map[string]string{"model": "NVIDIA A100-SXM4-80GB", "driver_version": "550.54.15", "cuda_version": "12.4", "group_by": "island"} {
		if got := a[k]; got.String == nil || *got.String != want {
			t.Errorf("%s = %+v, want %q", k, got, want)
		}
	}
	// NVLinks of a GPU whose compute capability is unknown have no
	// known speed: the bandwidth is left out, not reported as 0 GB/s.
	unknownCC := exampleState(t, "two-islands-8x-a100.hcl")
	for i := range unknownCC.devices {
		unknownCC.devices[i].ComputeCapability, unknownCC.devices[i].NVLinkBandwidthGBps = "", 0
	}
	snapCC, err := buildSnapshot(unknownCC, newHealth(), settingsFor(t, "island"))
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := snapCC.groups[0].Attributes["nvlink_bandwidth"]; ok {
		t.Errorf("nvlink_bandwidth %+v reported for links of unknown speed", a)
	}
	if _, ok := snapCC.groups[0].Attributes["compute_capability"]; ok {
		t.Errorf("compute_capability reported while unknown")
	}
	mig, err := buildSnapshot(exampleState(t, "mig-4x-a100.hcl"), newHealth(), settingsFor(t, "island"))
	if err != nil {
		t.Fatal(err)
	}
	m := mig.groups[1].Attributes
	if *m["memory"].Int != 9728 || *m["mig_profile"].String != "1g.10gb" || *m["island_size"].Int != 4 {
		t.Errorf("MIG group attributes %+v", m)
	}
}

func TestIgnoredGPUs(t *testing.T) {
	st := exampleState(t, "two-islands-8x-a100.hcl")
	s := settingsFor(t, "island")
	s.ignored = map[string]bool{st.devices[0].UUID: true, st.devices[5].UUID: true}
	snap, err := buildSnapshot(st, newHealth(), s)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"NVIDIA A100-SXM4-80GB (island 0)=3", "NVIDIA A100-SXM4-80GB (island 1)=3"}
	if got := groupSummary(snap.groups); !reflect.DeepEqual(got, want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
}

func TestHealthTransitions(t *testing.T) {
	at := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	type step struct {
		ev      *gpu.HealthEvent
		scan    []string
		changed bool
		healthy bool
		desc    string
	}
	xid := func(n int) *gpu.HealthEvent {
		return &gpu.HealthEvent{UUID: "GPU-a", Kind: gpu.EventXID, XID: n, Time: at}
	}
	kind := func(k gpu.EventKind) *gpu.HealthEvent { return &gpu.HealthEvent{UUID: "GPU-a", Kind: k, Time: at} }
	cases := []struct {
		name  string
		steps []step
	}{
		{"application XIDs do not count", []step{
			{ev: xid(13), healthy: true}, {ev: xid(31), healthy: true}, {ev: xid(43), healthy: true},
			{ev: xid(45), healthy: true}, {ev: xid(68), healthy: true}, {ev: xid(109), healthy: true},
		}},
		{"critical XID then recovery", []step{
			{ev: xid(79), changed: true, desc: "XID 79 (GPU has fallen off the bus) at 2026-11-30T08:00:00Z"},
			{ev: xid(48), changed: false, desc: "XID 79 (GPU has fallen off the bus)"},
			{ev: kind(gpu.EventRecovered), changed: true, healthy: true},
		}},
		{"ECC", []step{{ev: kind(gpu.EventECC), changed: true, desc: "uncorrectable ECC error"}}},
		{"disappears from scans and comes back reset", []step{
			{scan: []string{"GPU-a", "GPU-b"}, healthy: true},
			{ev: xid(94), changed: true, desc: "XID 94"},
			{scan: []string{"GPU-b"}, changed: true, desc: "GPU lost: not found by the backend"},
			{scan: []string{"GPU-b"}, changed: false, desc: "GPU lost"},
			{scan: []string{"GPU-a", "GPU-b"}, changed: true, healthy: true},
		}},
		{"lost event", []step{
			{ev: kind(gpu.EventLost), changed: true, desc: "GPU lost at"},
			{ev: kind(gpu.EventLost), changed: false, desc: "GPU lost at"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHealth()
			for i, st := range tc.steps {
				var changed bool
				if st.ev != nil {
					_, changed = h.event(*st.ev)
				} else {
					present := map[string]bool{}
					for _, id := range st.scan {
						present[id] = true
					}
					lost, rec := h.scan(present, at)
					changed = len(lost)+len(rec) > 0
				}
				healthy, desc := h.status("GPU-a", "")
				if changed != st.changed || healthy != st.healthy || !strings.Contains(desc, st.desc) || (healthy && desc != "") {
					t.Fatalf("step %d: changed=%v healthy=%v desc=%q, want changed=%v healthy=%v desc~%q",
						i, changed, healthy, desc, st.changed, st.healthy, st.desc)
				}
			}
		})
	}
	// A MIG instance follows its parent.
	h := newHealth()
	h.event(gpu.HealthEvent{UUID: "GPU-p", Kind: gpu.EventXID, XID: 79, Time: at})
	if ok, desc := h.status("MIG-1", "GPU-p"); ok || !strings.Contains(desc, "parent GPU GPU-p") {
		t.Fatalf("MIG under a failed parent: %v %q", ok, desc)
	}
}

func TestReserve(t *testing.T) {
	st := exampleState(t, "two-islands-8x-a100.hcl")
	snap, err := buildSnapshot(st, newHealth(), settingsFor(t, "island"))
	if err != nil {
		t.Fatal(err)
	}
	ids := func(is ...int) []string {
		var out []string
		for _, i := range is {
			out = append(out, st.devices[i].UUID)
		}
		return out
	}
	dev := t.TempDir()
	for _, n := range []string{"nvidia5", "nvidia6", "nvidiactl", "nvidia-uvm"} {
		if err := os.WriteFile(filepath.Join(dev, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, _, err := reserve(&snap, ids(6, 4, 5, 7), hostRoots{Dev: dev})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join(ids(4, 5, 6, 7), ",")
	if res.Envs[EnvCUDAVisible] != want || res.Envs[EnvNVIDIAVisible] != want {
		t.Fatalf("envs %v, want %s", res.Envs, want)
	}
	// The block's own variable, keyed by its first GPU, holds the same
	// list, and nothing else is set.
	if k := BlockEnvKey(ids(4)[0]); res.Envs[k] != want || len(res.Envs) != 3 {
		t.Fatalf("envs %v, want %s=%s besides the two visibility variables", res.Envs, k, want)
	}
	var nodes []string
	for _, d := range res.Devices {
		if d.Permissions != "rwm" || d.TaskPath != "/dev/"+filepath.Base(d.HostPath) {
			t.Fatalf("device %+v", d)
		}
		nodes = append(nodes, filepath.Base(d.HostPath))
	}
	sort.Strings(nodes)
	if !reflect.DeepEqual(nodes, []string{"nvidia-uvm", "nvidia5", "nvidia6", "nvidiactl"}) {
		t.Fatalf("device nodes %v (only existing ones)", nodes)
	}

	if _, _, err := reserve(&snap, []string{"GPU-nope", st.devices[0].UUID, "GPU-also-nope"}, hostRoots{Dev: dev}); err == nil ||
		err.Error() != "unknown device IDs: GPU-also-nope, GPU-nope" {
		t.Fatalf("err = %v", err)
	}
	if _, _, err := reserve(&snap, ids(1, 1), hostRoots{Dev: dev}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("duplicate: err = %v", err)
	}
	// A GPU whose minor number the driver did not report gets no device
	// node (not /dev/nvidia-1), the control nodes still come.
	if err := os.WriteFile(filepath.Join(dev, "nvidia-1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	noMinor := exampleState(t, "two-islands-8x-a100.hcl")
	noMinor.devices[5].Minor = gpu.Unknown
	snap2, err := buildSnapshot(noMinor, newHealth(), settingsFor(t, "island"))
	if err != nil {
		t.Fatal(err)
	}
	res, _, err = reserve(&snap2, ids(5), hostRoots{Dev: dev})
	if err != nil {
		t.Fatal(err)
	}
	nodes = nil
	for _, d := range res.Devices {
		nodes = append(nodes, filepath.Base(d.HostPath))
	}
	sort.Strings(nodes)
	if !reflect.DeepEqual(nodes, []string{"nvidia-uvm", "nvidiactl"}) {
		t.Fatalf("device nodes of a GPU without minor: %v", nodes)
	}
	if res, _, err := reserve(&snap, nil, hostRoots{Dev: dev}); err != nil || len(res.Envs) != 0 || len(res.Devices) != 0 {
		t.Fatalf("empty reserve: %+v %v", res, err)
	}
}

func TestConfigParse(t *testing.T) {
	ok := Config{Enabled: true, FingerprintPeriod: "30s", Backend: "fake", FakeTopology: "/x.hcl", GroupBy: "numa", IgnoredGPUIDs: []string{"GPU-1"}}
	if s, err := ok.parse(); err != nil || s.period != 30*time.Second || s.groupBy != topology.ByNUMA || !s.ignored["GPU-1"] {
		t.Fatalf("parse: %+v %v", s, err)
	}
	cases := []struct {
		name  string
		mut   func(*Config)
		field string
	}{
		{"period", func(c *Config) { c.FingerprintPeriod = "often" }, "fingerprint_period"},
		{"negative period", func(c *Config) { c.FingerprintPeriod = "-1s" }, "fingerprint_period"},
		{"backend", func(c *Config) { c.Backend = "dcgm" }, "backend"},
		{"fake without topology", func(c *Config) { c.FakeTopology = "" }, "fake_topology"},
		{"topology with nvml", func(c *Config) { c.Backend = "nvml" }, "fake_topology"},
		{"group_by", func(c *Config) { c.GroupBy = "rack" }, "group_by"},
		{"empty ignored id", func(c *Config) { c.IgnoredGPUIDs = []string{" "} }, "ignored_gpu_ids"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mut(&c)
			_, err := c.parse()
			if err == nil || !strings.Contains(err.Error(), `"`+tc.field+`"`) {
				t.Fatalf("err = %v, want it to name %q", err, tc.field)
			}
		})
	}
}
