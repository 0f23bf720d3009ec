package nomad

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
)

// The lease: a fast takeover after a leader crash.
//
// Nomad expires a Variables lock 2 x its TTL after the last renewal and
// frees it a lock delay later (Nomad's nomad/locks.go): with the 10s minimum TTL a
// crashed leader is replaced after 20s at best, 45s with the old 15s
// default. So the leader also beats a lease, a second Variable
// (<lock path>/lease) that it rewrites with check-and-set every
// LeaseBeat, naming itself and its lock ID. A standby reads the lease
// every LeasePoll; when its modify index has not moved for TakeoverAfter
// of the standby's own clock, the leader is presumed dead: the standby
// claims the lease (check-and-set on the index it watched, so one standby
// wins and the old leader's next beat fails), releases the old lock with
// the lock ID the lease names, and acquires the lock as usual.
//
// Safety rests on the leader stepping down first: it leads only while its
// last successful beat was sent less than TakeoverAfter/2 ago, and a
// standby takes over only TakeoverAfter after it saw that beat, so a
// leader cut off from Nomad has stopped acting (TakeoverAfter/2 before)
// when a standby acts. Clocks are only compared with themselves. The
// actions stay fenced as before (EnforceIndex, intents): this bounds the
// overlap, it does not replace that.

// lease is the lease Variable's content.
type lease struct {
	Holder string
	LockID string
	// index is the Variable's modify index (0: no lease yet).
	index uint64
}

// leaseWatch is what a standby saw of the lease: its holder, and since
// when (local clock) its index has not moved.
type leaseWatch struct {
	holder string
	index  uint64
	since  time.Time
}

// LeaseStatus is the lease as this agent last saw it (health).
type LeaseStatus struct {
	// Holder is the agent named by the lease ("" when none).
	Holder string
	// Unchanged is how long the lease has not been renewed, as this agent
	// measured it (0 while it leads, or before its first read).
	Unchanged time.Duration
	// Stale: the holder has not renewed for longer than it may lead
	// without renewing (TakeoverAfter/2): it is dead or cut off from
	// Nomad, and a standby takes over at TakeoverAfter.
	Stale bool
	// TakeoverAfter is the configured takeover time.
	TakeoverAfter time.Duration
}

func (e *Elector) leasePath() string { return e.cfg.Path + "/lease" }

// readLease reads the lease (nil when there is none).
func (e *Elector) readLease(ctx context.Context) (*lease, error) {
	v, _, err := e.c.api.Variables().Peek(e.leasePath(), e.c.q(ctx))
	if err != nil {
		return nil, fmt.Errorf("read lease %s: %w", e.leasePath(), err)
	}
	if v == nil {
		return nil, nil
	}
	return &lease{Holder: v.Items["holder"], LockID: v.Items["lock_id"], index: v.ModifyIndex}, nil
}

// errLeaseMoved: the lease changed under a check-and-set (another agent
// claimed it).
var errLeaseMoved = errors.New("the lease was claimed by another agent")

// writeLease writes the lease if its index is still cas (0: must not
// exist) and returns the new index.
func (e *Elector) writeLease(ctx context.Context, l lease, cas uint64) (uint64, error) {
	v := &api.Variable{Path: e.leasePath(), ModifyIndex: cas, Items: map[string]string{
		"holder": l.Holder, "lock_id": l.LockID, "written_at": time.Now().UTC().Format(time.RFC3339Nano)}}
	out, _, err := e.c.api.Variables().CheckedUpdate(v, e.c.w(ctx))
	if err != nil {
		var conflict api.ErrCASConflict
		if errors.As(err, &conflict) || statusCode(err) == http.StatusConflict {
			return 0, errLeaseMoved
		}
		return 0, fmt.Errorf("write lease %s: %w", e.leasePath(), err)
	}
	return out.ModifyIndex, nil
}

// claimLease names this agent and its new lock in the lease, whatever
// the lease said (the lock decides who leads; the lease only follows it).
func (e *Elector) claimLease(ctx context.Context, lockID string) (uint64, error) {
	var err error
	for range 3 {
		var cur *lease
		if cur, err = e.readLease(ctx); err != nil {
			continue
		}
		cas := uint64(0)
		if cur != nil {
			cas = cur.index
		}
		var idx uint64
		if idx, err = e.writeLease(ctx, lease{Holder: e.cfg.HolderID, LockID: lockID}, cas); err == nil {
			return idx, nil
		}
	}
	return 0, err
}

// recreateLease answers a lease write refused by check-and-set. When the
// lease Variable is gone (deleted by an operator or a clean-up: no agent
// deletes it; a standby taking over rewrites it naming itself, and a clean
// step-down empties it), the leader first renews its lock, which proves
// nobody released it to take over, then writes the lease anew with
// check-and-set on its absence, so a standby that wrote one meanwhile
// wins. Anything else (the lease names another agent, the lock renewal is
// refused) is an error: the caller steps down. Both requests end by
// deadline.
func (e *Elector) recreateLease(ctx context.Context, lockID string, deadline time.Time) (uint64, error) {
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	cur, err := e.readLease(rctx)
	if err != nil {
		return 0, err
	}
	if cur != nil {
		return 0, fmt.Errorf("the lease names %q", cur.Holder)
	}
	v := &api.Variable{Path: e.cfg.Path, Lock: &api.VariableLock{ID: lockID}}
	if _, _, err := e.c.api.Variables().RenewLock(v, e.c.w(rctx)); err != nil {
		return 0, fmt.Errorf("the lease was deleted and renewing the lock failed: %w", err)
	}
	idx, err := e.writeLease(rctx, lease{Holder: e.cfg.HolderID, LockID: lockID}, 0)
	if err != nil {
		return 0, fmt.Errorf("the lease was deleted and writing it again failed: %w", err)
	}
	e.leaseRepairs.Add(1)
	e.log.Warn("the lease Variable was deleted under the leader; written again", "path", e.leasePath())
	return idx, nil
}

// LeaseRepairs is how many times this agent, leading, wrote its lease
// again after the Variable was deleted.
func (e *Elector) LeaseRepairs() uint64 { return e.leaseRepairs.Load() }

// standBy watches the lease until it is worth trying the lock again: the
// lease was released, a stale lease was taken over, or RetryInterval
// passed (a leader without a lease, or a lock that expired).
func (e *Elector) standBy(ctx context.Context) {
	deadline := time.Now().Add(e.cfg.RetryInterval)
	for time.Now().Before(deadline) {
		if sleepCtx(ctx, e.cfg.LeasePoll) != nil {
			return
		}
		l, err := e.readLease(ctx)
		if err != nil {
			e.log.Debug("reading the lease", "error", err)
			continue
		}
		if l == nil {
			continue
		}
		now := time.Now()
		e.mu.Lock()
		if l.index != e.watch.index || l.Holder != e.watch.holder {
			e.watch = leaseWatch{holder: l.Holder, index: l.index, since: now}
		}
		w := e.watch
		e.mu.Unlock()
		switch {
		case l.Holder == "":
			return // released: the lock is free
		case l.Holder == e.cfg.HolderID:
			// This agent's own lease, from a term that ended (it stepped
			// down, or it restarted): nobody else leads, take it back.
			e.takeOver(ctx, l, 0)
			return
		case now.Sub(w.since) >= e.cfg.TakeoverAfter:
			e.takeOver(ctx, l, now.Sub(w.since))
			return
		}
	}
}

// takeOver fences the lease's holder (claims the lease with
// check-and-set) and releases its lock, so the next acquisition succeeds.
func (e *Elector) takeOver(ctx context.Context, l *lease, unchanged time.Duration) {
	if _, err := e.writeLease(ctx, lease{Holder: e.cfg.HolderID}, l.index); err != nil {
		e.log.Debug("lease moved while taking over", "error", err)
		return
	}
	if unchanged > 0 {
		e.log.Warn("the leader stopped renewing its lease; taking over", "leader", l.Holder, "unchanged_for", unchanged.Round(time.Millisecond))
	}
	if l.LockID == "" {
		return
	}
	v := &api.Variable{Path: e.cfg.Path, Lock: &api.VariableLock{ID: l.LockID}}
	if _, _, err := e.c.api.Variables().ReleaseLock(v, e.c.w(ctx)); err != nil && statusCode(err) != http.StatusConflict {
		// Not held any more (expired meanwhile) is fine; acquire says.
		e.log.Debug("releasing the old leader's lock", "error", err)
	}
}

// clearLease empties the lease on a clean step-down, so standbys try the
// lock at their next poll.
func (e *Elector) clearLease(ctx context.Context, index uint64) {
	if _, err := e.writeLease(ctx, lease{}, index); err != nil {
		e.log.Debug("lease not cleared", "error", err)
	}
}

// LeaseStatus reports the lease as this agent last saw it.
func (e *Elector) LeaseStatus() LeaseStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := LeaseStatus{Holder: e.watch.holder, TakeoverAfter: e.cfg.TakeoverAfter}
	if e.leader.Load() {
		st.Holder = e.cfg.HolderID
		return st
	}
	if !e.watch.since.IsZero() && e.watch.holder != "" {
		st.Unchanged = time.Since(e.watch.since)
		st.Stale = st.Unchanged > e.cfg.TakeoverAfter/2
	}
	return st
}

// leaseState is the Elector's view of the lease (embedded in Elector).
type leaseState struct {
	mu    sync.Mutex
	watch leaseWatch
}
