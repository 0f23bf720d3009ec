package topology

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func gpus(n int, model string, numa func(i int) int) []GPU {
	out := make([]GPU, n)
	for i := range out {
		out[i] = GPU{ID: fmt.Sprintf("GPU-%d", i), Index: i, Model: model, NUMA: numa(i)}
	}
	return out
}

func mesh(ids []int, lanes int) []Link {
	var out []Link
	for i := range ids {
		for j := i + 1; j < len(ids); j++ {
			out = append(out, Link{A: fmt.Sprintf("GPU-%d", ids[i]), B: fmt.Sprintf("GPU-%d", ids[j]), NVLinks: lanes, NVLinkP2P: true})
		}
	}
	return out
}

func islandIDs(t Topology) [][]string {
	var out [][]string
	for _, is := range t.Islands {
		out = append(out, is.GPUs)
	}
	return out
}

func TestBuildIslands(t *testing.T) {
	byHalf := func(i int) int { return i / 4 }
	nvswitch := func() []Link {
		// Through an NVSwitch: P2P everywhere, no direct links.
		var l []Link
		for i := 0; i < 8; i++ {
			for j := i + 1; j < 8; j++ {
				l = append(l, Link{A: fmt.Sprintf("GPU-%d", i), B: fmt.Sprintf("GPU-%d", j), NVLinkP2P: true})
			}
		}
		return l
	}()
	cases := []struct {
		name  string
		gpus  []GPU
		links []Link
		want  [][]string
	}{
		{"nvswitch is one island", gpus(8, "H100", byHalf), nvswitch,
			[][]string{{"GPU-0", "GPU-1", "GPU-2", "GPU-3", "GPU-4", "GPU-5", "GPU-6", "GPU-7"}}},
		{"two 4-GPU meshes", gpus(8, "A100", byHalf), append(mesh([]int{0, 1, 2, 3}, 4), mesh([]int{4, 5, 6, 7}, 4)...),
			[][]string{{"GPU-0", "GPU-1", "GPU-2", "GPU-3"}, {"GPU-4", "GPU-5", "GPU-6", "GPU-7"}}},
		{"interleaved islands numbered by lowest index", gpus(4, "V100", byHalf),
			[]Link{{A: "GPU-3", B: "GPU-1", NVLinks: 2}, {A: "GPU-2", B: "GPU-0", NVLinkP2P: true}},
			[][]string{{"GPU-0", "GPU-2"}, {"GPU-1", "GPU-3"}}},
		{"chain is transitive", gpus(3, "V100", byHalf),
			[]Link{{A: "GPU-0", B: "GPU-1", NVLinks: 1}, {A: "GPU-1", B: "GPU-2", NVLinks: 1}},
			[][]string{{"GPU-0", "GPU-1", "GPU-2"}}},
		{"pcie only: one island per GPU", gpus(3, "L40S", byHalf),
			[]Link{{A: "GPU-0", B: "GPU-1"}, {A: "GPU-1", B: "GPU-2"}},
			[][]string{{"GPU-0"}, {"GPU-1"}, {"GPU-2"}}},
		{"no GPUs", nil, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			top, err := Build(tc.gpus, tc.links, false)
			if err != nil {
				t.Fatal(err)
			}
			if got := islandIDs(top); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("islands = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBuildErrors(t *testing.T) {
	two := gpus(2, "A", func(int) int { return 0 })
	cases := []struct {
		name  string
		gpus  []GPU
		links []Link
		want  string
	}{
		{"duplicate", append(two, two[0]), nil, "listed twice"},
		{"empty id", []GPU{{Index: 3}}, nil, "empty ID"},
		{"unknown link end", two, []Link{{A: "GPU-0", B: "GPU-9", NVLinks: 1}}, "GPU-9"},
		{"self link", two, []Link{{A: "GPU-0", B: "GPU-0", NVLinks: 1}}, "itself"},
		{"MIG without parent", append(two, GPU{ID: "MIG-x", Parent: "GPU-7"}), nil, "MIG-x"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(tc.gpus, tc.links, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestOrderFollowsNVLinks(t *testing.T) {
	// A ring 0-2-1-3 (hybrid-cube style): direct links only along the ring.
	g := gpus(4, "V100", func(int) int { return 0 })
	links := []Link{
		{A: "GPU-0", B: "GPU-2", NVLinks: 2}, {A: "GPU-2", B: "GPU-1", NVLinks: 2},
		{A: "GPU-1", B: "GPU-3", NVLinks: 2}, {A: "GPU-3", B: "GPU-0", NVLinks: 1},
	}
	top, err := Build(g, links, false)
	if err != nil {
		t.Fatal(err)
	}
	got := top.Order([]string{"GPU-3", "GPU-1", "GPU-0", "GPU-2", "GPU-x"})
	want := []string{"GPU-0", "GPU-2", "GPU-1", "GPU-3", "GPU-x"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("order = %v, want %v", got, want)
	}
	// Across islands: island by island.
	top2, _ := Build(gpus(8, "A", func(int) int { return 0 }), append(mesh([]int{0, 1, 2, 3}, 1), mesh([]int{4, 5, 6, 7}, 1)...), false)
	got = top2.Order([]string{"GPU-5", "GPU-1", "GPU-4", "GPU-0"})
	want = []string{"GPU-0", "GPU-1", "GPU-4", "GPU-5"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("order = %v, want %v", got, want)
	}
}

func TestGroups(t *testing.T) {
	byHalf := func(i int) int { return i / 4 }
	twoIslands, err := Build(gpus(8, "A100", byHalf), append(mesh([]int{0, 1, 2, 3}, 4), mesh([]int{4, 5, 6, 7}, 4)...), false)
	if err != nil {
		t.Fatal(err)
	}
	// Islands that straddle NUMA nodes: {0,1,4,5} and {2,3,6,7}.
	cross, err := Build(gpus(8, "A100", byHalf), append(mesh([]int{0, 1, 4, 5}, 4), mesh([]int{2, 3, 6, 7}, 4)...), false)
	if err != nil {
		t.Fatal(err)
	}
	type g struct {
		name   string
		n      int
		island int
		numa   int
	}
	cases := []struct {
		name string
		top  Topology
		by   GroupBy
		want []g
	}{
		{"island", twoIslands, ByIsland, []g{{"A100 (island 0)", 4, 0, 0}, {"A100 (island 1)", 4, 1, 1}}},
		{"numa", twoIslands, ByNUMA, []g{{"A100 (numa 0)", 4, 0, 0}, {"A100 (numa 1)", 4, 1, 1}}},
		{"model", twoIslands, ByModel, []g{{"A100", 8, Unknown, Unknown}}},
		{"island across numa", cross, ByIsland, []g{{"A100 (island 0)", 4, 0, Unknown}, {"A100 (island 1)", 4, 1, Unknown}}},
		{"numa across islands", cross, ByNUMA, []g{{"A100 (numa 0)", 4, Unknown, 0}, {"A100 (numa 1)", 4, Unknown, 1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []g
			for _, grp := range tc.top.Groups(tc.by) {
				got = append(got, g{grp.Name, len(grp.Members), grp.Island, grp.NUMA})
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("groups = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestGroupsSplitModelsAndMIG(t *testing.T) {
	gs := []GPU{
		{ID: "GPU-0", Index: 0, Model: "A100", NUMA: 0},
		{ID: "GPU-1", Index: 1, Model: "A100", NUMA: 0},
		{ID: "MIG-a", Index: 0, Model: "A100 MIG 1g.10gb", NUMA: 0, Parent: "GPU-0"},
		{ID: "MIG-b", Index: 0, Model: "A100 MIG 1g.10gb", NUMA: 0, Parent: "GPU-0"},
		{ID: "GPU-2", Index: 2, Model: "L4", NUMA: 1},
	}
	top, err := Build(gs, []Link{{A: "GPU-0", B: "GPU-1", NVLinks: 12, NVLinkP2P: true}}, false)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, grp := range top.Groups(ByIsland) {
		names = append(names, fmt.Sprintf("%s=%v", grp.Name, grp.Members))
	}
	want := []string{"A100 (island 0)=[GPU-0 GPU-1]", "A100 MIG 1g.10gb (island 0)=[MIG-a MIG-b]", "L4 (island 1)=[GPU-2]"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("groups = %v, want %v", names, want)
	}
}

func TestParseGroupBy(t *testing.T) {
	for in, want := range map[string]GroupBy{"": ByModel, "island": ByIsland, "numa": ByNUMA, "model": ByModel} {
		got, err := ParseGroupBy(in)
		if err != nil || got != want {
			t.Fatalf("ParseGroupBy(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseGroupBy("rack"); err == nil || !strings.Contains(err.Error(), "group_by") {
		t.Fatalf("want an error naming group_by, got %v", err)
	}
}
