package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/nomad"
)

// The ports (ports.go) on the concrete adapter in scheduler/nomad. Each
// adapter is a thin translation; the behaviour lives in the nomad package
// (and is tested there against nomadfake) or in the agent's parts.

// watcherModel adapts nomad.Watcher to Model.
type watcherModel struct{ w *nomad.Watcher }

func (m *watcherModel) Run(ctx context.Context) error { return m.w.Run(ctx) }
func (m *watcherModel) Snapshot() *cluster.Snapshot   { return m.w.Snapshot() }
func (m *watcherModel) Updated() <-chan struct{}      { return m.w.Changes() }
func (m *watcherModel) Status() ModelStatus {
	return watcherStatus(m.w.Ready(), m.w.Stats(), time.Now())
}

// streamDownAfter is how long the event stream may be disconnected before
// health reports it (reconnects within this are routine).
const streamDownAfter = 30 * time.Second

func watcherStatus(ready <-chan struct{}, st nomad.WatcherStats, now time.Time) ModelStatus {
	ms := ModelStatus{Index: st.LastIndex, EventsApplied: st.EventsApplied, Resyncs: st.Resyncs,
		Reconnects: st.Reconnects, ApplyLatency: st.ApplyLatency}
	select {
	case <-ready:
		ms.Synced = true
	default:
	}
	if !st.Connected && !st.LastEventAt.IsZero() && now.Sub(st.LastEventAt) > streamDownAfter {
		ms.Err = fmt.Errorf("event stream disconnected since %s (reconnecting)", st.LastEventAt.UTC().Format(time.RFC3339))
	}
	if !ms.Synced && ms.Err == nil {
		ms.Err = errors.New("waiting for the first full sync")
	}
	return ms
}

// executorAdapter adapts nomad.Executor to Executor, Recoverer and Waiter.
// Each Apply first checks the deadlines of earlier admissions, so a gang
// that did not fully start is rolled back within one cycle of its deadline.
type executorAdapter struct {
	x *nomad.Executor
	// mismatches is the executor's PinMismatches at the last report.
	mismatches uint64
}

func (e *executorAdapter) Apply(ctx context.Context, plan *engine.Plan, _ *cluster.Snapshot) (nomad.ApplyReport, error) {
	rolled := e.x.CheckDeadlines(ctx)
	rep := e.x.Apply(ctx, plan)
	rep.RolledBack = rolled
	if n := e.x.PinMismatches(); n > e.mismatches {
		rep.PinMismatches = int(n - e.mismatches)
		e.mismatches = n
	}
	return rep, ctx.Err()
}

func (e *executorAdapter) Recover(ctx context.Context) error { return e.x.Recover(ctx) }
func (e *executorAdapter) PreemptionsUnderway() []engine.Preemption {
	return e.x.PreemptionsUnderway()
}
func (e *executorAdapter) Wait() { e.x.Wait() }

// explainAdapter writes the agent's explanation through nomad.ExplainWriter
// as VariableItems: the Variable says what /v1/explain says, in the same
// words, and links the job's page on the agent.
type explainAdapter struct {
	w        *nomad.ExplainWriter
	pageBase string // config UIBase(); "" leaves the page item out
}

func (e *explainAdapter) WriteExplanation(ctx context.Context, x agentapi.Explanation) error {
	page := ""
	if e.pageBase != "" {
		page = e.pageBase + JobPagePath(x.Namespace, x.Job)
	}
	return e.w.WriteItems(ctx, cluster.JobKey(x.Namespace, x.Job), VariableItems(x, page), x.GeneratedAt)
}

func (e *explainAdapter) ForgetExplanation(ctx context.Context, jobID string) error {
	return e.w.Forget(ctx, jobID)
}

func (e *explainAdapter) SweepExplanations(ctx context.Context, keep func(string) bool) (int, error) {
	return e.w.Sweep(ctx, keep)
}

// electorAdapter adapts nomad.Elector's Run(ctx, lead) to Campaign/Resign.
// The elector runs once in the background from the first Campaign; each
// term it wins is handed to the next Campaign call.
type electorAdapter struct {
	el *nomad.Elector

	once   sync.Once
	terms  chan (<-chan struct{})
	cancel context.CancelFunc
	done   chan struct{}
}

func (e *electorAdapter) start(ctx context.Context) {
	e.once.Do(func() {
		rctx, cancel := context.WithCancel(ctx)
		e.cancel = cancel
		e.terms = make(chan (<-chan struct{}))
		e.done = make(chan struct{})
		go func() {
			defer close(e.done)
			_ = e.el.Run(rctx, func(lctx context.Context) {
				select {
				case e.terms <- lctx.Done():
				case <-lctx.Done():
					return
				}
				<-lctx.Done()
			})
		}()
	})
}

func (e *electorAdapter) Campaign(ctx context.Context) (<-chan struct{}, error) {
	e.start(ctx)
	select {
	case lost := <-e.terms:
		return lost, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Holder names the agent holding the lock ("" when none).
func (e *electorAdapter) Holder(ctx context.Context) (string, error) { return e.el.Holder(ctx) }

// LeaseStatus says whether the leader renews its lease.
func (e *electorAdapter) LeaseStatus() nomad.LeaseStatus { return e.el.LeaseStatus() }

// Resign stops the elector, which releases the lock if held.
func (e *electorAdapter) Resign(ctx context.Context) error {
	if e.cancel == nil {
		return nil
	}
	e.cancel()
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the elector to release the lock: %w", ctx.Err())
	}
}

// statsAdapter adapts nomad.DeviceStatsReader to UtilizationSource.
type statsAdapter struct{ r *nomad.DeviceStatsReader }

func (s *statsAdapter) GPUStats(ctx context.Context, nodeIDs []string) ([]GPUStat, map[string]error) {
	p := s.r.Poll(ctx, nodeIDs)
	out := make([]GPUStat, 0, len(p.GPUs))
	for _, g := range p.GPUs {
		st := GPUStat{NodeID: g.NodeID, DeviceID: g.DeviceID, Utilization: -1, MemoryUsedMiB: -1, MemoryTotalMiB: -1}
		if g.HasUtilization {
			st.Utilization = g.UtilizationPct
		}
		if g.HasMemory {
			st.MemoryUsedMiB, st.MemoryTotalMiB = g.MemoryUsedMiB, g.MemoryTotalMiB
		}
		out = append(out, st)
	}
	return out, p.Failed
}

// stateAdapter maps DurableState onto nomad.StateStore. Admission intents
// and preemption records are written by the executor itself (before it
// acts); the agent saves the fair-share usage and the idle requeue counts
// and reads the records back.
type stateAdapter struct {
	st *nomad.StateStore
	// savedRequeues is what SaveRequeues last stored (nil: nothing yet);
	// savedGangs what SaveGangRequeues last stored.
	savedRequeues map[string]int
	savedGangs    map[string]nomad.GangRequeue
	// savedTimeline is what SaveTimeline last stored (nil: nothing yet).
	savedTimeline map[string]string
}

func (s *stateAdapter) LoadState(ctx context.Context) (DurableState, bool, error) {
	usage, at, err := s.st.LoadUsage(ctx)
	if err != nil {
		return DurableState{}, false, err
	}
	recs, err := s.st.Preemptions(ctx, time.Now().Add(-24*time.Hour))
	if err != nil {
		return DurableState{}, false, err
	}
	requeues, err := s.st.LoadRequeues(ctx)
	if err != nil {
		return DurableState{}, false, err
	}
	gangs, err := s.st.LoadGangRequeues(ctx)
	if err != nil {
		return DurableState{}, false, err
	}
	tl, err := s.st.LoadTimeline(ctx)
	if err != nil {
		return DurableState{}, false, err
	}
	ds := DurableState{Usage: usage, UsageAt: at, Preemptions: map[string]nomad.PreemptionRecord{}, Requeues: requeues,
		GangRequeues: gangs, Timeline: decodeTimeline(tl)}
	for _, r := range recs {
		ds.Preemptions[r.JobID] = r
	}
	return ds, !at.IsZero() || len(recs) > 0 || len(requeues) > 0 || len(gangs) > 0 || len(tl) > 0, nil
}

func (s *stateAdapter) StateDrift(ctx context.Context) ([]nomad.VariableDrift, error) {
	return s.st.Drift(ctx)
}

// RewriteAll forgets what was saved, so the next SaveState writes it all.
func (s *stateAdapter) RewriteAll() {
	s.savedRequeues, s.savedGangs, s.savedTimeline = nil, nil, nil
}

func (s *stateAdapter) NewTerm() {
	s.st.ForgetWritten()
	s.RewriteAll()
}

func (s *stateAdapter) RestorePreemptions(ctx context.Context, recs []nomad.PreemptionRecord) error {
	return s.st.RestorePreemptions(ctx, recs)
}

// LeaseRepairs counts the leases the elector wrote again after a deletion.
func (e *electorAdapter) LeaseRepairs() uint64 { return e.el.LeaseRepairs() }

// SaveState writes the usage, and the timeline and the idle and gang
// requeue counts when they changed since the last save (usage every save).
func (s *stateAdapter) SaveState(ctx context.Context, d DurableState) error {
	if err := s.st.SaveUsage(ctx, d.Usage, d.UsageAt); err != nil {
		return err
	}
	if err := s.saveTimeline(ctx, d.Timeline); err != nil {
		return err
	}
	if s.savedRequeues == nil || !maps.Equal(s.savedRequeues, d.Requeues) {
		if err := s.st.SaveRequeues(ctx, d.Requeues); err != nil {
			return err
		}
		s.savedRequeues = maps.Clone(d.Requeues)
		if s.savedRequeues == nil {
			s.savedRequeues = map[string]int{}
		}
	}
	if s.savedGangs == nil || !maps.Equal(s.savedGangs, d.GangRequeues) {
		if err := s.st.SaveGangRequeues(ctx, d.GangRequeues); err != nil {
			return err
		}
		s.savedGangs = maps.Clone(d.GangRequeues)
		if s.savedGangs == nil {
			s.savedGangs = map[string]nomad.GangRequeue{}
		}
	}
	return nil
}
