package engine

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// A job admitted again while an allocation of its earlier run is still
// stopping keeps its new GPUs held until its new allocation appears: the
// old allocation is not the admission's. On Nomad 2.0.6 a job moved by a
// defragmenting preemption is admitted again within half a second of its
// stop, before the client reports its old allocation complete; counting
// that allocation as the admission's released the new GPUs at the next
// cycle, to the next job that fits them (rival), while Nomad was still
// placing the moved job there.
func TestAdmissionHeldWhileAnEarlierRunStops(t *testing.T) {
	for _, tc := range []struct {
		name string
		pol  string
		// nodes and the jobs and allocations beside v (one GPU, GPU 7 of
		// n1); big, when set, is a waiting job whose arrival moves v.
		nodes []string
		h     bool // a high-tier 4-GPU job on n2's GPUs 0-3
		big   bool
		// rivalGPUs fit the free GPUs only with v's new ones.
		rivalGPUs int
	}{
		{name: "moved by a defragmenting preemption", pol: defragOn, nodes: []string{"n1", "n2"}, h: true, big: true, rivalGPUs: 4},
		{name: "stopped and queued again (a requeue, an update)", nodes: []string{"n1"}, rivalGPUs: 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := cluster.NewStore()
			for _, n := range tc.nodes {
				mustDo(t, store.UpsertNode(mkNode(n, 8, 2)))
			}
			if tc.h {
				mustDo(t, store.UpsertJob(mkJob("h", running(), group("main", 1, 4), meta("impact_tier", "high"))))
				mustDo(t, store.UpsertAlloc(alloc("ha", "h", "n2", t0.Add(-2*time.Hour), 0, 1, 2, 3)))
			}
			vMeta := meta("impact_tier", "normal", "impact_grace", "1m")
			mustDo(t, store.UpsertJob(mkJob("v", running(), vMeta)))
			mustDo(t, store.UpsertAlloc(withCheckpoint(alloc("va", "v", "n1", t0.Add(-2*time.Hour), 7), t0.Add(-time.Minute))))
			pol := mustPolicy(t, tc.pol)
			e := mustEngine(t, pol)
			var bound AllocPlacement
			if tc.big {
				mustDo(t, store.UpsertJob(mkJob("big", group("main", 1, 8), meta("impact_tier", "normal"))))
				p := e.Decide(store.Snapshot(), t0)
				if len(p.Preemptions) != 1 || len(p.Preemptions[0].MovedTo) != 1 {
					t.Fatalf("first cycle: %+v, want v moved", p.Preemptions)
				}
				bound = p.Preemptions[0].MovedTo[0]
			}

			// v is parked again; its old allocation is still stopping.
			a, _ := store.Snapshot().Alloc("va")
			cp := *a
			cp.Stopping = true
			mustDo(t, store.UpsertAlloc(&cp))
			mustDo(t, store.UpsertJob(mkJob("v", vMeta)))
			p2 := e.Decide(store.Snapshot(), t0.Add(10*time.Second))
			av := admission(p2, "v")
			if av == nil {
				t.Fatalf("v not admitted again: %+v", p2.Explanations["v"])
			}
			to := av.Groups[0].Allocs[0]
			if tc.big && (to.NodeID != bound.NodeID || !slices.Equal(to.GPUs, bound.GPUs)) {
				t.Fatalf("v admitted on %+v, want its bound %+v", to, bound)
			}

			// The adapter registered v pinned (running); Nomad has not
			// placed its new allocation yet and the old one still stops.
			// rival fits the free GPUs only with v's new ones.
			mustDo(t, store.UpsertJob(mkJob("v", running(), vMeta)))
			mustDo(t, store.UpsertJob(mkJob("rival", group("main", 1, tc.rivalGPUs), meta("impact_tier", "high"))))
			snap := store.Snapshot()
			p3 := e.Decide(snap, t0.Add(11*time.Second))
			if err := ValidatePlan(pol, snap, p3); err != nil {
				t.Fatal(err)
			}
			for _, adm := range p3.Admissions {
				for _, g := range adm.Groups {
					for _, al := range g.Allocs {
						for _, id := range al.GPUs {
							if al.NodeID == to.NodeID && slices.Contains(to.GPUs, id) {
								t.Fatalf("%s admitted on %s %s, v's new GPU, while v's admission is pending", adm.JobID, al.NodeID, id)
							}
						}
					}
				}
			}

			// v's new allocation appears: the hold gives way to it and v is
			// not admitted a third time.
			mustDo(t, store.UpsertAlloc(alloc("vb", "v", to.NodeID, t0.Add(11*time.Second), gpuIndexes(t, to)...)))
			p4 := e.Decide(store.Snapshot(), t0.Add(12*time.Second))
			if admission(p4, "v") != nil {
				t.Fatalf("v admitted again after its new allocation appeared")
			}
		})
	}
}

// gpuIndexes maps mkNode's GPU IDs ("<node>-g<i>") back to indexes.
func gpuIndexes(t *testing.T, ap AllocPlacement) []int {
	t.Helper()
	var out []int
	for _, id := range ap.GPUs {
		var i int
		if _, err := fmt.Sscanf(id, ap.NodeID+"-g%d", &i); err != nil {
			t.Fatalf("GPU ID %q: %v", id, err)
		}
		out = append(out, i)
	}
	return out
}

// A gang member that ends before any cycle saw it (it failed, was lost or
// completed between the admission and the next snapshot) ends the
// admission's hold: it will never appear, and the adapter's deadline
// watch already found the gang running whole. Before, the hold lasted the
// admission TTL (10 minutes): the ended member's GPUs sat idle while a
// job that fits them waited ("GPUs it needs stay held ... admissions
// under way"), and the gang watch, which leaves admissions under way
// alone, did not requeue the incomplete gang. Found by
// TestPropertyAdapterLiveness (scheduler/nomad) against nomadfake.
func TestAdmissionHoldEndsWithAMemberThatEndedUnseen(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ended     string         // Job.Ended of the admitted registration
		completed map[string]int // Job.Completed
		requeue   bool           // the gang watch requeues it
	}{
		{name: "failed", ended: "allocation 1234abcd of group main failed", requeue: true},
		{name: "completed", completed: map[string]int{"main": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := mustPolicy(t, "")
			pol.Gangs.MissingMemberGrace = 10 * time.Second
			e := mustEngine(t, pol)
			store := cluster.NewStore()
			mustDo(t, store.UpsertNode(mkNode("n1", 8, 2)))
			mustDo(t, store.UpsertNode(mkNode("n2", 8, 2)))
			gMeta := meta("impact_tier", "high", "impact_topology", "any")
			mustDo(t, store.UpsertJob(mkJob("g", group("main", 2, 8), gMeta)))
			p := e.Decide(store.Snapshot(), t0)
			adm := admission(p, "g")
			if adm == nil {
				t.Fatalf("g not admitted: %+v", p.Explanations["g"])
			}
			// Nomad placed both members; one ended before the next cycle.
			g := mkJob("g", running(), group("main", 2, 8), gMeta)
			g.Ended, g.Completed = tc.ended, tc.completed
			mustDo(t, store.UpsertJob(g))
			kept := adm.Groups[0].Allocs[0]
			a := &cluster.Alloc{ID: "g0", JobID: "g", Group: "main", NodeID: kept.NodeID, GPUs: kept.GPUs, Start: t0}
			mustDo(t, store.UpsertAlloc(a))
			mustDo(t, store.UpsertJob(mkJob("w", group("main", 1, 8), meta("impact_tier", "normal"))))
			p = e.Decide(store.Snapshot(), t0.Add(10*time.Second))
			if admission(p, "w") == nil {
				t.Fatalf("w waits beside the ended member's free GPUs: %s (%q)", p.Explanations["w"].Status, p.Explanations["w"].Reason)
			}
			requeued := slices.ContainsFunc(p.Requeues, func(r Preemption) bool { return r.JobID == "g" })
			if !requeued && tc.requeue {
				// The grace starts when the watch first sees the gap.
				p = e.Decide(store.Snapshot(), t0.Add(20*time.Second))
				requeued = slices.ContainsFunc(p.Requeues, func(r Preemption) bool { return r.JobID == "g" })
			}
			if requeued != tc.requeue {
				t.Fatalf("g requeued = %v, want %v (requeues %+v)", requeued, tc.requeue, p.Requeues)
			}
		})
	}
}
