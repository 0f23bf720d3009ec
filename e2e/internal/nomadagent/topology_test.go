package nomadagent

import (
	"path/filepath"
	"testing"

	"github.com/impact-sched/nomad-impact/device/gpu/fake"
)

// Copies of one topology for different nodes parse, keep every GPU, and
// share no GPU UUID; the copy's control file is in the node's directory.
func TestNodeTopologyDistinctUUIDs(t *testing.T) {
	src := filepath.Join(RepoRoot(), "example", "topologies", "two-islands-8x-a100.hcl")
	orig, err := fake.LoadTopology(src)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for i := range 3 {
		dir := t.TempDir()
		topo, err := fake.LoadTopology(NodeTopology(t, src, dir, i))
		if err != nil {
			t.Fatalf("node %d copy: %v", i, err)
		}
		if len(topo.Labels) != len(orig.Labels) {
			t.Fatalf("node %d copy has %d GPUs, the original %d", i, len(topo.Labels), len(orig.Labels))
		}
		if filepath.Dir(topo.ControlFile) != dir {
			t.Errorf("node %d control file %q not in %s", i, topo.ControlFile, dir)
		}
		for label, uuid := range topo.Labels {
			if uuid == orig.Labels[label] {
				t.Errorf("node %d %s kept the original UUID %s", i, label, uuid)
			}
			if other, dup := seen[uuid]; dup {
				t.Errorf("UUID %s on node %d and node %d", uuid, other, i)
			}
			seen[uuid] = i
		}
	}
}
