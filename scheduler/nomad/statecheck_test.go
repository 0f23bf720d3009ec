package nomad

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Issue 39: the durable-state Variables an operator deletes or overwrites
// are found by one list and named; what the store wrote itself, or
// deleted itself, is not drift.
func TestStateDriftFindsDeletedAndOverwrittenVariables(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	st := NewStateStore(e.c, StateConfig{}, e.log)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := st.SaveUsage(ctx, map[string]float64{"p": 1.5}, now); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveRequeues(ctx, map[string]int{"default/a": 1}); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveTimeline(ctx, map[string]string{"default/a": "[]"}); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveGangRequeues(ctx, map[string]GangRequeue{"default/g": {Runs: 1, Last: now}}); err != nil {
		t.Fatal(err)
	}
	// The store deletes the gang requeues itself: not drift.
	if err := st.SaveGangRequeues(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordPreemption(ctx, PreemptionRecord{JobID: "default/v", Preemptor: "default/p", At: now, GPUs: 2}); err != nil {
		t.Fatal(err)
	}
	// An intent is the executor's and not checked.
	if err := st.PutIntent(ctx, &Intent{Kind: IntentAdmit, JobID: "default/x", Phase: PhaseDecided}); err != nil {
		t.Fatal(err)
	}
	if d, err := st.Drift(ctx); err != nil || len(d) != 0 {
		t.Fatalf("drift %v, %v right after the writes; want none", d, err)
	}
	vars := e.c.api.Variables()
	if _, err := vars.Delete("impact/state/usage", nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := vars.Update(&api.Variable{Path: "impact/state/timeline", Items: map[string]string{"x": "y"}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteIntent(ctx, "default/x"); err != nil {
		t.Fatal(err)
	}
	d, err := st.Drift(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range d {
		got = append(got, x.String())
	}
	want := []string{"variable timeline written by someone else", "variable usage deleted"}
	if len(got) != 2 || !strings.HasPrefix(got[0], want[0]) || got[1] != want[1] {
		t.Fatalf("drift %q; want %q", got, want)
	}
	// Written again: in sync.
	if err := st.SaveUsage(ctx, map[string]float64{"p": 1.5}, now); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveTimeline(ctx, map[string]string{"default/a": "[]"}); err != nil {
		t.Fatal(err)
	}
	if d, err := st.Drift(ctx); err != nil || len(d) != 0 {
		t.Fatalf("drift %v, %v after writing again; want none", d, err)
	}
	// A new term forgets what the last one wrote.
	if _, err := vars.Delete("impact/state/usage", nil); err != nil {
		t.Fatal(err)
	}
	st.ForgetWritten()
	if d, err := st.Drift(ctx); err != nil || len(d) != 0 {
		t.Fatalf("drift %v, %v after ForgetWritten; want none", d, err)
	}
	// A failing list is an error naming the prefix.
	e.fake.FailNext(http.MethodGet, "/v1/vars", http.StatusInternalServerError, "boom")
	if err := st.SaveUsage(ctx, nil, now); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Drift(ctx); err == nil || !strings.Contains(err.Error(), "impact/state/") {
		t.Fatalf("drift error %v; want one naming the prefix", err)
	}
}

// Restoring the preemption records merges the agent's with the ones
// Nomad holds: the executor's record of the same preemption (dated when
// it finished) is not doubled, records Nomad lost come back, and a
// record written since is kept.
func TestRestorePreemptionsMerges(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	st := NewStateStore(e.c, StateConfig{}, e.log)
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	decided := PreemptionRecord{JobID: "default/a", Preemptor: "default/p", At: t0, GPUs: 4}
	lost := PreemptionRecord{JobID: "default/b", Preemptor: "default/p", At: t0.Add(time.Minute), GPUs: 2}
	// Nomad holds the executor's record of a's preemption (a grace later)
	// and a newer one the agent does not know yet.
	finished := decided
	finished.At = t0.Add(40 * time.Second)
	newer := PreemptionRecord{JobID: "default/c", Preemptor: "default/q", At: t0.Add(2 * time.Minute), GPUs: 1}
	for _, r := range []PreemptionRecord{finished, newer} {
		if err := st.RecordPreemption(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.RestorePreemptions(ctx, []PreemptionRecord{decided, lost}); err != nil {
		t.Fatal(err)
	}
	recs, err := st.Preemptions(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.JobID+"@"+r.At.Format("15:04:05"))
	}
	want := "[default/a@03:00:40 default/b@03:01:00 default/c@03:02:00]"
	if s := "[" + strings.Join(got, " ") + "]"; s != want {
		t.Fatalf("records %s; want %s", s, want)
	}
	if d, err := st.Drift(ctx); err != nil || len(d) != 0 {
		t.Fatalf("drift %v, %v after the restore; want none", d, err)
	}
	// Deleted: the agent's records are all there is.
	if _, err := e.c.api.Variables().Delete("impact/state/preemptions", nil); err != nil {
		t.Fatal(err)
	}
	if err := st.RestorePreemptions(ctx, []PreemptionRecord{decided, lost}); err != nil {
		t.Fatal(err)
	}
	if recs, err = st.Preemptions(ctx, time.Time{}); err != nil || len(recs) != 2 {
		t.Fatalf("records %+v, %v after restoring a deleted Variable; want the agent's 2", recs, err)
	}
}

// Issue 39: a lease Variable deleted under the leader is written again at
// its next beat; the leader keeps leading (before, the refused
// check-and-set made it step down without releasing its lock: no leader
// until the lock expired), and the count says so.
func TestElectorWritesADeletedLeaseAgain(t *testing.T) {
	e := newEnv(t, 0)
	e.fake.AllowShortLockTTL(true)
	// TakeoverAfter 2s: the leader steps down when a lease write has not
	// succeeded for 1s, which a loaded machine running -race does not
	// reach by accident (at 500ms it had 250ms); it beats every 400ms.
	cfg := ElectorConfig{HolderID: "agent-1", TTL: 10 * time.Second, TakeoverAfter: 2 * time.Second}
	a1 := startTestElector(t, e, cfg)
	waitTrue(t, "agent-1 leads", 5*time.Second, a1.el.IsLeader)
	if _, err := e.c.api.Variables().Delete(a1.el.leasePath(), nil); err != nil {
		t.Fatal(err)
	}
	// The leader counts the repair after the write returns: the lease can
	// be read back before the count moves, so wait for both.
	waitTrue(t, "the lease written again and counted", 5*time.Second, func() bool {
		l, err := a1.el.readLease(context.Background())
		return err == nil && l != nil && l.Holder == "agent-1" && a1.el.LeaseRepairs() > 0
	})
	if n := a1.el.LeaseRepairs(); n != 1 {
		t.Errorf("lease repairs %d; want 1", n)
	}
	time.Sleep(3 * a1.el.cfg.LeaseBeat) // several beats: none may step down or repair again
	if n := a1.el.LeaseRepairs(); n != 1 {
		t.Errorf("lease repairs %d after %d more beats; want still 1", n, 3)
	}
	if !a1.leading.Load() || a1.terms.Load() != 1 {
		t.Errorf("leading %v after %d terms; want the first term still on", a1.leading.Load(), a1.terms.Load())
	}
	// A lease claimed by another agent is not "deleted": it steps down.
	// (Read and written again when the leader beats in between.)
	other := NewElector(e.c, ElectorConfig{HolderID: "agent-2", TTL: 10 * time.Second}, e.log)
	waitTrue(t, "agent-2 claimed the lease", 2*time.Second, func() bool {
		l, err := other.readLease(context.Background())
		if err != nil || l == nil {
			t.Fatalf("lease %+v, %v", l, err)
		}
		_, err = other.writeLease(context.Background(), lease{Holder: "agent-2"}, l.index)
		return err == nil
	})
	waitTrue(t, "agent-1's first term ended", 2*time.Second, func() bool { return !a1.leading.Load() || a1.terms.Load() > 1 })
	if n := a1.el.LeaseRepairs(); n != 1 {
		t.Errorf("lease repairs %d after a claim; want still 1", n)
	}
}
