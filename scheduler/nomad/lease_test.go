package nomad

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// runElector runs el until the test ends (or stop is called) and counts
// its terms; leading reports whether a term is on.
type testElector struct {
	el      *Elector
	leading atomic.Bool
	terms   atomic.Int32
	cancel  context.CancelFunc
	done    chan struct{}
}

func startTestElector(t *testing.T, e *env, cfg ElectorConfig, others ...*testElector) *testElector {
	t.Helper()
	te := &testElector{el: NewElector(e.c, cfg, e.log), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	te.cancel = cancel
	go func() {
		defer close(te.done)
		_ = te.el.Run(ctx, func(lctx context.Context) {
			for _, o := range others {
				if o.leading.Load() {
					t.Errorf("%s leads while %s does", cfg.HolderID, o.el.cfg.HolderID)
				}
			}
			te.leading.Store(true)
			te.terms.Add(1)
			<-lctx.Done()
			te.leading.Store(false)
		})
	}()
	t.Cleanup(te.stop)
	return te
}

func (te *testElector) stop() {
	te.cancel()
	<-te.done
}

// crash ends the elector as SIGKILL would: no release of the lock or the
// lease.
func (te *testElector) crash() {
	te.el.crashed.Store(true)
	te.stop()
}

func waitTrue(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Issue 39: a crashed leader is replaced after TakeoverAfter, not after
// Nomad's lock expiry (2 x TTL + lock delay, here 6s); the standby's
// lease status says the leader stopped renewing meanwhile.
func TestElectorTakesOverACrashedLeaderAfterTheLease(t *testing.T) {
	e := newEnv(t, 0)
	e.fake.AllowShortLockTTL(true)
	cfg := ElectorConfig{TTL: 2 * time.Second, LockDelay: 2 * time.Second, RetryInterval: time.Second,
		TakeoverAfter: 400 * time.Millisecond, LeasePoll: 20 * time.Millisecond}
	c1, c2 := cfg, cfg
	c1.HolderID, c2.HolderID = "agent-1", "agent-2"
	a1 := startTestElector(t, e, c1)
	waitTrue(t, "agent-1 leads", 5*time.Second, a1.el.IsLeader)
	a2 := startTestElector(t, e, c2, a1)
	// A live leader keeps its lease: no takeover over several periods.
	time.Sleep(3 * cfg.TakeoverAfter)
	if !a1.el.IsLeader() || a2.el.IsLeader() {
		t.Fatal("leadership moved without cause")
	}
	if st := a2.el.LeaseStatus(); st.Holder != "agent-1" || st.Stale {
		t.Errorf("standby's lease status %+v, want agent-1 alive", st)
	}
	crashed := time.Now()
	a1.crash()
	waitTrue(t, "the standby sees the leader's lease stale", 5*time.Second, func() bool {
		st := a2.el.LeaseStatus()
		return a2.el.IsLeader() || (st.Holder == "agent-1" && st.Stale)
	})
	waitTrue(t, "agent-2 leads", 5*time.Second, a2.el.IsLeader)
	took := time.Since(crashed)
	if took >= cfg.TTL {
		t.Errorf("takeover %v after the crash; want well within the lock TTL %v (lease %v)", took, cfg.TTL, cfg.TakeoverAfter)
	}
	t.Logf("takeover %v after the crash (takeover_after %v)", took, cfg.TakeoverAfter)
	if h, err := a2.el.Holder(context.Background()); err != nil || h != "agent-2" {
		t.Errorf("holder %q, %v; want agent-2", h, err)
	}
}

// An agent restarted under the same name finds the lease naming itself
// (its previous process was killed): it takes the lock back at once.
func TestElectorTakesBackItsOwnLeaseAtRestart(t *testing.T) {
	e := newEnv(t, 0)
	e.fake.AllowShortLockTTL(true)
	cfg := ElectorConfig{HolderID: "agent-1", TTL: 10 * time.Second, RetryInterval: 5 * time.Second,
		TakeoverAfter: 5 * time.Second, LeasePoll: 20 * time.Millisecond}
	a1 := startTestElector(t, e, cfg)
	waitTrue(t, "agent-1 leads", 5*time.Second, a1.el.IsLeader)
	a1.crash()
	again := startTestElector(t, e, cfg)
	waitTrue(t, "the restarted agent leads", time.Second, again.el.IsLeader)
}

// A leader whose lease was claimed by a standby (it was cut off long
// enough to be presumed dead) steps down at its next beat, without
// waiting for its lock renewal to fail.
func TestElectorStepsDownWhenItsLeaseIsClaimed(t *testing.T) {
	e := newEnv(t, 0)
	e.fake.AllowShortLockTTL(true)
	cfg := ElectorConfig{HolderID: "agent-1", TTL: 10 * time.Second, TakeoverAfter: 500 * time.Millisecond}
	a1 := startTestElector(t, e, cfg)
	waitTrue(t, "agent-1 leads", 5*time.Second, a1.el.IsLeader)
	other := NewElector(e.c, ElectorConfig{HolderID: "agent-2", TTL: 10 * time.Second}, e.log)
	l, err := other.readLease(context.Background())
	if err != nil || l == nil || l.Holder != "agent-1" || l.LockID == "" {
		t.Fatalf("lease %+v, %v; want agent-1's with its lock ID", l, err)
	}
	other.takeOver(context.Background(), l, time.Second)
	// Its term ends (it may win the lock again at once: the takeover
	// released it and nobody else took it).
	waitTrue(t, "agent-1's term ended", 2*time.Second, func() bool { return !a1.leading.Load() || a1.terms.Load() > 1 })
}
