package engine

import (
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// Engine runs the scheduling cycle. It is pure apart from the memory it
// keeps between cycles, all of it driven by the `now` each Decide gets:
// decayed fair-share usage (charged from the running allocations between
// cycles), the sliding hour of work lost to preemption, and the preemptions
// it has ordered that have not yet taken effect. Equal sequences of
// (snapshot, now) give equal plans.
//
// An Engine is not safe for concurrent Decide calls; one cycle runs at a
// time.
type Engine struct {
	pol    *policy.Policy
	opts   options
	logger hclog.Logger

	usage     *policy.Usage
	lastCycle time.Time
	// finishedSeq is the next record of the snapshots' finished-allocation
	// log (cluster.Store.FinishAlloc) to charge.
	finishedSeq uint64
	// losses records the GPU-hours of work lost to each preemption, for the
	// policy's max_gpu_hours_lost_per_hour.
	losses []loss
	// inflight: allocation ID -> the preemption this engine ordered for it.
	// The adapter takes a grace period to act; until the allocation
	// disappears (or reports Stopping) the engine must neither pick it
	// again nor treat its GPUs as free.
	inflight map[string]inflightStop
	// pending: job ID -> an admission this engine planned whose allocations
	// are not in the snapshot yet. Nomad places them a moment after the
	// adapter re-registers the job; until then the planned GPUs look free
	// and the job may still look queued, so the engine holds them and does
	// not admit the job again.
	pending map[string]pendingAdmission
	// deferred: job ID -> when an admission Nomad could not carry out
	// (rolled back) may be planned again. Without it a job that fits the
	// model but not Nomad (CPU, memory, a constraint the model does not
	// read) would be admitted and rolled back in a loop, holding GPUs.
	deferred map[string]deferral
	// bindings: preemptor job ID -> the GPUs its preemptions free for it
	// (and a job moved by a defragmenting preemption -> the GPUs it moves
	// to).
	// They are withheld from every other job (victims included, even those
	// that could backfill a reservation) until the preemptor is admitted,
	// leaves the queue, is forgotten, or the binding expires: freed GPUs
	// go to the job they were freed for.
	bindings map[string]binding
	// broken: job ID -> since when a running gang has been seen missing a
	// member (watchGangs).
	broken map[string]time.Time
	// requeuedDead: job ID -> the registration (Job.ModifyIndex) of a dead
	// gang (cluster.Job.Dead) this engine requeued, so that the same run
	// is not requeued again while the adapter parks it (Forget drops it).
	requeuedDead map[string]uint64
	// allocUtil and jobUtil: utilisation history per allocation and per
	// job (ObserveUtilization); idleSeen: the idle state last logged per
	// job; requeues: how often each job was requeued for hanging.
	allocUtil map[string]*utilTrack
	jobUtil   map[string]*utilTrack
	idleSeen  map[string]idleFlags
	requeues  map[string]int
	// cache memoizes per-node and per-allocation masks across cycles.
	cache *placement.Cache
	// queue memoizes the queued jobs per shard of the job table.
	queue queueCache
	// cuts: preemptor job ID -> the preemptions of its that cut the
	// pool, undone in shape when it ends (cuts.go).
	cuts map[string][]cut
	// hrMem: pool -> the recent arrivals a learned headroom is sized
	// from (headroom.go).
	hrMem map[string]*hrMemory
	// hrCredit: pool -> its headroom's idle account (headroom_budget.go).
	hrCredit map[string]hrCredit
	// walls: the run times learned for walltime estimates (walltime.go;
	// nil until one is learned).
	walls *wallMemory
	// ends: the natural ends of the last endWindow, oldest first
	// (endpace.go).
	ends []naturalEnd
	// scratch is the cycles' reusable working memory (scratch.go).
	scratch scratch
}

type loss struct {
	at       time.Time
	gpuHours float64
	// job is the victim (empty for losses restored from Memory).
	job string
	// budget is the preemptor's tier when that tier has a budget of its
	// own (policy.Tier.MaxGPUHoursLostPerHour), "" for the shared one.
	budget string
}

// inflightStop is a preemption ordered for one allocation.
type inflightStop struct {
	job string
	// preemptor: the job a preemption stops it for (empty: a stop for
	// no job, or one a previous leader reported without it).
	preemptor string
	// decided is the cycle that ordered it; expires is decided + the
	// victim's grace, from which the in-flight TTL (15 minutes) counts.
	decided, expires time.Time
	// requeue: a Reclaim that counted a requeue (Forget gives it back).
	requeue bool
}

type options struct {
	logger         hclog.Logger
	defaultPool    string
	localityLabels []string
	memory         *Memory
	inflightTTL    time.Duration
	admissionTTL   time.Duration
	noExplain      bool
}

// Option configures an Engine.
type Option func(*options)

// WithLogger sets the parent logger; the engine logs as its "engine"
// sub-logger.
func WithLogger(l hclog.Logger) Option { return func(o *options) { o.logger = l } }

// WithDefaultPool sets the node pool of jobs that set no impact_pool. ""
// (the default) lets such jobs run in any pool.
func WithDefaultPool(pool string) Option { return func(o *options) { o.defaultPool = pool } }

// WithLocalityLabels sets the node labels multi-node gangs try to share,
// tightest first. Default: "switch", then "rack".
func WithLocalityLabels(labels ...string) Option {
	return func(o *options) { o.localityLabels = append([]string(nil), labels...) }
}

// WithoutExplanations makes plans carry only admissions and preemptions:
// Plan.Explanations and Plan.Queue stay empty and no waiting reason is
// formatted. Decisions are the same. For callers that act on plans but
// never show why a job waits (the simulator, which replays tens of
// thousands of waiting jobs a cycle); the live service keeps them for
// explain.
func WithoutExplanations() Option { return func(o *options) { o.noExplain = true } }

// WithAdmissionTTL sets how long an admission the engine planned keeps its
// GPUs held (and the job out of the queue) while its allocations have not
// appeared in the snapshot (default 10 minutes). The hold ends sooner once
// each planned allocation appeared or ended (a member that failed, was lost
// or completed before any cycle saw it: the job's Ended, Dead or Completed);
// the adapter should call Forget when it rolls an admission back.
func WithAdmissionTTL(d time.Duration) Option { return func(o *options) { o.admissionTTL = d } }

// binding is the placement a preemptor was given on the GPUs its victims
// free, by node and GPU instance ID (stable across snapshots).
type binding struct {
	gpus    []AllocPlacement
	expires time.Time
	// made: the cycle that last bound gpus. Two bindings can name the
	// same GPUs: a job scoring higher claims gangs stopping for another
	// preemptor, or a job is admitted on GPUs bound to one that waited
	// elsewhere and is then preempted for a third. The newer binding is
	// the one the GPUs were last decided for, so it is served first
	// (holdBindings); the older one's job preempts again or waits.
	made time.Time
	// moved: the binding of a job a defragmenting preemption moves
	// (defrag.go), kept while it still runs (stopping) as well as once
	// it is queued again.
	moved bool
	// movedOut: for the job a defragmenting preemption is for, the jobs
	// it moved; while one of them still runs (stops), it moves no more.
	movedOut []string
}

type pendingAdmission struct {
	at     time.Time
	allocs []AllocPlacement
	// earlier are the job's allocations in the snapshot it was admitted
	// from: an earlier run's, still stopping (a job moved by a
	// defragmenting preemption restarts before its old allocation has
	// ended). They are not this admission's, so they neither end its hold
	// nor count as its members.
	earlier map[string]bool
	// groups and warnings, for the job's explanation meanwhile.
	groups   []GroupPlacement
	warnings []string
}

// Preempting tells the engine of a preemption under way that it did not
// order itself (a new leader learns them from the previous leader's
// intents; p.JobID, Allocs and Grace are read, and for a move MovedTo,
// Preemptor and PreemptorGPUs): until the allocations are gone (or the
// inflight TTL after grace passes), they count as stopping, so the
// preemptor waits for them and is given their GPUs instead of preempting
// again, and the gang is not chosen as a victim twice. For a
// defragmenting preemption the bindings are restored as the engine that
// ordered it kept them: the moved job to the GPUs it moves to (it
// restarts there, nobody else takes them), the job it was moved for to
// PreemptorGPUs, naming the moved job (it moves no more while that
// stops).
func (e *Engine) Preempting(p Preemption, decided time.Time) {
	for _, id := range p.Allocs {
		if _, ok := e.inflight[id]; !ok {
			e.inflight[id] = inflightStop{job: p.JobID, preemptor: p.Preemptor, decided: decided, expires: decided.Add(p.Grace)}
		}
	}
	if len(p.MovedTo) == 0 {
		return
	}
	expires := decided.Add(p.Grace + e.opts.admissionTTL)
	if _, ok := e.bindings[p.JobID]; !ok {
		e.bindings[p.JobID] = binding{gpus: slices.Clone(p.MovedTo), expires: expires, made: decided, moved: true}
	}
	if p.Preemptor != "" {
		b, ok := e.bindings[p.Preemptor]
		if !ok {
			b.expires, b.made, b.gpus = expires, decided, slices.Clone(p.PreemptorGPUs)
		}
		if !slices.Contains(b.movedOut, p.JobID) {
			b.movedOut = append(slices.Clone(b.movedOut), p.JobID)
		}
		e.bindings[p.Preemptor] = b
	}
}

// Forget drops what the engine remembers of actions it planned for a job
// that the adapter did not carry out (rolled back, lost an EnforceIndex
// race, failed, or the job was deregistered), so that nothing waits for
// them to expire:
//   - a planned admission: the job is queued and its planned GPUs are free
//     again from the next cycle;
//   - a planned preemption: its allocations no longer count as stopping
//     (the preemptor stops waiting for them) and the work it would have
//     lost is given back to the max_gpu_hours_lost_per_hour budget.
//
// Do not call it for a preemption that is under way: the engine would
// treat the victim's GPUs as busy and could order it again.
func (e *Engine) Forget(jobID string) {
	delete(e.pending, jobID)
	delete(e.requeuedDead, jobID)
	delete(e.deferred, jobID)
	delete(e.bindings, jobID)
	decided := map[time.Time]bool{}
	requeued := false
	for id, st := range e.inflight {
		if st.job == jobID {
			decided[st.decided] = true
			requeued = requeued || st.requeue
			delete(e.inflight, id)
		}
	}
	if requeued && e.requeues[jobID] > 0 {
		e.requeues[jobID]--
	}
	if len(decided) == 0 {
		return
	}
	keep := e.losses[:0]
	for _, l := range e.losses {
		if l.job != jobID || !decided[l.at] {
			keep = append(keep, l)
		}
	}
	e.losses = keep
}

// deferral is a job held back from admission until a time.
type deferral struct {
	until time.Time
	why   string
}

// Defer keeps a queued job from being admitted (or preempting, or
// reserving) before until; it keeps its place in the queue and its
// explanation says why and until when. The adapter calls it after
// rolling back an admission Nomad could not place, with a back-off of its
// choosing. Forget clears it.
func (e *Engine) Defer(jobID string, until time.Time, why string) {
	e.deferred[jobID] = deferral{until: until, why: why}
}

// New builds an engine for a validated policy.
func New(pol *policy.Policy, opts ...Option) (*Engine, error) {
	if pol == nil {
		return nil, fmt.Errorf("engine: nil policy")
	}
	if err := pol.Validate(); err != nil {
		return nil, fmt.Errorf("engine: invalid policy: %w", err)
	}
	o := options{
		logger:         hclog.NewNullLogger(),
		localityLabels: []string{"switch", "rack"},
		inflightTTL:    15 * time.Minute,
		admissionTTL:   10 * time.Minute,
	}
	for _, opt := range opts {
		opt(&o)
	}
	u := policy.NewUsage(pol.FairShare.HalfLife) // WithMemory restores saved usage
	e := &Engine{
		pol:          pol,
		opts:         o,
		logger:       o.logger.Named("engine"),
		usage:        u,
		inflight:     map[string]inflightStop{},
		pending:      map[string]pendingAdmission{},
		deferred:     map[string]deferral{},
		bindings:     map[string]binding{},
		broken:       map[string]time.Time{},
		requeuedDead: map[string]uint64{},
		cache:        placement.NewCache(),

		allocUtil: map[string]*utilTrack{},
		jobUtil:   map[string]*utilTrack{},
		idleSeen:  map[string]idleFlags{},
		requeues:  map[string]int{},
	}
	if o.memory != nil {
		e.restore(o.memory)
	}
	return e, nil
}

// Policy returns the engine's policy.
func (e *Engine) Policy() *policy.Policy { return e.pol }

// Usage returns a copy of the decayed per-project usage, for persistence
// and reports.
func (e *Engine) Usage() *policy.Usage { return e.usage.Clone() }

// LostGPUHours returns the GPU-hours of work lost to preemptions ordered in
// the hour before now (all budgets together).
func (e *Engine) LostGPUHours(now time.Time) float64 {
	sum := 0.0
	for _, l := range e.losses {
		if now.Sub(l.at) < time.Hour {
			sum += l.gpuHours
		}
	}
	return sum
}

// lostFrom returns the GPU-hours lost in the hour before now to
// preemptions charged to one budget ("" = the shared one).
func (e *Engine) lostFrom(budget string, now time.Time) float64 {
	sum := 0.0
	for _, l := range e.losses {
		if l.budget == budget && now.Sub(l.at) < time.Hour {
			sum += l.gpuHours
		}
	}
	return sum
}

// budgetOf returns the preemption budget a preemptor of a tier draws on:
// its tier's own (key = the tier's name) when the policy gives it one,
// else the shared one (key ""), and its cap (0 = none).
func (e *Engine) budgetOf(tier string) (key string, limit float64) {
	if t := e.pol.Tiers[tier]; t != nil && t.MaxGPUHoursLostPerHour > 0 {
		return tier, t.MaxGPUHoursLostPerHour
	}
	return "", e.pol.Preemption.MaxGPUHoursLostPerHour
}

// Decide runs one cycle on snap at instant now and returns the plan. See
// the package documentation for the steps.
func (e *Engine) Decide(snap *cluster.Snapshot, now time.Time) *Plan {
	c := newCycle(e, snap, now)
	c.run()
	e.apply(&c.mem.changes, now)
	return c.plan
}
