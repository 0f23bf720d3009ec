package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/nomad"
)

// cycler runs the scheduling cycle: snapshot, engine.Decide, and, while
// leading, the executor's Apply; then it remembers what was done (record.go),
// publishes the view that /v1/queue, /v1/explain and the pages serve, and
// hands it to the explanation writer and the durable state. It owns the
// engine, which is not safe for concurrent use: everything but the view
// (an atomic pointer the HTTP handlers load) belongs to the loop
// goroutine, so it needs no lock.
type cycler struct {
	o       Options
	log     hclog.Logger
	lead    *leadership
	state   *durable
	explain *explainWriter
	health  *health
	util    *utilQueue
	nomad   *nomadState

	engine *engine.Engine
	view   atomic.Pointer[view]
	// history is the agent's memory of its last action on each job.
	history map[string]jobHistory
	// timeline is each job's history of state changes (see addHistory);
	// submitted the earliest submit time seen of each job in the model.
	timeline  map[string][]agentapi.Event
	submitted map[string]time.Time
	// rollbacks counts a job's admissions rolled back in a row, for the
	// back-off before the next (see deferRolledBack), kept while the job
	// is in the model. A gang's runs in a row that lost a member are in
	// the durable state (state.gangs, gangs.go).
	rollbacks map[string]int
	// ending: gangs whose requeue this cycle ends them failed (their
	// explanation is kept once the view is built); ended: what `impact
	// explain` says of gangs ended failed (gangs.go).
	ending map[string]engine.Preemption
	ended  map[string]endedJob
	// pendingSince is the first model update not yet consumed by a cycle.
	pendingSince time.Time
	// warned is, per invalid job, the version (JobModifyIndex) whose
	// problems were logged (see warnInvalid).
	warned map[string]uint64
}

// jobHistory is the agent's memory of its last action on a job, so that a
// running job's explanation still says where it was placed and when.
type jobHistory struct {
	Decision string
	At       time.Time
	Nodes    map[string][]string
	// Admitted is the engine's explanation of the admission (score,
	// placement, warnings), shown while the job runs.
	Admitted    *engine.Explanation
	PreemptedBy string
	Reason      string
	// Before is the history a preemption replaced, restored if the
	// preemption is withdrawn (recordWithdrawals).
	Before *jobHistory
	// Withdrawn is why its last preemption was withdrawn within its
	// grace: it runs on (shown as its reason while it runs).
	Withdrawn string
}

// cycleResult summarises one cycle.
type cycleResult struct {
	At       time.Time
	Leader   bool
	Plan     *engine.Plan
	Report   nomad.ApplyReport
	Decide   time.Duration
	Duration time.Duration
	Err      error
}

func newCycler(o Options, log hclog.Logger) (*cycler, error) {
	c := &cycler{o: o, log: log, history: map[string]jobHistory{}, timeline: map[string][]agentapi.Event{}, submitted: map[string]time.Time{},
		rollbacks: map[string]int{}, ending: map[string]engine.Preemption{}, ended: map[string]endedJob{}, warned: map[string]uint64{}}
	if err := c.restore(nil); err != nil {
		return nil, err
	}
	c.view.Store(&view{queue: agentapi.Queue{Jobs: []agentapi.Entry{}}, explain: map[string]agentapi.Explanation{}})
	return c, nil
}

// restore starts a fresh engine, from m when set (a new leader's durable
// state), so fair-share memory survives a leader change.
func (c *cycler) restore(m *engine.Memory) error {
	opts := []engine.Option{engine.WithLogger(c.o.Logger), engine.WithDefaultPool(c.o.DefaultPool)}
	if m != nil {
		opts = append(opts, engine.WithMemory(*m))
	}
	e, err := engine.New(c.o.Policy, opts...)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	c.engine = e
	return nil
}

// updated notes a model update for the event-lag metric.
func (c *cycler) updated() {
	if c.pendingSince.IsZero() {
		c.pendingSince = c.o.Clock()
	}
}

// run runs one scheduling cycle.
//
// It returns the cycle's own cost: its wall time less the time spent
// acting on Nomad (the loop's debounce window is a multiple of it).
func (c *cycler) run(ctx context.Context) (cost time.Duration) {
	if ctx.Err() != nil {
		return 0
	}
	res := cycleResult{At: c.o.Clock()}
	wallStart := time.Now()
	if !c.synced(res.At) {
		return time.Since(wallStart)
	}
	// A new term recovers the last leader's intents before it decides:
	// the engine must know the preemptions under way (and where moved
	// jobs restart) before its first plan, which would otherwise choose
	// victims again or admit jobs onto GPUs freed for others.
	lctx := c.lead.context()
	res.Leader = lctx != nil
	if lctx == nil {
		c.lead.checkHolder(ctx)
	} else if err := c.state.recover(lctx, c.engine); err != nil {
		// Decide, show, but do not act.
		res.Err, lctx = err, nil
	}
	snap := c.o.Model.Snapshot()
	c.util.feed(c.engine)
	t0 := time.Now()
	res.Plan = c.engine.Decide(snap, res.At)
	res.Decide = time.Since(t0)
	a0 := time.Now()
	c.act(lctx, snap, &res)
	acting := time.Since(a0)
	v := buildView(snap, res.Plan, c.history, res.At, res.Leader, c.o.Policy)
	c.showEnded(v, snap, res.At)
	c.addSubmitted(v, snap)
	c.addHistory(v, res.At)
	c.warnInvalid(snap, v)
	// Metrics first: whoever reads the new view finds them as new.
	c.o.Metrics.RecordCluster(v.stats)
	c.o.Metrics.RecordIdle(res.Plan.Running, res.Leader)
	c.view.Store(v)
	if lctx != nil {
		c.explain.write(lctx, v)
		// What the executor did is saved at once; usage alone only every
		// SaveEvery.
		r := res.Report
		acted := len(r.Admitted)+len(r.Preempted)+len(r.Withdrawing)+len(r.Requeued)+len(r.RolledBack)+len(r.Reclaimed) > 0
		_ = c.state.save(lctx, res.At, acted, c.engine)
	}
	c.nomad.reconcile(ctx, lctx, snap, res.At,
		func(rctx context.Context) error { return c.state.save(rctx, res.At, true, c.engine) },
		c.state.knownPreemptions)
	c.finish(res, wallStart)
	return time.Since(wallStart) - acting
}

// warnInvalid logs one warning per version of a job that cannot be
// scheduled as written (bad impact_* meta, an unknown tier, a group no
// node can hold), naming every problem: Nomad accepted the job
// ("Job registration successful"), so the log and explain are where an
// operator learns of it. A job is logged again when a new version of it
// (a new JobModifyIndex) is still invalid, not every cycle.
func (c *cycler) warnInvalid(snap *cluster.Snapshot, v *view) {
	for id, e := range v.explain {
		if e.State != agentapi.StateInvalid {
			continue
		}
		j, ok := snap.Job(id)
		if !ok {
			continue
		}
		if idx, seen := c.warned[id]; seen && idx == j.ModifyIndex {
			continue
		}
		c.warned[id] = j.ModifyIndex
		problems := e.Errors
		if len(problems) == 0 {
			problems = []string{e.Reason}
		}
		c.log.Warn("job cannot be scheduled as written; it stays queued until it is fixed and submitted again",
			"job", id, "job_modify_index", j.ModifyIndex, "problems", strings.Join(problems, "; "))
	}
	for id := range c.warned {
		if e, ok := v.explain[id]; !ok || e.State != agentapi.StateInvalid {
			delete(c.warned, id)
		}
	}
}

// synced records the event lag and says whether the model is synced:
// deciding on a partial model could admit out of order (health reports
// the state, and the first sync triggers a cycle).
func (c *cycler) synced(now time.Time) bool {
	lag := time.Duration(0)
	if !c.pendingSince.IsZero() {
		lag = now.Sub(c.pendingSince)
		c.pendingSince = time.Time{}
	}
	st := c.o.Model.Status()
	c.o.Metrics.RecordEvents(lag, st)
	if !st.Synced {
		c.log.Debug("skipping cycle: model not synced with nomad yet", "status", st.Err)
	}
	return st.Synced
}

// act carries the plan out when lctx is set (leading and recovered) and
// remembers what was done; otherwise nothing planned is under way.
func (c *cycler) act(lctx context.Context, snap *cluster.Snapshot, res *cycleResult) {
	if lctx == nil {
		c.forgetUnapplied(res.Plan, nil)
		return
	}
	c.resetGangRecords(snap, res.At)
	c.limitFailures(res.Plan, snap)
	rep, err := c.o.Executor.Apply(lctx, res.Plan, snap)
	res.Report = rep
	if err != nil {
		res.Err = fmt.Errorf("applying plan: %w", err)
	}
	c.record(res.Plan, snap, rep, res.At)
	c.forgetUnapplied(res.Plan, &rep)
	c.deferRolledBack(snap, rep.RolledBack, res.At)
	c.recordGangRequeues(res.Plan, setOf(rep.Requeued), res.At)
}

// finish reports a cycle: health, metrics, the log, and the tests'
// onCycle hook.
func (c *cycler) finish(res cycleResult, wallStart time.Time) {
	res.Duration = time.Since(wallStart)
	c.health.cycleDone(res.At, res.Err)
	c.o.Metrics.RecordCycle(res.Decide, res.Duration, res.Err != nil)
	switch p := res.Plan; {
	case res.Err != nil && errors.Is(res.Err, context.Canceled):
		c.log.Debug("cycle interrupted", "error", res.Err)
	case res.Err != nil:
		c.log.Warn("cycle failed", "error", res.Err)
	case res.Leader && (len(p.Admissions) > 0 || len(p.Preemptions) > 0):
		c.log.Info("cycle", "leader", res.Leader, "admissions", len(p.Admissions),
			"preemptions", len(p.Preemptions), "queued", len(p.Queue), "decide", res.Decide)
	default:
		c.log.Trace("cycle", "leader", res.Leader, "queued", len(p.Queue), "decide", res.Decide)
	}
	if c.o.onCycle != nil {
		c.o.onCycle(res)
	}
}

// addSubmitted gives each explanation the earliest submit time seen of
// its job while it stayed in the model: a requeue or preemption parks the
// job again (a new Nomad submit time) without leaving the model, so this
// is the user's submission. A job that left forgets it.
func (c *cycler) addSubmitted(v *view, snap *cluster.Snapshot) {
	for id := range c.submitted {
		if _, ok := snap.Job(id); !ok {
			delete(c.submitted, id)
		}
	}
	for _, j := range snap.Jobs() {
		if t, ok := c.submitted[j.ID]; !ok || j.Submit.Before(t) {
			c.submitted[j.ID] = j.Submit
		}
		if e, ok := v.explain[j.ID]; ok {
			e.Submitted = c.submitted[j.ID]
			v.explain[j.ID] = e
		}
	}
}

// addHistory appends to each job's timeline the changes of its state or
// decision this cycle shows, keeps the last agentapi.MaxHistory, forgets
// the jobs that left, and hands each explanation its timeline. Called
// before the view is stored.
func (c *cycler) addHistory(v *view, now time.Time) {
	for id := range c.timeline {
		if _, ok := v.explain[id]; !ok {
			delete(c.timeline, id)
		}
	}
	for id, e := range v.explain {
		tl := c.timeline[id]
		if n := len(tl); n == 0 || tl[n-1].State != e.State || tl[n-1].Decision != e.Decision {
			tl = append(tl, agentapi.Event{At: now, State: e.State, Decision: e.Decision, Summary: e.Summary})
			if len(tl) > agentapi.MaxHistory {
				tl = append([]agentapi.Event(nil), tl[len(tl)-agentapi.MaxHistory:]...)
			}
			c.timeline[id] = tl
		}
		e.History = append([]agentapi.Event(nil), tl...)
		v.explain[id] = e
	}
}
