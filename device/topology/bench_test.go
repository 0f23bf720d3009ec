package topology

import (
	"fmt"
	"testing"
)

// BenchmarkFromAttributes reads back one 8-GPU two-island node, as the
// scheduler does for every node update.
func BenchmarkFromAttributes(b *testing.B) {
	var gs []GPU
	for i := 0; i < 8; i++ {
		gs = append(gs, GPU{ID: fmt.Sprintf("GPU-%d", i), Index: i, Model: "A100", NUMA: i / 4})
	}
	top, err := Build(gs, append(mesh([]int{0, 1, 2, 3}, 4), mesh([]int{4, 5, 6, 7}, 4)...), false)
	if err != nil {
		b.Fatal(err)
	}
	var groups []DeviceGroup
	for _, g := range top.Groups(ByIsland) {
		dg := DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: g.Name, Attributes: top.Encode(g, ByIsland)}
		for _, id := range g.Members {
			dg.Instances = append(dg.Instances, Instance{ID: id, Healthy: true})
		}
		groups = append(groups, dg)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := FromAttributes(groups); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBuildGroups computes islands and groups of an 8-GPU NVSwitch node.
func BenchmarkBuildGroups(b *testing.B) {
	var gs []GPU
	var links []Link
	for i := 0; i < 8; i++ {
		gs = append(gs, GPU{ID: fmt.Sprintf("GPU-%d", i), Index: i, Model: "H100", NUMA: i / 4})
		for j := i + 1; j < 8; j++ {
			links = append(links, Link{A: fmt.Sprintf("GPU-%d", i), B: fmt.Sprintf("GPU-%d", j), NVLinkP2P: true})
		}
	}
	for i := 0; i < b.N; i++ {
		top, err := Build(gs, links, true)
		if err != nil {
			b.Fatal(err)
		}
		for _, g := range top.Groups(ByIsland) {
			_ = top.Encode(g, ByIsland)
		}
	}
}
