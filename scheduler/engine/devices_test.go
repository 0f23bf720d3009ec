package engine

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// grouped gives a node's GPUs impact-gpu's device groups for groupBy.
func grouped(groupBy string) nodeOpt {
	return func(n *cluster.Node) {
		n.GroupBy = groupBy
		for i := range n.GPUs {
			g := &n.GPUs[i]
			g.Group = g.Model
			if groupBy == "island" {
				g.Group = fmt.Sprintf("%s (island %d)", g.Model, g.Island)
			}
		}
	}
}

// withBlocks gives every group of the job one task "t" whose device
// blocks ask counts (named "nvidia/gpu"), with the driver.
func withBlocks(j *cluster.Job, driver string, counts ...int) *cluster.Job {
	for gi := range j.Groups {
		g := &j.Groups[gi]
		g.Devices = nil
		g.GPUs = 0
		for i, c := range counts {
			g.Devices = append(g.Devices, cluster.DeviceAsk{Task: "t", Index: i, Name: "nvidia/gpu", Count: c, Driver: driver})
			g.GPUs += c
		}
	}
	return j
}

// A whole-node ask on a node of two islands: admitted with group_by
// "model", every GPU pinned to the block; parked with group_by "island",
// the reason naming the device-group rule and group_by.
func TestWholeNodeAskAndGroupBy(t *testing.T) {
	for _, tc := range []struct {
		groupBy string
		admit   bool
	}{{"model", true}, {"island", false}} {
		t.Run(tc.groupBy, func(t *testing.T) {
			n := mkNode("n1", 8, 2, grouped(tc.groupBy))
			j := withBlocks(mkJob("j", group("main", 1, 8)), ExecDriver, 8)
			plan := mustEngine(t, nil).Decide(mustSnap(t, []*cluster.Node{n}, []*cluster.Job{j}, nil), t0)
			adm := admission(plan, "j")
			if (adm != nil) != tc.admit {
				t.Fatalf("admitted %v, want %v (explanation %+v)", adm != nil, tc.admit, plan.Explanations["j"])
			}
			if !tc.admit {
				ex := plan.Explanations["j"]
				if ex.Status != StatusParked || !strings.Contains(ex.Reason, cluster.DeviceGroupRule) || !strings.Contains(ex.Reason, `group_by = "island"`) {
					t.Fatalf("explanation %s: %q, want parked naming the device-group rule and group_by", ex.Status, ex.Reason)
				}
				return
			}
			ap := adm.Groups[0].Allocs[0]
			if len(ap.GPUs) != 8 || len(ap.Blocks) != 1 || !slices.Equal(ap.Blocks[0].GPUs, ap.GPUs) || ap.Blocks[0].Task != "t" {
				t.Fatalf("placement %+v", ap)
			}
			if !slices.Equal(ap.Islands, []int{0, 0, 0, 0, 1, 1, 1, 1}) {
				t.Fatalf("islands %v", ap.Islands)
			}
			ex := plan.Explanations["j"]
			if len(ex.Placement) != 1 || len(ex.Placement[0].Allocs[0].GPUs) != 8 {
				t.Fatalf("explanation placement %+v", ex.Placement)
			}
		})
	}
}

// 2, 2 and 4 (NVLink) GPU jobs on one 8-GPU model-grouped node are all
// admitted in one cycle, the 4 in one island, no GPU twice.
func TestTwoTwoFourShareANode(t *testing.T) {
	n := mkNode("n1", 8, 2, grouped("model"))
	jobs := []*cluster.Job{
		withBlocks(mkJob("a", group("main", 1, 2)), ExecDriver, 2),
		withBlocks(mkJob("b", group("main", 1, 2)), ExecDriver, 2),
		withBlocks(mkJob("c", group("main", 1, 4), meta("impact_topology", "nvlink")), ExecDriver, 4),
	}
	plan := mustEngine(t, nil).Decide(mustSnap(t, []*cluster.Node{n}, jobs, nil), t0)
	seen := map[string]bool{}
	for _, id := range []string{"a", "b", "c"} {
		adm := admission(plan, id)
		if adm == nil {
			t.Fatalf("%s not admitted: %+v", id, plan.Explanations[id])
		}
		ap := adm.Groups[0].Allocs[0]
		for _, g := range ap.GPUs {
			if seen[g] {
				t.Fatalf("%s given twice", g)
			}
			seen[g] = true
		}
		if id == "c" && ap.Islands[0] != ap.Islands[3] {
			t.Fatalf("the NVLink job spans islands %v", ap.Islands)
		}
	}
}

// Several device blocks in one task: each block gets its own GPUs, from
// one device group; a driver other than impact-exec draws a warning.
func TestSeveralBlocksAndDriverWarning(t *testing.T) {
	n := mkNode("n1", 8, 2, grouped("island"))
	for _, tc := range []struct {
		driver string
		warn   bool
	}{{ExecDriver, false}, {"docker", true}} {
		j := withBlocks(mkJob("j", group("main", 1, 8)), tc.driver, 4, 4)
		plan := mustEngine(t, nil).Decide(mustSnap(t, []*cluster.Node{n}, []*cluster.Job{j}, nil), t0)
		adm := admission(plan, "j")
		if adm == nil {
			t.Fatalf("%s: not admitted: %+v", tc.driver, plan.Explanations["j"])
		}
		ap := adm.Groups[0].Allocs[0]
		if len(ap.Blocks) != 2 {
			t.Fatalf("blocks %+v", ap.Blocks)
		}
		for _, b := range ap.Blocks {
			isl := map[string]bool{}
			for _, id := range b.GPUs {
				k := strings.TrimPrefix(id, "n1-g")
				isl[fmt.Sprint(k < "4")] = true
			}
			if len(b.GPUs) != 4 || len(isl) != 1 {
				t.Fatalf("block %+v is not one device group (island)", b)
			}
		}
		if got := len(adm.Warnings) > 0; got != tc.warn || len(plan.Explanations["j"].Warnings) != len(adm.Warnings) {
			t.Fatalf("%s: warnings %v", tc.driver, adm.Warnings)
		}
		if tc.warn && !strings.Contains(adm.Warnings[0], `driver "docker"`) {
			t.Fatalf("warning %q does not name the driver", adm.Warnings[0])
		}
	}
}

// A block with its own ${device.ids} constraint gets only those GPUs.
func TestBlockOwnDeviceIDs(t *testing.T) {
	n := mkNode("n1", 8, 2, grouped("model"))
	j := withBlocks(mkJob("j", group("main", 1, 2)), ExecDriver, 2)
	j.Groups[0].Devices[0].IDs = []string{"n1-g6", "n1-g1"}
	plan := mustEngine(t, nil).Decide(mustSnap(t, []*cluster.Node{n}, []*cluster.Job{j}, nil), t0)
	adm := admission(plan, "j")
	if adm == nil {
		t.Fatalf("not admitted: %+v", plan.Explanations["j"])
	}
	if got := adm.Groups[0].Allocs[0].GPUs; !slices.Equal(got, []string{"n1-g1", "n1-g6"}) {
		t.Fatalf("GPUs %v, want the block's own n1-g1, n1-g6", got)
	}
}
