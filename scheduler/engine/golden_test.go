package engine

import (
	"bytes"
	"crypto/sha256"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/plans.golden from the engine as it is")

const goldenFile = "testdata/plans.golden"

// goldenCase is one seeded world and the cycles run on it.
type goldenCase struct {
	name                   string
	seed                   uint64
	nodes, running, queued int
	cycles                 int
	policy                 string // HCL laid over the default policy
	reservations           int    // Backfill.Reservations (-1: the policy's)
}

var goldenCases = []goldenCase{
	{name: "default", seed: 1, nodes: 32, running: 70, queued: 160, cycles: 5, reservations: -1},
	{name: "reservations-3", seed: 2, nodes: 40, running: 90, queued: 200, cycles: 5, reservations: 3},
	{name: "no-reservations", seed: 3, nodes: 24, running: 50, queued: 120, cycles: 4, reservations: 0},
	{name: "tight-preemption", seed: 4, nodes: 32, running: 80, queued: 150, cycles: 5, reservations: 2,
		policy: `preemption {
  max_per_cycle              = 2
  max_gpu_hours_lost_per_hour = 40
  min_runtime                = "30m"
}`},
	{name: "quota-headroom", seed: 5, nodes: 36, running: 80, queued: 180, cycles: 5, reservations: 1,
		policy: `project "p1" { gpu_quota = 24 }
project "p2" { gpu_quota = 40 }
headroom "gpu" {
  tiers = ["critical"]
  gpus  = 150
}`},
	{name: "small-busy", seed: 6, nodes: 8, running: 24, queued: 60, cycles: 6, reservations: 1},
	{name: "wide", seed: 7, nodes: 64, running: 150, queued: 300, cycles: 3, reservations: 2},
	{name: "defragment", seed: 9, nodes: 32, running: 70, queued: 160, cycles: 5, reservations: 1,
		policy: `preemption { max_gpu_hours_lost_per_hour = 1000 }
defragment {
  enabled      = true
  gain_horizon = "2h"
}`},
}

// TestGoldenPlans pins the engine's decisions on seeded worlds: every
// admission (nodes, GPUs, islands, device blocks), every preemption and
// the essential fields of every explanation, over several cycles in which
// the plans are carried out (some admissions and every preemption a cycle
// late), running work ends and new work arrives. An optimisation must not
// change one of them; a change of behaviour regenerates the file with
// -update, in a commit that says why. The same cycles run on an engine
// without explanations, whose decisions must be the same.
func TestGoldenPlans(t *testing.T) {
	var out bytes.Buffer
	for _, gc := range goldenCases {
		runGoldenCase(t, gc, &out)
	}
	goldenBigCycle(t, &out)
	if *updateGolden {
		if err := os.WriteFile(goldenFile, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatalf("%v (run go test -run TestGoldenPlans -update to create it)", err)
	}
	if !bytes.Equal(want, out.Bytes()) {
		got := filepath.Join(t.TempDir(), "plans.golden")
		_ = os.WriteFile(got, out.Bytes(), 0o644)
		t.Fatalf("plans differ from %s at:\n%s\n(whole output in %s; -update rewrites the golden file)", goldenFile, firstDiff(string(want), out.String()), got)
	}
}

// firstDiff shows the first differing line with a little context.
func firstDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(wl), len(gl)); i++ {
		w, g := "", ""
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			var b strings.Builder
			for k := max(0, i-3); k < i; k++ {
				fmt.Fprintf(&b, "  %d: %s\n", k+1, wl[k])
			}
			fmt.Fprintf(&b, "- %d: %s\n+ %d: %s", i+1, w, i+1, g)
			return b.String()
		}
	}
	return "(equal)"
}

func goldenPolicy(t *testing.T, gc goldenCase) *policy.Policy {
	pol := mustPolicy(t, gc.policy)
	if gc.reservations >= 0 {
		pol.Backfill.Reservations = gc.reservations
	}
	return pol
}

// goldenWorld is a seeded cluster in a store, with the generator's state
// for the work that arrives later.
type goldenWorld struct {
	rng   *rand.Rand
	store *cluster.Store
	nodes []*cluster.Node
	next  int // next job number
}

var goldenTiers = []string{"critical", "high", "normal", "normal", "normal", "scavenger", "scavenger"}

// newGoldenWorld builds nodes (8 GPUs in two islands mostly, some of 4;
// racks and switches; a second pool; device groups by model on some; a few
// unhealthy GPUs and ineligible nodes) and running gangs packed onto them
// (mixed tiers, preemptibility, minimum runtimes, walltimes, checkpoints,
// some spanning nodes), then queued jobs.
func newGoldenWorld(t *testing.T, gc goldenCase) *goldenWorld {
	w := &goldenWorld{rng: rand.New(rand.NewPCG(gc.seed, 12)), store: cluster.NewStore()}
	rng := w.rng
	type freeGPU struct {
		node *cluster.Node
		idx  int
	}
	var free []freeGPU
	for i := range gc.nodes {
		gpus := 8
		if rng.IntN(6) == 0 {
			gpus = 4
		}
		opts := []nodeOpt{label("rack", fmt.Sprintf("r%d", i%4)), label("switch", fmt.Sprintf("s%d", i%8)),
			withClass([]string{"a", "b"}[rng.IntN(2)])}
		if rng.IntN(8) == 0 {
			opts = append(opts, inPool("other"))
		}
		if rng.IntN(4) == 0 {
			opts = append(opts, grouped("model"))
		}
		if rng.IntN(20) == 0 {
			opts = append(opts, ineligible())
		}
		if rng.IntN(10) == 0 {
			opts = append(opts, unhealthy(rng.IntN(gpus)))
		}
		n := mkNode(fmt.Sprintf("n%03d", i), gpus, 2, opts...)
		if err := w.store.UpsertNode(n); err != nil {
			t.Fatal(err)
		}
		w.nodes = append(w.nodes, n)
		if !n.Schedulable() {
			continue
		}
		for g := range n.GPUs {
			if n.GPUs[g].Healthy {
				free = append(free, freeGPU{n, g})
			}
		}
	}
	for r := range gc.running {
		if len(free) == 0 {
			break
		}
		id := fmt.Sprintf("run%04d", r)
		kv := []string{"impact_tier", goldenTiers[2+rng.IntN(len(goldenTiers)-2)], "impact_project", fmt.Sprintf("p%d", rng.IntN(4))}
		switch rng.IntN(6) {
		case 0:
			kv = append(kv, "impact_preemptible", "false")
		case 1:
			kv = append(kv, "impact_preemptible", "true")
		}
		if rng.IntN(3) == 0 {
			kv = append(kv, "impact_min_runtime", fmt.Sprintf("%dm", 5+rng.IntN(120)))
		}
		if rng.IntN(2) == 0 {
			kv = append(kv, "impact_walltime", fmt.Sprintf("%dm", 30+rng.IntN(600)))
		}
		if rng.IntN(4) == 0 {
			kv = append(kv, "impact_checkpoint_interval", fmt.Sprintf("%dm", 10+rng.IntN(50)))
		}
		if rng.IntN(5) == 0 {
			kv = append(kv, "impact_grace", fmt.Sprintf("%ds", 10+rng.IntN(120)))
		}
		count, per := 1, []int{1, 1, 2, 2, 4, 8}[rng.IntN(6)]
		if rng.IntN(8) == 0 {
			count = 2 + rng.IntN(2)
		}
		start := t0.Add(-time.Duration(1+rng.IntN(8*60)) * time.Minute)
		var allocs []*cluster.Alloc
		for c := range count {
			// per GPUs of one node, from the front of the free list.
			var pick []int
			var node *cluster.Node
			for k := 0; k < len(free) && len(pick) < per; k++ {
				if node == nil {
					node = free[k].node
				}
				if free[k].node == node {
					pick = append(pick, k)
				}
			}
			if len(pick) < per {
				break
			}
			a := &cluster.Alloc{ID: fmt.Sprintf("%s-%d", id, c), JobID: id, Group: "main", NodeID: node.ID, Start: start}
			if rng.IntN(3) == 0 {
				a.LastCheckpoint = start.Add(time.Duration(rng.IntN(60)) * time.Minute)
			}
			for i := len(pick) - 1; i >= 0; i-- {
				a.GPUs = append(a.GPUs, node.GPUs[free[pick[i]].idx].ID)
				free = slices.Delete(free, pick[i], pick[i]+1)
			}
			slices.Sort(a.GPUs)
			allocs = append(allocs, a)
		}
		if len(allocs) != count {
			continue
		}
		j := mkJob(id, running(), meta(kv...), group("main", count, per))
		if err := w.store.UpsertJob(j); err != nil {
			t.Fatal(err)
		}
		for _, a := range allocs {
			if err := w.store.UpsertAlloc(a); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range gc.queued {
		w.submit(t, t0.Add(-time.Duration(w.rng.IntN(12*60))*time.Minute))
	}
	return w
}

// submit queues one job of a random shape: 1 to 4 allocations of 1 to 8
// GPUs (some NVLink, some distinct_hosts, some node-class constraints,
// some device blocks), any tier and project, some in the other pool,
// some with walltimes or deadlines, a few with bad metadata.
func (w *goldenWorld) submit(t *testing.T, at time.Time) {
	rng := w.rng
	id := fmt.Sprintf("job%05d", w.next)
	w.next++
	kv := []string{"impact_tier", goldenTiers[rng.IntN(len(goldenTiers))], "impact_project", fmt.Sprintf("p%d", rng.IntN(4))}
	if rng.IntN(2) == 0 {
		kv = append(kv, "impact_walltime", fmt.Sprintf("%dm", 10+rng.IntN(300)))
	}
	if rng.IntN(10) == 0 {
		kv = append(kv, "impact_deadline", t0.Add(time.Duration(rng.IntN(48))*time.Hour).Format(time.RFC3339))
	}
	if rng.IntN(6) == 0 {
		kv = append(kv, "impact_topology", []string{"nvlink", "node", "any"}[rng.IntN(3)])
	}
	if rng.IntN(10) == 0 {
		kv = append(kv, "impact_pool", "other")
	}
	if rng.IntN(5) == 0 {
		kv = append(kv, "impact_preemptible", []string{"true", "false"}[rng.IntN(2)])
	}
	if rng.IntN(40) == 0 {
		kv = append(kv, "impact_tier", "no-such-tier")
	}
	if rng.IntN(40) == 0 {
		kv = append(kv, "impact_walltime", "soon")
	}
	shapes := [][2]int{{1, 1}, {1, 1}, {1, 2}, {1, 4}, {1, 8}, {2, 4}, {2, 8}, {3, 8}, {4, 2}, {1, 3}}
	s := shapes[rng.IntN(len(shapes))]
	j := mkJob(id, meta(kv...), group("main", s[0], s[1]), submitted(at))
	j.Priority = 40 + 10*rng.IntN(3)
	switch rng.IntN(12) {
	case 0:
		distinctGroup(j)
	case 1:
		distinctJob(j)
	case 2:
		constrained(j, cluster.Constraint{Target: "${node.class}", Operand: "=", Value: "a"})
	case 3:
		if s[1] >= 2 {
			withBlocks(j, []string{ExecDriver, "docker"}[rng.IntN(2)], s[1]/2, s[1]-s[1]/2)
		}
	}
	if err := w.store.UpsertJob(j); err != nil {
		t.Fatal(err)
	}
}

// carryOut acts on a plan the way a slow executor would: preemptions of
// the previous plan end now (their victims requeued), this plan's victims
// start stopping; three in four admissions start now, the others at the
// next carryOut (their GPUs stay held by the engine meanwhile).
type carryOut struct {
	stopping  []Preemption
	admitLate []Admission
}

func (co *carryOut) step(t *testing.T, w *goldenWorld, snap *cluster.Snapshot, p *Plan, now time.Time) {
	for _, v := range co.stopping {
		for _, id := range v.Allocs {
			w.store.FinishAlloc(id, now)
		}
		if j, ok := w.store.Snapshot().Job(v.JobID); ok {
			cp := *j
			cp.State = cluster.JobQueued
			_ = w.store.UpsertJob(&cp)
		}
	}
	co.stopping = co.stopping[:0]
	late := co.admitLate
	co.admitLate = nil
	for _, adm := range p.Admissions {
		if w.rng.IntN(4) == 0 {
			co.admitLate = append(co.admitLate, adm)
		} else {
			late = append(late, adm)
		}
	}
	cur := w.store.Snapshot()
	for _, adm := range late {
		j, ok := cur.Job(adm.JobID)
		if !ok {
			continue
		}
		cp := *j
		cp.State = cluster.JobRunning
		if err := w.store.UpsertJob(&cp); err != nil {
			t.Fatal(err)
		}
		for _, g := range adm.Groups {
			for i, al := range g.Allocs {
				a := &cluster.Alloc{ID: fmt.Sprintf("%s/%s/%d", adm.JobID, g.Group, i), JobID: adm.JobID, Group: g.Group,
					NodeID: al.NodeID, GPUs: slices.Clone(al.GPUs), Start: now}
				if err := w.store.UpsertAlloc(a); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, v := range p.Preemptions {
		for _, id := range v.Allocs {
			if a, ok := snap.Alloc(id); ok {
				cp := *a
				cp.Stopping = true
				_ = w.store.UpsertAlloc(&cp)
			}
		}
		co.stopping = append(co.stopping, v)
	}
	// Some running work ends (not the gangs being stopped).
	stopping := map[string]bool{}
	for _, v := range co.stopping {
		stopping[v.JobID] = true
	}
	cur = w.store.Snapshot()
	for _, j := range cur.Jobs() {
		if j.State != cluster.JobRunning || stopping[j.ID] || w.rng.IntN(12) != 0 {
			continue
		}
		for _, a := range cur.JobAllocs(j.ID) {
			w.store.FinishAlloc(a.ID, now)
		}
		w.store.DeleteJob(j.ID)
	}
	for range 3 + w.rng.IntN(6) {
		w.submit(t, now)
	}
}

func runGoldenCase(t *testing.T, gc goldenCase, out *bytes.Buffer) {
	pol := goldenPolicy(t, gc)
	w := newGoldenWorld(t, gc)
	e := mustEngine(t, pol)
	quiet := mustEngine(t, pol, WithoutExplanations())
	var co carryOut
	now := t0
	for cycle := range gc.cycles {
		snap := w.store.Snapshot()
		p := e.Decide(snap, now)
		if err := ValidatePlan(pol, snap, p); err != nil {
			t.Fatalf("%s cycle %d: invalid plan: %v", gc.name, cycle, err)
		}
		q := quiet.Decide(snap, now)
		if a, b := renderDecisions(p), renderDecisions(q); a != b {
			t.Fatalf("%s cycle %d: decisions differ without explanations:\n%s", gc.name, cycle, firstDiff(a, b))
		}
		if p.CostsWeighed != q.CostsWeighed {
			t.Fatalf("%s cycle %d: costs weighed %v with explanations, %v without", gc.name, cycle, p.CostsWeighed, q.CostsWeighed)
		}
		fmt.Fprintf(out, "=== %s seed %d cycle %d at %s: %d nodes, %d jobs, %d allocations\n",
			gc.name, gc.seed, cycle, now.Format(time.RFC3339), snap.NumNodes(), snap.NumJobs(), snap.NumAllocs())
		out.WriteString(renderDecisions(p))
		out.WriteString(renderExplanations(p, -1))
		co.step(t, w, snap, p, now)
		now = now.Add(time.Duration(1+w.rng.IntN(7)) * time.Minute)
	}
}

// goldenBigCycle pins the first cycle of BenchmarkDecide's world (10,000
// queued, 2,000 nodes x 8 GPUs, 5,000 running gangs): every admission and
// preemption, the first explanations in full, the count of each status and
// a digest of every explanation.
func goldenBigCycle(t *testing.T, out *bytes.Buffer) {
	if testing.Short() {
		t.Log("short: the 10,000-job cycle is not compared")
		return
	}
	snap := bigCluster(t, 2000, 5000, 10000, 1)
	p := mustEngine(t, nil).Decide(snap, t0)
	fmt.Fprintf(out, "=== bench-decide seed 1 cycle 0 at %s: %d nodes, %d jobs, %d allocations\n",
		t0.Format(time.RFC3339), snap.NumNodes(), snap.NumJobs(), snap.NumAllocs())
	out.WriteString(renderDecisions(p))
	all := renderExplanations(p, -1)
	counts := map[Status]int{}
	for _, e := range p.Explanations {
		counts[e.Status]++
	}
	var cs []string
	for s, n := range counts {
		cs = append(cs, fmt.Sprintf("%s=%d", s, n))
	}
	sort.Strings(cs)
	fmt.Fprintf(out, "statuses %s; explanations sha256 %x\n", strings.Join(cs, " "), sha256.Sum256([]byte(all)))
	out.WriteString(renderExplanations(p, 64))
}

// renderDecisions writes a plan's admissions and preemptions, one line
// per allocation.
func renderDecisions(p *Plan) string {
	var b strings.Builder
	for _, a := range p.Admissions {
		fmt.Fprintf(&b, "admit %s pool=%s score=%.4f backfilled=%t index=%d\n", a.JobID, a.Pool, a.Score.Total, a.Backfilled, a.ModifyIndex)
		writePlacement(&b, a.Groups)
		for _, w := range a.Warnings {
			fmt.Fprintf(&b, "  warning %s\n", w)
		}
	}
	for _, v := range p.Preemptions {
		fmt.Fprintf(&b, "preempt %s for %s gpus=%d allocs=%s grace=%s signal=%q requeue=%d cost=%.3f lost=%.3f\n  %s\n",
			v.JobID, v.Preemptor, v.GPUs, strings.Join(v.Allocs, ","), v.Grace, v.CheckpointSignal, v.RequeueExitCode, v.Cost, v.LostGPUHours, v.Reason)
		for _, to := range v.MovedTo {
			fmt.Fprintf(&b, "  moved to %s %s\n", to.NodeID, strings.Join(to.GPUs, ","))
		}
	}
	for _, h := range p.Headroom {
		fmt.Fprintf(&b, "headroom %+v\n", h)
	}
	return b.String()
}

func writePlacement(b *strings.Builder, groups []GroupPlacement) {
	for _, g := range groups {
		for _, al := range g.Allocs {
			fmt.Fprintf(b, "  %s %s %s islands=%v", g.Group, al.NodeID, strings.Join(al.GPUs, ","), al.Islands)
			for _, bl := range al.Blocks {
				fmt.Fprintf(b, " block %s/%d=%s", bl.Task, bl.Index, strings.Join(bl.GPUs, ","))
			}
			b.WriteString("\n")
		}
	}
}

// renderExplanations writes the first n explanations in queue order (all
// when n < 0); reasons are numbered per plan and listed after them.
func renderExplanations(p *Plan, n int) string {
	var b strings.Builder
	admitted := map[string]bool{}
	for _, a := range p.Admissions {
		admitted[a.JobID] = true
	}
	reasons := map[string]int{}
	var order []string
	fmt.Fprintf(&b, "queue %d\n", len(p.Queue))
	for i, id := range p.Queue {
		if n >= 0 && i >= n {
			break
		}
		e := p.Explanations[id]
		r, ok := reasons[e.Reason]
		if !ok {
			r = len(order)
			reasons[e.Reason] = r
			order = append(order, e.Reason)
		}
		fmt.Fprintf(&b, "%d %s %s tier=%s project=%s gpus=%d score=%.4f reason=r%d", e.Position, e.JobID, e.Status, e.Tier, e.Project, e.GPUs, e.Score.Total, r)
		if len(e.Victims) > 0 {
			fmt.Fprintf(&b, " victims=%s", strings.Join(e.Victims, ","))
		}
		if !e.ReservedUntil.IsZero() {
			fmt.Fprintf(&b, " until=%s", e.ReservedUntil.Format(time.RFC3339))
		}
		if len(e.Rejected) > 0 {
			keys := make([]string, 0, len(e.Rejected))
			for k := range e.Rejected {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			b.WriteString(" rejected:")
			for _, k := range keys {
				fmt.Fprintf(&b, " %q=%d", k, e.Rejected[k])
			}
		}
		b.WriteString("\n")
		if !admitted[id] && len(e.Placement) > 0 {
			writePlacement(&b, e.Placement)
		}
		for _, w := range e.Warnings {
			if !admitted[id] {
				fmt.Fprintf(&b, "  warning %s\n", w)
			}
		}
	}
	for i, r := range order {
		fmt.Fprintf(&b, "r%d %s\n", i, r)
	}
	return b.String()
}
