package engine

import (
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// tsim is a small time-stepped driver for scenario tests: jobs run for a
// known duration, plans are validated and applied instantly (engine.Apply).
type tsim struct {
	t        testing.TB
	pol      *policy.Policy
	store    *cluster.Store
	e        *Engine
	now      time.Time
	dur      map[string]time.Duration
	started  map[string]time.Time
	gpus     map[string]int
	project  map[string]string
	gpuHours map[string]float64
}

func newTsim(t testing.TB, pol *policy.Policy, nodes []*cluster.Node) *tsim {
	s := &tsim{
		t: t, pol: pol, store: cluster.NewStore(), e: mustEngine(t, pol), now: t0,
		dur: map[string]time.Duration{}, started: map[string]time.Time{}, gpus: map[string]int{},
		project: map[string]string{}, gpuHours: map[string]float64{},
	}
	for _, n := range nodes {
		if err := s.store.UpsertNode(n); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// submit queues a job that will run for d once admitted.
func (s *tsim) submit(j *cluster.Job, d time.Duration) {
	j.Submit = s.now
	s.dur[j.ID] = d
	s.gpus[j.ID] = j.GPUs()
	s.project[j.ID] = s.pol.ProjectName(j.Spec)
	if err := s.store.UpsertJob(j); err != nil {
		s.t.Fatal(err)
	}
}

// step runs one cycle at the current instant, then advances time by dt,
// charging GPU-hours and finishing jobs whose time is up.
func (s *tsim) step(dt time.Duration) *Plan {
	s.t.Helper()
	snap := s.store.Snapshot()
	plan := s.e.Decide(snap, s.now)
	if err := ValidatePlan(s.pol, snap, plan); err != nil {
		s.t.Fatalf("at %s: invalid plan: %v", s.now, err)
	}
	if err := Apply(s.store, snap, plan, s.now); err != nil {
		s.t.Fatal(err)
	}
	for _, p := range plan.Preemptions {
		delete(s.started, p.JobID)
	}
	for _, a := range plan.Admissions {
		s.started[a.JobID] = s.now
	}
	next := s.now.Add(dt)
	for id, st := range s.started {
		end := st.Add(s.dur[id])
		until := next
		if end.Before(until) {
			until = end
		}
		from := s.now
		if st.After(from) {
			from = st
		}
		if until.After(from) {
			s.gpuHours[s.project[id]] += float64(s.gpus[id]) * until.Sub(from).Hours()
		}
		if !end.After(next) {
			for _, a := range s.store.Snapshot().JobAllocs(id) {
				s.store.DeleteAlloc(a.ID)
			}
			s.store.DeleteJob(id)
			delete(s.started, id)
		}
	}
	s.now = next
	return plan
}
