package engine

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// ValidatePlan checks a plan against the snapshot it was decided on and the
// policy: every admitted gang complete (every group, every allocation, the
// right GPU count), on existing healthy GPUs of schedulable nodes of the
// right pool, NVLink islands respected where required, no GPU given twice
// or given while held; every preemption a whole gang of a preemptible job
// of a tier its preemptor may preempt, or a defragmenting move (validateMove)
// to GPUs free and given to no one else; every withdrawal a running
// job's own allocations.
// The engine's tests run it on their plans; it is test code (neither the
// agent nor the simulator calls it).
func ValidatePlan(pol *policy.Policy, snap *cluster.Snapshot, plan *Plan) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	type gpuKey struct{ node, gpu string }
	held := map[gpuKey]string{}
	for _, a := range snap.Allocs() {
		for _, g := range a.GPUs {
			held[gpuKey{a.NodeID, g}] = "allocation " + a.ID
		}
	}
	preempted := map[string]bool{}
	for _, p := range plan.Preemptions {
		if preempted[p.JobID] {
			bad("job %s preempted twice in one plan", p.JobID)
		}
		preempted[p.JobID] = true
		j, ok := snap.Job(p.JobID)
		if !ok {
			bad("preemption of unknown job %s", p.JobID)
			continue
		}
		if j.State != cluster.JobRunning {
			bad("preemption of %s, which is not running", p.JobID)
		}
		if !pol.IsPreemptible(j.Spec) {
			bad("preemption of %s, which is not preemptible", p.JobID)
		}
		want := snap.JobAllocs(p.JobID)
		if len(want) != len(p.Allocs) {
			bad("preemption of %s stops %d of its %d allocations: gangs are preempted whole", p.JobID, len(p.Allocs), len(want))
		}
		if len(p.MovedTo) > 0 {
			validateMove(pol, snap, p, want, bad)
		}
		if pj, ok := snap.Job(p.Preemptor); ok {
			if len(p.MovedTo) == 0 && !pol.MayPreempt(pol.TierOf(pj.Spec).Name, pol.TierOf(j.Spec).Name) {
				bad("preemption of %s by %s: tier %s may not preempt tier %s", p.JobID, p.Preemptor, pol.TierOf(pj.Spec).Name, pol.TierOf(j.Spec).Name)
			}
		} else {
			bad("preemption of %s for unknown job %s", p.JobID, p.Preemptor)
		}
	}
	for _, w := range plan.Withdrawals {
		j, ok := snap.Job(w.JobID)
		if !ok || j.State != cluster.JobRunning {
			bad("withdrawal of %s, which is not a running job", w.JobID)
		}
		for _, p := range plan.Preemptions {
			// Withdrawn at the start of the cycle, a gang is running work
			// again, and another job may preempt it anew in the same plan.
			if p.JobID == w.JobID && p.Preemptor == w.Preemptor {
				bad("job %s preempted for %s and that preemption withdrawn in one plan", w.JobID, w.Preemptor)
			}
		}
		if w.Preemptor == "" || len(w.Allocs) == 0 {
			bad("withdrawal of %s names no preemptor or allocation", w.JobID)
		}
		for _, id := range w.Allocs {
			if a, ok := snap.Alloc(id); !ok || a.JobID != w.JobID {
				bad("withdrawal of %s names allocation %s, not one of its own", w.JobID, id)
			}
		}
	}
	for _, p := range plan.Preemptions {
		for _, to := range p.MovedTo {
			for _, id := range to.GPUs {
				k := gpuKey{to.NodeID, id}
				if by, dup := held[k]; dup {
					bad("GPU %s on %s: %s moves there, but it is held by %s", id, to.NodeID, p.JobID, by)
				}
				held[k] = "the move of " + p.JobID
			}
		}
	}
	for _, adm := range plan.Admissions {
		j, ok := snap.Job(adm.JobID)
		if !ok {
			bad("admission of unknown job %s", adm.JobID)
			continue
		}
		if j.State != cluster.JobQueued || j.SpecErr != nil {
			bad("admission of %s, which is not a valid queued job", adm.JobID)
		}
		if preempted[adm.JobID] {
			bad("job %s both admitted and preempted", adm.JobID)
		}
		if len(adm.Groups) != len(j.Groups) {
			bad("admission of %s places %d groups, job has %d", adm.JobID, len(adm.Groups), len(j.Groups))
			continue
		}
		jobNodes := map[string]string{} // node -> group, for a job-level distinct_hosts
		for gi, g := range j.Groups {
			gp := adm.Groups[gi]
			groupNodes := map[string]bool{}
			want := g.Count
			if g.GPUs == 0 {
				want = 0
			}
			if gp.Group != g.Name || len(gp.Allocs) != want {
				bad("admission of %s group %q: %d allocations placed, want %d", adm.JobID, g.Name, len(gp.Allocs), want)
				continue
			}
			topo := g.Spec.Topology
			if topo == jobspec.TopologyUnset {
				topo = j.Spec.Topology
			}
			for _, al := range gp.Allocs {
				n, ok := snap.Node(al.NodeID)
				if !ok {
					bad("admission of %s on unknown node %s", adm.JobID, al.NodeID)
					continue
				}
				if !n.Schedulable() {
					bad("admission of %s on unschedulable node %s", adm.JobID, n.ID)
				}
				for _, c := range g.Constraints {
					if !n.Satisfies(c) {
						bad("admission of %s group %q on node %s, which fails its constraint %s %s %q", adm.JobID, g.Name, n.ID, c.Target, c.Operand, c.Value)
					}
				}
				if g.DistinctHosts && groupNodes[n.ID] {
					bad("admission of %s group %q puts two allocations on node %s despite distinct_hosts", adm.JobID, g.Name, n.ID)
				}
				groupNodes[n.ID] = true
				if other, dup := jobNodes[n.ID]; dup && j.DistinctHosts {
					bad("admission of %s puts groups %q and %q on node %s despite the job's distinct_hosts", adm.JobID, other, g.Name, n.ID)
				}
				jobNodes[n.ID] = g.Name
				if j.Spec.Pool != "" && n.Pool != j.Spec.Pool {
					bad("admission of %s on node %s of pool %q, job wants %q", adm.JobID, n.ID, n.Pool, j.Spec.Pool)
				}
				if len(al.GPUs) != g.GPUs {
					bad("admission of %s group %q: allocation with %d GPUs, want %d", adm.JobID, g.Name, len(al.GPUs), g.GPUs)
				}
				islands := map[int]bool{}
				for _, id := range al.GPUs {
					gpu := findGPU(n, id)
					if gpu == nil {
						bad("admission of %s: node %s has no GPU %s", adm.JobID, n.ID, id)
						continue
					}
					if !gpu.Healthy {
						bad("admission of %s: GPU %s on %s is unhealthy", adm.JobID, id, n.ID)
					}
					islands[gpu.Island] = true
					k := gpuKey{n.ID, id}
					if by, dup := held[k]; dup {
						bad("GPU %s on %s given to %s but held by %s", id, n.ID, adm.JobID, by)
					}
					held[k] = "admission of " + adm.JobID
				}
				if topo == jobspec.TopologyNVLink && len(islands) > 1 {
					bad("admission of %s group %q spans %d NVLink islands on %s", adm.JobID, g.Name, len(islands), n.ID)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// validateMove checks a defragmenting preemption: allowed by the policy,
// a victim within max_victim_gpus in one allocation, moved to as many
// existing healthy GPUs of one schedulable node.
func validateMove(pol *policy.Policy, snap *cluster.Snapshot, p Preemption, allocs []*cluster.Alloc, bad func(string, ...any)) {
	if !pol.Defragment.Enabled {
		bad("preemption of %s moves it, but the policy's defragment block is off", p.JobID)
	}
	if len(allocs) != 1 || p.GPUs > pol.Defragment.MaxVictimGPUs {
		bad("move of %s: %d allocations, %d GPUs; want one allocation of at most %d", p.JobID, len(allocs), p.GPUs, pol.Defragment.MaxVictimGPUs)
	}
	n := 0
	for _, to := range p.MovedTo {
		node, ok := snap.Node(to.NodeID)
		if !ok || !node.Schedulable() {
			bad("move of %s to unknown or unschedulable node %s", p.JobID, to.NodeID)
			continue
		}
		for _, id := range to.GPUs {
			if g := findGPU(node, id); g == nil || !g.Healthy {
				bad("move of %s to missing or unhealthy GPU %s on %s", p.JobID, id, to.NodeID)
			}
		}
		n += len(to.GPUs)
	}
	if n != p.GPUs {
		bad("move of %s to %d GPUs, it holds %d", p.JobID, n, p.GPUs)
	}
}

func findGPU(n *cluster.Node, id string) *cluster.GPU {
	for i := range n.GPUs {
		if n.GPUs[i].ID == id {
			return &n.GPUs[i]
		}
	}
	return nil
}

// Apply carries out a plan on a store the way an ideal executor would,
// instantly: victims' (and requeued gangs') allocations finish at now (FinishAlloc, so their GPU
// time is charged) and their jobs are queued again;
// admitted jobs become running with one allocation per placement (IDs
// "<job>/<group>/<n>", started at now). Test code: the simulator carries
// plans out in scheduler/sim/impact and the live adapter through Nomad.
func Apply(store *cluster.Store, snap *cluster.Snapshot, plan *Plan, now time.Time) error {
	for _, p := range append(slices.Clip(plan.Preemptions), plan.Requeues...) {
		for _, id := range p.Allocs {
			store.FinishAlloc(id, now)
		}
		if j, ok := snap.Job(p.JobID); ok {
			cp := *j
			cp.State = cluster.JobQueued
			if err := store.UpsertJob(&cp); err != nil {
				return fmt.Errorf("requeue %s: %w", p.JobID, err)
			}
		}
	}
	for _, adm := range plan.Admissions {
		j, ok := snap.Job(adm.JobID)
		if !ok {
			return fmt.Errorf("admit unknown job %s", adm.JobID)
		}
		cp := *j
		cp.State = cluster.JobRunning
		if err := store.UpsertJob(&cp); err != nil {
			return fmt.Errorf("admit %s: %w", adm.JobID, err)
		}
		for _, g := range adm.Groups {
			for i, al := range g.Allocs {
				a := &cluster.Alloc{
					ID:     fmt.Sprintf("%s/%s/%d", adm.JobID, g.Group, i),
					JobID:  adm.JobID,
					Group:  g.Group,
					NodeID: al.NodeID,
					GPUs:   append([]string(nil), al.GPUs...),
					Start:  now,
				}
				if err := store.UpsertAlloc(a); err != nil {
					return fmt.Errorf("admit %s: %w", adm.JobID, err)
				}
			}
		}
	}
	return nil
}
