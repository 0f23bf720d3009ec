package engine

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/internal/buffer"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
	"github.com/impact-sched/nomad-impact/scheduler/preempt"
)

// The utilisation layer's decisions. The adapter (or the simulator) feeds
// the engine one sample per allocation per poll of the device stats
// (ObserveUtilization); Decide then judges every running job against its
// tier's idle policy:
//
//   - idle: the mean utilisation of the GPUs its allocations hold has been
//     below the threshold, in every sample, for at least the duration;
//   - hung: every allocation (gang member) has been idle in that sense at
//     once, each over its own GPUs.
//
// A sample with missing stats never counts as idle: it breaks the run, and
// the duration starts again from the next known sample. Idle time is
// measured between samples (from the first low one to the last one), never
// to `now`, so stats that stop arriving freeze it instead of growing it.
//
// What is done about it is the tier's idle action: report (Plan.Running
// and logs only), preemptible (the job becomes a preemption candidate, see
// assessHolders) or requeue (a hung job is stopped and queued again,
// Plan.Reclaims). A job whose impact_idle = "ignore" holds is only
// reported.

// AllocUtilization is one poll's utilisation of one allocation.
type AllocUtilization struct {
	AllocID string
	// JobID is the allocation's job (cluster.JobKey).
	JobID string
	// GPUs the allocation holds (the weight of its sample in the job's
	// mean).
	GPUs int
	// Percent is the mean utilisation of the allocation's GPUs; negative
	// when any of them has no stats (the sample is then unknown).
	Percent float64
}

// maxUtilRecords bounds the history kept per allocation or job. The
// history is the suffix maxima of the samples (see utilTrack), which stay
// few unless utilisation falls steadily for hundreds of polls; past the
// bound the oldest is dropped and the history starts later, which can only
// understate idle time.
const maxUtilRecords = 64

// utilTrack is the utilisation history of one allocation or job since its
// last unknown sample, kept as the samples that are higher than every
// later one (suffix maxima, decreasing): the first sample of the latest
// run below any threshold is the one after the last record at or above
// it.
type utilTrack struct {
	// members identifies a job's allocations: when they change (a gang
	// requeued, a member replaced) the job's history starts again.
	members string
	first   time.Time // first sample of the history (zero: none)
	lastAt  time.Time // latest sample
	last    float64
	recs    []utilRec
}

type utilRec struct {
	at, next time.Time // next: the sample after this one (zero: none yet)
	v        float64
}

func (t *utilTrack) observe(at time.Time, v float64) {
	if v < 0 {
		*t = utilTrack{members: t.members, lastAt: at, last: -1}
		return
	}
	if t.first.IsZero() {
		t.first = at
	}
	if n := len(t.recs); n > 0 {
		t.recs[n-1].next = at
	}
	for len(t.recs) > 0 && t.recs[len(t.recs)-1].v <= v {
		t.recs = t.recs[:len(t.recs)-1]
	}
	t.recs = append(t.recs, utilRec{at: at, v: v})
	if len(t.recs) > maxUtilRecords {
		t.first = t.recs[0].next
		t.recs = append(t.recs[:0], t.recs[1:]...)
	}
	t.lastAt, t.last = at, v
}

// idleSince is the first sample of the run, ending with the latest sample,
// in which every sample is below threshold; ok is false when the latest
// sample is not below it (or unknown).
func (t *utilTrack) idleSince(threshold float64) (time.Time, bool) {
	if t == nil || t.first.IsZero() || t.last < 0 || t.last >= threshold {
		return time.Time{}, false
	}
	for i := len(t.recs) - 1; i >= 0; i-- {
		if t.recs[i].v >= threshold {
			return t.recs[i].next, true
		}
	}
	return t.first, true
}

// ObserveUtilization records one poll of device stats taken at `at`: one
// sample per running allocation. An allocation or job missing from
// samples has no history afterwards (a missing sample is unknown, and
// unknown breaks an idle run). A job's sample is the GPU-weighted mean of
// its allocations' samples, unknown when any of them is; its history
// starts again when its set of allocations changes (a requeued gang, a
// replaced member), so one run's idleness is never charged to the next.
func (e *Engine) ObserveUtilization(at time.Time, samples []AllocUtilization) {
	type acc struct {
		sum     float64
		gpus    int
		unknown bool
		members []string
	}
	jobs := map[string]*acc{}
	seen := make(map[string]bool, len(samples))
	for _, s := range samples {
		seen[s.AllocID] = true
		t := e.allocUtil[s.AllocID]
		if t == nil {
			t = &utilTrack{}
			e.allocUtil[s.AllocID] = t
		}
		t.observe(at, s.Percent)
		j := jobs[s.JobID]
		if j == nil {
			j = &acc{}
			jobs[s.JobID] = j
		}
		j.members = append(j.members, s.AllocID)
		if s.Percent < 0 {
			j.unknown = true
			continue
		}
		j.sum += s.Percent * float64(max(1, s.GPUs))
		j.gpus += max(1, s.GPUs)
	}
	for id := range e.allocUtil {
		if !seen[id] {
			delete(e.allocUtil, id)
		}
	}
	for id := range e.jobUtil {
		if jobs[id] == nil {
			delete(e.jobUtil, id)
		}
	}
	for id, j := range jobs {
		sort.Strings(j.members)
		members := strings.Join(j.members, ",")
		t := e.jobUtil[id]
		if t == nil || t.members != members {
			t = &utilTrack{members: members}
			e.jobUtil[id] = t
		}
		v := -1.0
		if !j.unknown && j.gpus > 0 {
			v = j.sum / float64(j.gpus)
		}
		t.observe(at, v)
	}
}

// RunningJob is the utilisation view of one running managed job after a
// cycle (Plan.Running): what explain, the CLI and metrics show.
type RunningJob struct {
	JobID string `json:"job_id"`
	Tier  string `json:"tier"`
	// Pool the job's allocations run in (the first one's node pool).
	Pool string `json:"pool,omitempty"`
	GPUs int    `json:"gpus"`
	// Start of its earliest allocation.
	Start time.Time `json:"start"`
	// Utilization is the latest sample of the mean utilisation of its
	// GPUs, percent; negative when unknown (no sample, or missing stats).
	Utilization float64 `json:"utilization"`
	// IdleSince is the first sample of the current run below the
	// threshold (zero: the latest sample is not below it).
	IdleSince time.Time `json:"idle_since,omitzero"`
	// IdleFor is how long that run has lasted, sample to sample.
	IdleFor time.Duration `json:"idle_for"`
	// Idle: below the threshold for at least the duration.
	Idle bool `json:"idle"`
	// Hung: every allocation idle at once.
	Hung bool `json:"hung"`
	// The tier's idle policy the job was judged by.
	Threshold float64           `json:"threshold"`
	Duration  time.Duration     `json:"duration"`
	Action    policy.IdleAction `json:"action"`
	// OptedOut: impact_idle = "ignore" holds (the tier allows it).
	OptedOut bool `json:"opted_out,omitempty"`
	// Note says what is done about it, or why nothing is.
	Note string `json:"note,omitempty"`
}

// Reclaim stops a hung job on its tier's requeue action: checkpoint signal,
// grace, then either queued again (Requeue) or stopped for good (after
// Requeues reached the tier's max_requeues).
type Reclaim struct {
	Stop
	// Requeue: queue the job again; false: stop it and leave it stopped.
	Requeue bool `json:"requeue"`
	// Requeues is how many times the job has been requeued for hanging,
	// this one included.
	Requeues int `json:"requeues"`
	// IdleGPUHours is the GPU-hours it had held idle when reclaimed.
	IdleGPUHours float64 `json:"idle_gpu_hours"`
	// ReclaimedGPUHours is what reclaiming frees: its GPUs x the rest of
	// its impact_walltime (0 when it declares none: unknown, never
	// guessed).
	ReclaimedGPUHours float64 `json:"reclaimed_gpu_hours"`
	// Reason, with the numbers that triggered it.
	Reason string `json:"reason"`
}

// idleState is a running gang's utilisation as judged this cycle.
type idleState struct {
	// cfg is the tier's idle policy (the spec facts'; nil for a gang
	// not judged).
	cfg      *policy.Idle
	util     float64
	since    time.Time // job run below threshold (zero: none)
	idleFor  time.Duration
	idle     bool
	hung     bool
	hungFrom time.Time     // the latest member's idle run start
	hungFor  time.Duration // the shortest member's idle run
	ignored  bool
}

// judgeIdle works out the utilisation state of a managed running gang.
func (jd *judger) judgeIdle(hd *placement.Holder, f *specFacts) idleState {
	// f.idle is the policy's IdleFor, ignored its IdleIgnored.
	st := idleState{cfg: &f.idle, util: -1, ignored: hd.Job.Spec.IdleIgnore && f.idle.AllowOptOut}
	jt := jd.c.e.jobUtil[hd.JobID]
	if jt == nil || jt.lastAt.IsZero() {
		return st
	}
	st.util = jt.last
	since, ok := jt.idleSince(st.cfg.Threshold)
	if !ok {
		return st
	}
	st.since, st.idleFor = since, jt.lastAt.Sub(since)
	st.idle = st.idleFor >= st.cfg.Duration
	if !st.idle || len(hd.Allocs) == 0 {
		return st
	}
	st.hung = true
	st.hungFor = st.idleFor
	for _, a := range hd.Allocs {
		at := jd.c.e.allocUtil[a.ID]
		s, ok := at.idleSince(st.cfg.Threshold)
		if !ok || at.lastAt.Sub(s) < st.cfg.Duration {
			st.hung = false
			break
		}
		if s.After(st.hungFrom) {
			st.hungFrom = s
		}
		st.hungFor = min(st.hungFor, at.lastAt.Sub(s))
	}
	return st
}

// idleVictim makes an idle gang on a preemptible idle action a victim
// (preempt.Idle), with what its stop says of its idleness.
func (jd *judger) idleVictim(hd *placement.Holder, st idleState) preempt.Victim {
	j := hd.Job
	idleGPUh, reclaimed := jd.idleHours(hd, st)
	tier := jd.c.pol.TierOf(j.Spec)
	g := preempt.Gang{Allocs: hd.Allocs, GPUs: hd.GPUs, Tier: tier.Name, Impact: jd.c.pol.Impact(j.Spec), Spec: &j.Spec}
	return preempt.Idle(g, tier.Weight, jd.c.pol.Preemption.RestartCost, &preempt.IdleVictim{
		GPUHours:  idleGPUh,
		Reclaimed: reclaimed,
		Since:     st.since,
		Note:      fmt.Sprintf("idle since %s (%.1f%% < %g%% for %s)", st.since.UTC().Format(time.RFC3339), st.util, st.cfg.Threshold, st.idleFor.Round(time.Second)),
	})
}

// judgeRunning judges every managed running gang's utilisation once per
// cycle: it logs changes (idle, hung, busy again), orders the requeue
// action's reclaims, and returns the states by holder for assessHolders.
func (jd *judger) judgeRunning(facts []*specFacts) []idleState {
	holders := jd.c.st.Holders()
	states := buffer.Zeroed(&jd.c.e.scratch.states, len(holders))
	if jd.c.explain && len(holders) > 0 {
		jd.c.plan.Running = make([]RunningJob, 0, len(holders))
	}
	for h := range holders {
		hd := &holders[h]
		f := facts[h]
		if f == nil {
			continue
		}
		st := jd.judgeIdle(hd, f)
		states[h] = st
		jd.logIdleChange(hd, st)
		note := ""
		switch {
		case !st.idle:
		case st.ignored:
			note = "idle; impact_idle = \"ignore\": only reported"
		case st.cfg.Action == policy.IdleReport:
			note = "idle; reported only (tier's idle action is report)"
		case st.cfg.Action == policy.IdlePreemptible:
			note = "idle; preemptible by waiting work of its tier or higher"
			if !jd.c.pol.Preemption.Enabled {
				note = "idle; would be preemptible, but preemption is disabled"
			}
		case st.cfg.Action == policy.IdleRequeue && !st.hung:
			note = "idle but not hung (some members busy or unknown); reported only"
		case st.cfg.Action == policy.IdleRequeue && hd.Stopping:
			note = "hung; being stopped"
		case st.cfg.Action == policy.IdleRequeue:
			note = jd.reclaim(h, hd, st)
		}
		if jd.c.explain {
			rj := RunningJob{JobID: hd.JobID, Tier: f.tier, GPUs: hd.GPUs, Start: earliestStart(hd.Allocs),
				Utilization: st.util, IdleSince: st.since, IdleFor: st.idleFor, Idle: st.idle, Hung: st.hung,
				Threshold: st.cfg.Threshold, Duration: st.cfg.Duration, Action: st.cfg.Action, OptedOut: st.ignored, Note: note}
			if len(hd.Slots) > 0 {
				rj.Pool = jd.c.st.PoolOf(hd.Slots[0].Node)
			}
			jd.c.plan.Running = append(jd.c.plan.Running, rj)
		}
	}
	for id := range jd.c.e.idleSeen {
		if h, ok := jd.c.holderOf(id); !ok || facts[h] == nil {
			jd.c.mem.idleGone = append(jd.c.mem.idleGone, id) // no longer running
		}
	}
	// A job's requeue count lives as long as the job (queued again or
	// running); a job that left (stopped, purged) starts afresh.
	for id := range jd.c.e.requeues {
		if _, ok := jd.c.snap.Job(id); !ok {
			jd.c.mem.requeuesGone = append(jd.c.mem.requeuesGone, id)
		}
	}
	// jd.c.plan.Running is in job ID order already: holders are (one per
	// job, sorted by job ID; see placement.New).
	return states
}

// reclaim orders the requeue action for a hung gang and returns its note.
func (jd *judger) reclaim(h int, hd *placement.Holder, st idleState) string {
	j := hd.Job
	n := jd.c.mem.requeuesOf(hd.JobID)
	requeue := n < st.cfg.MaxRequeues
	if requeue {
		n++
		if jd.c.mem.requeues == nil {
			jd.c.mem.requeues = map[string]int{}
		}
		jd.c.mem.requeues[hd.JobID] = n
	}
	idleGPUh, reclaimed := jd.idleHours(hd, st)
	numbers := fmt.Sprintf("every member below %g%% for %s (job mean %.1f%%, idle since %s)", st.cfg.Threshold,
		st.hungFor.Round(time.Second), st.util, st.since.UTC().Format(time.RFC3339))
	var reason string
	if requeue {
		reason = fmt.Sprintf("hung: %s; stopped and queued again (requeue %d of %d)", numbers, n, st.cfg.MaxRequeues)
	} else {
		reason = fmt.Sprintf("hung: %s; stopped and left stopped (requeued %d times, max_requeues %d)", numbers, n, st.cfg.MaxRequeues)
	}
	r := Reclaim{Stop: stopOf(j, hd.GPUs),
		Requeue: requeue, Requeues: n, IdleGPUHours: idleGPUh, ReclaimedGPUHours: reclaimed, Reason: reason}
	for _, a := range hd.Allocs {
		r.Allocs = append(r.Allocs, a.ID)
		jd.c.mem.orderStop(a.ID, inflightStop{job: hd.JobID, decided: jd.c.now, expires: jd.c.now.Add(r.Grace), requeue: requeue})
	}
	jd.c.claimed[h] = true
	jd.c.plan.Reclaims = append(jd.c.plan.Reclaims, r)
	jd.c.e.logger.Info("reclaiming hung job", "job", hd.JobID, "requeue", requeue, "requeues", n, "max_requeues", st.cfg.MaxRequeues,
		"gpus", hd.GPUs, "utilization", st.util, "threshold", st.cfg.Threshold, "idle_since", st.since, "idle_for", st.idleFor,
		"duration", st.cfg.Duration, "idle_gpu_hours", idleGPUh, "reclaimed_gpu_hours", reclaimed)
	return reason
}

// idleHours is what an idle gang has held idle (its GPUs x its idle run)
// and what stopping it now reclaims: its GPUs x the rest of its
// impact_walltime less the work earlier runs saved (jobspec.Spec.Left),
// 0 when it declares none (unknown is not guessed).
func (jd *judger) idleHours(hd *placement.Holder, st idleState) (idle, reclaimed float64) {
	idle = float64(hd.GPUs) * st.idleFor.Hours()
	if w := hd.Job.Spec.Left(); w > 0 {
		if left := earliestStart(hd.Allocs).Add(w).Sub(jd.c.now); left > 0 {
			reclaimed = float64(hd.GPUs) * left.Hours()
		}
	}
	return idle, reclaimed
}

// idleFlags is what was last logged of a job's utilisation state.
type idleFlags struct{ idle, hung bool }

func (jd *judger) logIdleChange(hd *placement.Holder, st idleState) {
	// Only idle states are remembered: a job absent from idleSeen was
	// last seen busy (or never seen), which needs no entry.
	cur := idleFlags{idle: st.idle, hung: st.hung}
	var prev idleFlags
	if len(jd.c.e.idleSeen) > 0 {
		prev = jd.c.e.idleSeen[hd.JobID]
	}
	if cur == prev {
		return
	}
	if cur == (idleFlags{}) {
		jd.c.mem.idleGone = append(jd.c.mem.idleGone, hd.JobID)
	} else {
		if jd.c.mem.idleSeen == nil {
			jd.c.mem.idleSeen = map[string]idleFlags{}
		}
		jd.c.mem.idleSeen[hd.JobID] = cur
	}
	args := []any{"job", hd.JobID, "gpus", hd.GPUs, "utilization", st.util, "threshold", st.cfg.Threshold,
		"idle_for", st.idleFor, "duration", st.cfg.Duration, "action", st.cfg.Action, "opted_out", st.ignored}
	switch {
	case cur.hung:
		jd.c.e.logger.Info("job hung: every member idle", args...)
	case cur.idle:
		jd.c.e.logger.Info("job idle", args...)
	default:
		jd.c.e.logger.Info("job no longer idle", args...)
	}
}
