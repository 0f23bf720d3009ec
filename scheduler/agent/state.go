package agent

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/nomad"
)

// durable is what survives a leader change, on the leader's side: on
// winning a term it loads the durable state (StateStore) into the engine's
// memory and has the executor settle what the previous leader left
// half-done (Recoverer) before the term acts; while leading it saves the
// fair-share usage, the idle requeue counts and the preemption records.
// It belongs to the loop goroutine (terms start and cycles run there), so
// it needs no lock.
type durable struct {
	name      string
	store     StateStore
	exec      Executor // its Recoverer and UnderwayReporter sides, if any
	saveEvery time.Duration
	clk       func() time.Time
	log       hclog.Logger
	metrics   *Metrics

	// preemptions are the recent preemption records (job ID -> record):
	// the previous leader's, then this agent's; a day's worth.
	preemptions map[string]nomad.PreemptionRecord
	// gangs: per job, its runs in a row that lost a member (gangs.go): the
	// previous leader's, then this agent's.
	gangs     map[string]nomad.GangRequeue
	lastSave  time.Time
	recovered bool // this term's Recover succeeded
	// timeline gives the cycler's timeline to save; loadedTimeline is the
	// one the last load read, for the term to start from.
	timeline       func() map[string][]agentapi.Event
	loadedTimeline map[string][]agentapi.Event
}

func newDurable(o Options, log hclog.Logger) *durable {
	return &durable{name: o.Name, store: o.State, exec: o.Executor, saveEvery: o.SaveEvery, clk: o.Clock,
		log: log, metrics: o.Metrics, preemptions: map[string]nomad.PreemptionRecord{}, gangs: map[string]nomad.GangRequeue{}}
}

// takeTimeline returns the timeline the last load read, once.
func (d *durable) takeTimeline() map[string][]agentapi.Event {
	tl := d.loadedTimeline
	d.loadedTimeline = nil
	return tl
}

// load starts a term: it reads the durable state and returns the engine
// memory to resume from (ok false: keep this agent's own, which watched
// the same cluster). The term saves at its first cycle and recovers before
// it acts.
func (d *durable) load(ctx context.Context) (m engine.Memory, ok bool) {
	d.lastSave, d.recovered = time.Time{}, false
	st, found, err := d.store.LoadState(ctx)
	switch {
	case err != nil:
		// Acting without the saved usage would reorder the queue; keep
		// the standby's own usage, which watched the same cluster.
		d.log.Error("loading durable state failed; continuing with this agent's own fair-share memory", "error", err)
		return engine.Memory{}, false
	case !found:
		d.log.Info("no durable state yet; starting fresh")
		return engine.Memory{}, false
	}
	for k, v := range st.Preemptions {
		d.preemptions[k] = v
	}
	if st.GangRequeues != nil {
		// The leader's record: this agent, a standby until now, kept
		// none of its own.
		d.gangs = copyMap(st.GangRequeues)
	}
	d.loadedTimeline = st.Timeline
	d.log.Info("resumed from durable state", "saved_by", st.Leader, "projects", len(st.Usage),
		"preemptions", len(st.Preemptions), "gang_requeues", len(st.GangRequeues))
	return memoryFrom(st, d.clk()), true
}

// memoryFrom rebuilds the engine's memory from durable state: the decayed
// usage, the idle requeue counts, and the preemption budget spent in the
// last hour from the preemption records (the engine caps work lost per
// sliding hour).
func memoryFrom(st DurableState, now time.Time) engine.Memory {
	m := engine.Memory{UsageAt: st.UsageAt, Usage: st.Usage, LastCycle: st.UsageAt, Requeues: st.Requeues}
	for _, r := range st.Preemptions {
		if now.Sub(r.At) < time.Hour && r.LostGPUHours > 0 {
			m.Losses = append(m.Losses, engine.Loss{At: r.At, GPUHours: r.LostGPUHours})
		}
	}
	sort.Slice(m.Losses, func(i, j int) bool { return m.Losses[i].At.Before(m.Losses[j].At) })
	return m
}

// recover runs the executor's Recover once per term, then tells the
// engine which preemptions are under way, so it waits for them instead
// of choosing more victims. Until it succeeds the term must not act:
// acting before the previous leader's intents are settled could admit a
// job twice.
func (d *durable) recover(ctx context.Context, eng *engine.Engine) error {
	r, ok := d.exec.(Recoverer)
	if !ok || d.recovered {
		return nil
	}
	if err := r.Recover(ctx); err != nil {
		return fmt.Errorf("recovering the previous leader's intents (not acting until it succeeds): %w", err)
	}
	d.recovered = true
	if ur, ok := d.exec.(UnderwayReporter); ok {
		now := d.clk()
		for _, p := range ur.PreemptionsUnderway() {
			eng.Preempting(p, now)
		}
	}
	d.log.Info("recovered the previous leader's intents")
	return nil
}

// recordPreemption keeps a preemption carried out now.
func (d *durable) recordPreemption(p engine.Preemption, now time.Time) {
	d.preemptions[p.JobID] = nomad.PreemptionRecord{JobID: p.JobID, Preemptor: p.Preemptor, At: now, GPUs: p.GPUs,
		LostGPUHours: p.LostGPUHours, Reason: p.Reason}
}

// expire forgets preemption records older than a day.
func (d *durable) expire(now time.Time) {
	for id, r := range d.preemptions {
		if now.Sub(r.At) > 24*time.Hour {
			delete(d.preemptions, id)
		}
	}
}

// knownPreemptions are the preemption records the agent holds.
func (d *durable) knownPreemptions() []nomad.PreemptionRecord {
	out := make([]nomad.PreemptionRecord, 0, len(d.preemptions))
	for _, r := range d.preemptions {
		out = append(out, r)
	}
	return out
}

// save writes durable state at most every saveEvery, or at once when
// force (the executor acted, or Nomad lost what was written). It returns
// the error of a write that failed (logged and counted here).
func (d *durable) save(ctx context.Context, now time.Time, force bool, eng *engine.Engine) error {
	if !force && !d.lastSave.IsZero() && now.Sub(d.lastSave) < d.saveEvery {
		return nil
	}
	st := DurableState{
		Usage:        eng.Usage().Values(now),
		UsageAt:      now,
		Preemptions:  copyMap(d.preemptions),
		Requeues:     eng.Memory(now).Requeues,
		GangRequeues: copyMap(d.gangs),
		Leader:       d.name,
	}
	if d.timeline != nil {
		// A copy: the store may keep it (the cycler goes on appending).
		st.Timeline = make(map[string][]agentapi.Event, len(d.timeline()))
		for id, evs := range d.timeline() {
			st.Timeline[id] = slices.Clone(evs)
		}
	}
	if err := d.store.SaveState(ctx, st); err != nil {
		if ctx.Err() == nil {
			d.log.Warn("saving durable state", "error", err)
			d.metrics.RecordActionError("state")
		}
		return fmt.Errorf("saving durable state: %w", err)
	}
	d.lastSave = now
	return nil
}

func copyMap[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
