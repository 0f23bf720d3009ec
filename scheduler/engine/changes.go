package engine

import (
	"maps"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// changes is what one cycle changes in the engine's memory. A cycle
// decides on the memory as it was when the cycle began and writes nothing
// to it: every change is recorded here, and where a later step of the
// same cycle depends on an earlier one it reads the memory through these
// records (pendingOf, bindingOf, stopOrdered, usage, lostFrom). Decide
// applies them once, after the cycle has decided (Engine.apply), so no
// step can read another's half-written state and the order of the steps
// is free to change.
//
// The engine's caches (placement.Cache, queueCache) are not memory: they
// memoize what a cycle derives from unchanged parts of the snapshot and
// give the same answers either way, so the cycle fills them as it goes.
type changes struct {
	// accrued is the usage after this cycle's charges (nil: none); the
	// instant and the finished-log position they were charged up to.
	accrued     *policy.Usage
	lastCycle   time.Time
	finishedSeq uint64
	// expired: preemptions in flight that are over (their allocations
	// are gone, the adapter did not act within the TTL, or they were
	// withdrawn: withdraw.go), by allocation ID (endStop).
	expired map[string]bool
	// stops: the stops this cycle ordered (preemptions, requeues,
	// reclaims), by allocation ID; losses the work its preemptions lose.
	stops  map[string]inflightStop
	losses []loss
	// Pending admissions: those that appeared, left or expired; those
	// planned now.
	pendingGone map[string]bool
	pending     map[string]pendingAdmission
	// deferralsOver: deferrals that ended.
	deferralsOver []string
	// Bindings: those dropped (admitted, gone, expired), those made or
	// renewed now.
	bindingsGone map[string]bool
	bindings     map[string]binding
	// broken is the whole new set of gangs seen missing a member.
	broken map[string]time.Time
	// requeuedDead is the whole new set of dead gangs requeued (this
	// cycle or before) whose run is still in the model.
	requeuedDead map[string]uint64
	// idleSeen: the idle states logged now; idleGone: jobs no longer
	// running.
	idleSeen map[string]idleFlags
	idleGone []string
	// requeues: the new requeue counts; requeuesGone: jobs that left.
	requeues     map[string]int
	requeuesGone []string
	// hrMem: the pools whose learned-headroom memory the cycle changed,
	// with their new memory (hrCycle.memoryToChange).
	hrMem map[string]*hrMemory
	// hrCredit is the whole new set of headroom idle accounts (nil:
	// unchanged; headroom_budget.go).
	hrCredit map[string]hrCredit
	// wallRuns: the run times learned this cycle (walltimes.begin).
	wallRuns []learnedRun
	// ends: the natural ends seen this cycle (endPace.learn).
	ends []naturalEnd
	// cuts is the whole new set of preemptions that cut the pool, by
	// preemptor (cuts.go; nil: unchanged).
	cuts map[string][]cut
}

// cycleMemory is how a cycle sees the engine's memory: as it was when
// the cycle began, with the cycle's own changes over it. Every step reads
// and records through it; Engine.apply carries the changes into the
// engine once the cycle is done.
type cycleMemory struct {
	changes
	e    *Engine
	snap *cluster.Snapshot
	now  time.Time
	// pendingByJob indexes pending admissions by job (pendingJob).
	pendingByJob map[*cluster.Job]pendingAdmission
	// inflightAllocs: the snapshot's allocations with a stop in flight
	// (indexInflight).
	inflightAllocs map[*cluster.Alloc]struct{}
}

// usage is the fair-share usage the cycle scores with: the engine's, plus
// this cycle's charges.
func (m *cycleMemory) usage() *policy.Usage {
	if m.accrued != nil {
		return m.accrued
	}
	return m.e.usage
}

// pendingOf is the admission planned for a job by an earlier cycle (or
// this one) that still holds its GPUs.
func (m *cycleMemory) pendingOf(id string) (pendingAdmission, bool) {
	if len(m.e.pending) == 0 && len(m.pending) == 0 {
		return pendingAdmission{}, false // the common case: no string to hash
	}
	if p, ok := m.pending[id]; ok {
		return p, true
	}
	if m.pendingGone[id] {
		return pendingAdmission{}, false
	}
	p, ok := m.e.pending[id]
	return p, ok
}

// pendingJob is pendingOf for a job of the snapshot, looked up by the job
// object: thousands of queued and running jobs are asked each cycle and
// few have an admission pending, so the pending ones are indexed by
// pointer once rather than each asker's ID hashed.
func (m *cycleMemory) pendingJob(j *cluster.Job) (pendingAdmission, bool) {
	if len(m.e.pending) == 0 && len(m.pending) == 0 {
		return pendingAdmission{}, false
	}
	if m.pendingByJob == nil {
		m.pendingByJob = map[*cluster.Job]pendingAdmission{}
		add := func(id string, p pendingAdmission) {
			if pj, ok := m.snap.Job(id); ok {
				m.pendingByJob[pj] = p
			}
		}
		for id, p := range m.e.pending {
			if !m.pendingGone[id] {
				add(id, p)
			}
		}
		for id, p := range m.pending {
			add(id, p)
		}
	}
	p, ok := m.pendingByJob[j]
	return p, ok
}

// bindingOf is the binding a preemptor holds.
func (m *cycleMemory) bindingOf(id string) (binding, bool) {
	if b, ok := m.bindings[id]; ok {
		return b, true
	}
	if m.bindingsGone[id] {
		return binding{}, false
	}
	b, ok := m.e.bindings[id]
	return b, ok
}

// stopOrdered reports whether a stop the engine ordered for an allocation
// of the snapshot is still under way: ordered this cycle, or in flight
// since an earlier one (inflightAllocs).
func (m *cycleMemory) stopOrdered(a *cluster.Alloc) bool {
	if len(m.stops) > 0 {
		if _, ok := m.stops[a.ID]; ok {
			return true
		}
	}
	_, ok := m.inflightAllocs[a]
	return ok
}

// indexInflight fills inflightAllocs: the snapshot's allocations with a
// stop in flight that has not expired, by pointer, so that asking about
// every running allocation twice a cycle hashes pointers, not IDs. Run
// after expireInflight, before any stopOrdered.
func (m *cycleMemory) indexInflight() {
	for id := range m.e.inflight {
		if m.expired[id] {
			continue
		}
		if a, ok := m.snap.Alloc(id); ok {
			if m.inflightAllocs == nil {
				m.inflightAllocs = map[*cluster.Alloc]struct{}{}
			}
			m.inflightAllocs[a] = struct{}{}
		}
	}
}

// requeuesOf is how often a job was requeued for hanging.
func (m *cycleMemory) requeuesOf(id string) int {
	if n, ok := m.requeues[id]; ok {
		return n
	}
	return m.e.requeues[id]
}

// stopOf is the stop under way for an allocation: ordered this cycle,
// or in flight since an earlier one and not expired.
func (m *cycleMemory) stopOf(allocID string) (inflightStop, bool) {
	if st, ok := m.stops[allocID]; ok {
		return st, true
	}
	if m.expired[allocID] {
		return inflightStop{}, false
	}
	st, ok := m.e.inflight[allocID]
	return st, ok
}

// endStop records that the stop in flight for an allocation is over.
func (m *cycleMemory) endStop(allocID string) {
	if m.expired == nil {
		m.expired = map[string]bool{}
	}
	m.expired[allocID] = true
}

// orderStop records a stop ordered for an allocation.
func (m *cycleMemory) orderStop(allocID string, st inflightStop) {
	if m.stops == nil {
		m.stops = map[string]inflightStop{}
	}
	m.stops[allocID] = st
}

func (m *cycleMemory) dropPending(id string) {
	if m.pendingGone == nil {
		m.pendingGone = map[string]bool{}
	}
	m.pendingGone[id] = true
	delete(m.pending, id)
	if j, ok := m.snap.Job(id); ok && m.pendingByJob != nil {
		delete(m.pendingByJob, j)
	}
}

func (m *cycleMemory) addPending(id string, p pendingAdmission) {
	if m.pending == nil {
		m.pending = map[string]pendingAdmission{}
	}
	m.pending[id] = p
	if j, ok := m.snap.Job(id); ok && m.pendingByJob != nil {
		m.pendingByJob[j] = p
	}
}

func (m *cycleMemory) dropBinding(id string) {
	if m.bindingsGone == nil {
		m.bindingsGone = map[string]bool{}
	}
	m.bindingsGone[id] = true
	delete(m.bindings, id)
}

func (m *cycleMemory) setBinding(id string, b binding) {
	if m.bindings == nil {
		m.bindings = map[string]binding{}
	}
	m.bindings[id] = b
}

// lostFrom returns the GPU-hours lost in the hour before the cycle to
// preemptions charged to one budget ("" = the shared one), this cycle's
// included.
func (m *cycleMemory) lostFrom(budget string) float64 {
	sum := m.e.lostFrom(budget, m.now)
	for _, l := range m.losses {
		if l.budget == budget {
			sum += l.gpuHours
		}
	}
	return sum
}

// apply carries a cycle's changes into the engine's memory: the one place
// a cycle's decisions change it.
func (e *Engine) apply(ch *changes, now time.Time) {
	if ch.accrued != nil {
		e.usage = ch.accrued
	}
	e.lastCycle, e.finishedSeq = ch.lastCycle, ch.finishedSeq
	for id := range ch.expired {
		delete(e.inflight, id)
	}
	for id, st := range ch.stops {
		e.inflight[id] = st
	}
	keep := e.losses[:0]
	for _, l := range e.losses {
		if now.Sub(l.at) < time.Hour {
			keep = append(keep, l)
		}
	}
	e.losses = append(keep, ch.losses...)
	for id := range ch.pendingGone {
		delete(e.pending, id)
	}
	for id, p := range ch.pending {
		e.pending[id] = p
	}
	for _, id := range ch.deferralsOver {
		delete(e.deferred, id)
	}
	for id := range ch.bindingsGone {
		delete(e.bindings, id)
	}
	for id, b := range ch.bindings {
		e.bindings[id] = b
	}
	if ch.broken != nil {
		e.broken = ch.broken
	} else {
		clear(e.broken)
	}
	if ch.requeuedDead != nil {
		e.requeuedDead = ch.requeuedDead
	} else {
		clear(e.requeuedDead)
	}
	for _, id := range ch.idleGone {
		delete(e.idleSeen, id)
	}
	for id, f := range ch.idleSeen {
		e.idleSeen[id] = f
	}
	for _, id := range ch.requeuesGone {
		delete(e.requeues, id)
	}
	for id, n := range ch.requeues {
		e.requeues[id] = n
	}
	if ch.cuts != nil {
		e.cuts = ch.cuts
	}
	if ch.hrCredit != nil {
		e.hrCredit = ch.hrCredit
	}
	if ch.hrMem != nil {
		if e.hrMem == nil {
			e.hrMem = map[string]*hrMemory{}
		}
		maps.Copy(e.hrMem, ch.hrMem)
	}
	e.learnWalltimes(ch.wallRuns, now)
	e.rememberEnds(ch.ends, now)
}
