package topology

import (
	"reflect"
	"strings"
	"testing"
)

// nodeGroups encodes a topology's groups the way the plugin publishes them.
func nodeGroups(t *testing.T, top Topology, by GroupBy) []DeviceGroup {
	t.Helper()
	var out []DeviceGroup
	for _, g := range top.Groups(by) {
		attrs := top.Encode(g, by)
		attrs["model"] = String(g.Model)
		for k, a := range attrs {
			if err := a.Validate(); err != nil {
				t.Fatalf("attribute %s: %v", k, err)
			}
		}
		dg := DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: g.Name, Attributes: attrs}
		for _, id := range g.Members {
			dg.Instances = append(dg.Instances, Instance{ID: id, Healthy: true, PCIBusID: "bus-" + id})
		}
		out = append(out, dg)
	}
	return out
}

func TestEncodeTypes(t *testing.T) {
	top, err := Build(gpus(8, "A100", func(i int) int { return i / 4 }), append(mesh([]int{0, 1, 2, 3}, 4), mesh([]int{4, 5, 6, 7}, 4)...), false)
	if err != nil {
		t.Fatal(err)
	}
	grp := top.Groups(ByIsland)[1]
	attrs := top.Encode(grp, ByIsland)
	ints := map[string]int64{"island": 1, "island_size": 4, "numa": 1, "node_gpus": 8, "node_islands": 2,
		"node_numa_nodes": 2, "topology_version": 1, "gpu.GPU-5.island": 1, "gpu.GPU-5.numa": 1, "gpu.GPU-5.index": 5}
	for k, want := range ints {
		a, ok := attrs[k]
		if !ok || a.Int == nil || *a.Int != want {
			t.Errorf("%s = %+v, want int %d", k, a, want)
		}
	}
	if a := attrs["nvlink"]; a.Bool == nil || !*a.Bool {
		t.Errorf("nvlink = %+v, want true", a)
	}
	if _, ok := attrs["gpu.GPU-0.island"]; ok {
		t.Errorf("group of island 1 carries instance attributes of GPU-0")
	}
	// Grouped by model, the group spans islands: no group-wide island.
	m := top.Groups(ByModel)[0]
	attrs = top.Encode(m, ByModel)
	if _, ok := attrs["island"]; ok {
		t.Errorf("model group spanning 2 islands has an island attribute")
	}
	if a := attrs["nvlink"]; a.Bool == nil || *a.Bool {
		t.Errorf("nvlink = %+v, want false", a)
	}
}

func TestFromAttributesRoundTrip(t *testing.T) {
	gs := gpus(8, "A100", func(i int) int { return i / 4 })
	gs = append(gs, GPU{ID: "MIG-x", Index: 0, Model: "A100 MIG 1g.10gb", NUMA: 0, Parent: "GPU-0"})
	top, err := Build(gs, append(mesh([]int{0, 1, 2, 3}, 4), mesh([]int{4, 5, 6, 7}, 4)...), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, by := range []GroupBy{ByIsland, ByNUMA, ByModel} {
		t.Run(string(by), func(t *testing.T) {
			groups := nodeGroups(t, top, by)
			// A foreign plugin's group and a non-GPU group ride along.
			groups = append(groups,
				DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: "Tesla T4", Instances: []Instance{{ID: "GPU-foreign", Healthy: true}}},
				DeviceGroup{Vendor: "intel", Type: "fpga", Name: "x", Instances: []Instance{{ID: "F-1"}}})
			n, err := FromAttributes(groups)
			if err != nil {
				t.Fatal(err)
			}
			wantIslands := map[int][]string{
				0: {"GPU-0", "MIG-x", "GPU-1", "GPU-2", "GPU-3"},
				1: {"GPU-4", "GPU-5", "GPU-6", "GPU-7"},
			}
			if !reflect.DeepEqual(n.Islands, wantIslands) {
				t.Fatalf("islands = %v, want %v", n.Islands, wantIslands)
			}
			if !reflect.DeepEqual(n.IslandSize, map[int]int{0: 4, 1: 4}) {
				t.Fatalf("island sizes = %v", n.IslandSize)
			}
			if !n.NVSwitch {
				t.Fatalf("NVSwitch lost")
			}
			last := n.GPUs[len(n.GPUs)-1]
			if last.ID != "GPU-foreign" || last.Known || last.Island != Unknown {
				t.Fatalf("foreign GPU = %+v, want unknown topology, last", last)
			}
			for _, g := range n.GPUs {
				if g.ID == "GPU-5" && (g.NUMA != 1 || g.Index != 5 || g.PCIBusID != "bus-GPU-5" || g.Model != "A100") {
					t.Fatalf("GPU-5 = %+v", g)
				}
				if g.ID == "MIG-x" && g.Parent != "GPU-0" {
					t.Fatalf("MIG-x parent = %q", g.Parent)
				}
			}
		})
	}
}

func TestFromAttributesErrors(t *testing.T) {
	top, err := Build(gpus(2, "A100", func(int) int { return 0 }), mesh([]int{0, 1}, 1), false)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		mutate func(g *DeviceGroup)
		want   string
	}{
		{"missing island", func(g *DeviceGroup) { delete(g.Attributes, "gpu.GPU-1.island") }, "missing attribute gpu.GPU-1.island"},
		{"string numa", func(g *DeviceGroup) { g.Attributes["gpu.GPU-0.numa"] = String("0") }, "gpu.GPU-0.numa must be an int"},
		{"future version", func(g *DeviceGroup) { g.Attributes["topology_version"] = Int(2, "") }, "unsupported topology_version 2"},
		{"version not int", func(g *DeviceGroup) { g.Attributes["topology_version"] = String("1") }, "topology_version must be an int"},
		{"empty id", func(g *DeviceGroup) { g.Instances[0].ID = "" }, "empty ID"},
		{"negative island", func(g *DeviceGroup) { g.Attributes["gpu.GPU-0.island"] = Int(-1, "") }, "negative"},
		{"instance twice", func(g *DeviceGroup) { g.Instances = append(g.Instances, g.Instances[0]) }, "also in group"},
		{"nvswitch not bool", func(g *DeviceGroup) { g.Attributes["nvswitch"] = Int(1, "") }, "nvswitch must be a bool"},
		{"parent not string", func(g *DeviceGroup) { g.Attributes["gpu.GPU-0.parent"] = Int(1, "") }, "gpu.GPU-0.parent must be a string"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			groups := nodeGroups(t, top, ByIsland)
			tc.mutate(&groups[0])
			_, err := FromAttributes(groups)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), groups[0].Name) {
				t.Fatalf("err = %v, want it to name the group and %q", err, tc.want)
			}
		})
	}
}

func TestAttributeValidate(t *testing.T) {
	cases := []struct {
		a  Attribute
		ok bool
	}{
		{Int(1, "MiB"), true},
		{Float(1.5, "GB/s"), true},
		{String("x"), true},
		{Bool(true), true},
		{Attribute{}, false},
		{Attribute{Int: Int(1, "").Int, Bool: Bool(true).Bool}, false},
		{Attribute{String: String("x").String, Unit: "MiB"}, false},
		{Int(1, "furlongs"), false},
	}
	for i, tc := range cases {
		if err := tc.a.Validate(); (err == nil) != tc.ok {
			t.Errorf("case %d: Validate() = %v, want ok=%v", i, err, tc.ok)
		}
	}
}
