package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/nomad"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// memStore is a StateStore in memory that can fail on demand.
type memStore struct {
	st      *DurableState
	loadErr error
	saveErr error
	saves   int
}

func (m *memStore) LoadState(context.Context) (DurableState, bool, error) {
	if m.loadErr != nil || m.st == nil {
		return DurableState{}, false, m.loadErr
	}
	return *m.st, true, nil
}

func (m *memStore) SaveState(_ context.Context, s DurableState) error {
	m.saves++
	if m.saveErr != nil {
		return m.saveErr
	}
	m.st = &s
	return nil
}

// scriptedRecoverer is an Executor whose Recover fails until ok, and that
// reports one preemption under way.
type scriptedRecoverer struct {
	fakeExec
	recoverOK    bool
	recoverCalls int
}

func (r *scriptedRecoverer) Recover(context.Context) error {
	r.recoverCalls++
	if !r.recoverOK {
		return errors.New("nomad unreachable")
	}
	return nil
}

func (r *scriptedRecoverer) PreemptionsUnderway() []engine.Preemption {
	return []engine.Preemption{{Stop: engine.Stop{JobID: "default/victim", Allocs: []string{"a1"}, Grace: time.Minute}}}
}

func testDurable(t *testing.T, store StateStore, exec Executor, clk func() time.Time) *durable {
	t.Helper()
	m, err := NewMetrics()
	if err != nil {
		t.Fatal(err)
	}
	return newDurable(Options{Name: "a1", State: store, Executor: exec, SaveEvery: 30 * time.Second, Clock: clk, Metrics: m},
		hclog.NewNullLogger())
}

// A new term resumes from what the last leader saved: its usage, its
// requeue counts, and the lost-work budget of the last hour from its
// preemption records; nothing saved or a failed load keeps the agent's own
// memory.
func TestDurableLoad(t *testing.T) {
	clk := newTestClock()
	now := clk.Now()
	saved := DurableState{
		Usage: map[string]float64{"olmo": 12}, UsageAt: now.Add(-time.Minute), Requeues: map[string]int{"default/hung": 2},
		Preemptions: map[string]nomad.PreemptionRecord{
			"default/old":    {JobID: "default/old", At: now.Add(-2 * time.Hour), LostGPUHours: 5},
			"default/late":   {JobID: "default/late", At: now.Add(-10 * time.Minute), LostGPUHours: 2},
			"default/early":  {JobID: "default/early", At: now.Add(-40 * time.Minute), LostGPUHours: 1},
			"default/nowork": {JobID: "default/nowork", At: now.Add(-5 * time.Minute)},
		},
		Leader: "a0",
	}
	for _, tc := range []struct {
		name  string
		store *memStore
		ok    bool
	}{
		{"nothing saved", &memStore{}, false},
		{"load fails", &memStore{st: &saved, loadErr: errors.New("403")}, false},
		{"saved", &memStore{st: &saved}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := testDurable(t, tc.store, &fakeExec{}, clk.Now)
			d.lastSave, d.recovered = now, true
			m, ok := d.load(context.Background())
			if ok != tc.ok || !d.lastSave.IsZero() || d.recovered {
				t.Fatalf("ok %v lastSave %v recovered %v, want ok %v and a fresh term", ok, d.lastSave, d.recovered, tc.ok)
			}
			if !ok {
				return
			}
			if m.Usage["olmo"] != 12 || !m.UsageAt.Equal(saved.UsageAt) || m.Requeues["default/hung"] != 2 || len(d.preemptions) != 4 {
				t.Errorf("memory %+v, %d records", m, len(d.preemptions))
			}
			if len(m.Losses) != 2 || m.Losses[0].GPUHours != 1 || m.Losses[1].GPUHours != 2 {
				t.Errorf("losses %+v, want the last hour's with lost work, oldest first", m.Losses)
			}
		})
	}
}

// State is saved at the first cycle of a term, then at most every
// SaveEvery unless the executor acted; a failed save is retried next cycle.
func TestDurableSaveThrottle(t *testing.T) {
	clk := newTestClock()
	store := &memStore{}
	d := testDurable(t, store, &fakeExec{}, clk.Now)
	eng, err := engine.New(policy.Default())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d.recordPreemption(engine.Preemption{Stop: engine.Stop{JobID: "default/v", GPUs: 4}, Preemptor: "default/p", LostGPUHours: 1}, clk.Now())
	steps := []struct {
		advance time.Duration
		force   bool
		fail    bool
		saves   int
	}{
		{0, false, false, 1},                // first save of the term
		{10 * time.Second, false, false, 1}, // within SaveEvery
		{time.Second, true, false, 2},       // the executor acted
		{30 * time.Second, false, true, 3},  // due, fails
		{time.Second, false, false, 4},      // retried at once
		{time.Second, false, false, 4},
	}
	for i, s := range steps {
		clk.Advance(s.advance)
		store.saveErr = nil
		if s.fail {
			store.saveErr = errors.New("cas conflict")
		}
		d.save(ctx, clk.Now(), s.force, eng)
		if store.saves != s.saves {
			t.Fatalf("step %d: %d saves, want %d", i, store.saves, s.saves)
		}
	}
	if store.st.Leader != "a1" || store.st.Preemptions["default/v"].Preemptor != "default/p" {
		t.Errorf("saved %+v", store.st)
	}
	clk.Advance(25 * time.Hour)
	d.expire(clk.Now())
	if len(d.preemptions) != 0 {
		t.Errorf("a day-old preemption record kept: %v", d.preemptions)
	}
}

// The previous leader's intents are recovered once per term, and until
// that succeeded the term must not act.
func TestDurableRecoverOncePerTerm(t *testing.T) {
	clk := newTestClock()
	ex := &scriptedRecoverer{}
	d := testDurable(t, &memStore{}, ex, clk.Now)
	eng, err := engine.New(policy.Default())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := d.recover(ctx, eng); err == nil {
		t.Fatal("a failed Recover did not stop the term from acting")
	}
	ex.recoverOK = true
	for range 3 {
		if err := d.recover(ctx, eng); err != nil {
			t.Fatal(err)
		}
	}
	if ex.recoverCalls != 2 {
		t.Errorf("Recover called %d times, want 2 (once failed, once succeeded)", ex.recoverCalls)
	}
	if _, ok := d.load(ctx); ok || d.recovered {
		t.Fatal("a new term kept the last term's recovery")
	}
	_ = d.recover(ctx, eng)
	if ex.recoverCalls != 3 {
		t.Errorf("the new term did not recover again: %d calls", ex.recoverCalls)
	}
}
