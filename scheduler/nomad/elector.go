package nomad

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// ElectorConfig tunes leader election.
type ElectorConfig struct {
	// Path of the lock Variable (default "impact/leader").
	Path string
	// HolderID names this agent in the lock's items (e.g. hostname:port).
	HolderID string
	// TTL of the lock (default 15s); it is renewed every TTL/2.
	TTL time.Duration
	// LockDelay: after a holder vanishes without releasing, nobody may take
	// the lock for this long (default: TTL, like Nomad), so that an old
	// leader cut off from Nomad notices it lost the lock (it steps down
	// when its renewal, tried every TTL/2, fails) before a new one acts.
	// Values below TTL/2 cannot give that guarantee and are raised to it.
	LockDelay time.Duration
	// RetryInterval between acquisition attempts while the lease shows a
	// live leader (default TTL/2).
	RetryInterval time.Duration
	// TakeoverAfter: a standby takes the lock over when the leader's lease
	// (lease.go) has not been renewed for this long (default 10s). The
	// leader steps down when it could not renew its lease for half of it.
	TakeoverAfter time.Duration
	// LeaseBeat is how often the leader renews its lease and its lock
	// (default TakeoverAfter/5, at most TTL/2).
	LeaseBeat time.Duration
	// LeasePoll is how often a standby reads the lease (default
	// TakeoverAfter/10, at most 1s).
	LeasePoll time.Duration
}

// Validate checks the configuration against what Nomad accepts (a lock
// TTL between 10s and 24h; Nomad answers 400 otherwise).
func (c ElectorConfig) Validate() error {
	if c.TTL != 0 && (c.TTL < 10*time.Second || c.TTL > 24*time.Hour) {
		return fmt.Errorf("leader lock TTL %v: Nomad requires between 10s and 24h", c.TTL)
	}
	if c.LockDelay < 0 {
		return fmt.Errorf("leader lock delay %v: must not be negative", c.LockDelay)
	}
	if c.TakeoverAfter < 0 {
		return fmt.Errorf("leader takeover time %v: must not be negative", c.TakeoverAfter)
	}
	return nil
}

// DefaultTakeoverAfter is how long a leader's lease may go unrenewed
// before a standby takes over (ElectorConfig.TakeoverAfter).
const DefaultTakeoverAfter = 10 * time.Second

// Elector elects one leader among impact agents with a Nomad Variables
// lock (the lock-acquire / lock-renew / lock-release endpoints behind
// api.Locks) and a lease beside it (lease.go) that lets a standby take
// over a crashed leader's lock after TakeoverAfter rather than after
// Nomad's 2 x TTL + lock delay. Only the leader acts on Nomad; the others
// keep their model warm and take over when the lock frees.
type Elector struct {
	c      *Client
	cfg    ElectorConfig
	log    hclog.Logger
	leader atomic.Bool
	leaseState
	// crashed (tests): Run returns without releasing the lock or the
	// lease, as a killed process would.
	crashed atomic.Bool
	// leaseRepairs counts leases written again after someone deleted the
	// Variable under the leader (recreateLease).
	leaseRepairs atomic.Uint64
}

// NewElector builds an elector.
func NewElector(c *Client, cfg ElectorConfig, logger hclog.Logger) *Elector {
	if cfg.Path == "" {
		cfg.Path = "impact/leader"
	}
	if cfg.TTL <= 0 {
		cfg.TTL = api.DefaultLockTTL
	}
	if cfg.LockDelay <= 0 {
		cfg.LockDelay = cfg.TTL
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if cfg.LockDelay < cfg.TTL/2 {
		logger.Named("elector").Warn("lock_delay below TTL/2 allows two leaders at once; raised", "lock_delay", cfg.LockDelay, "ttl", cfg.TTL)
		cfg.LockDelay = cfg.TTL / 2
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = cfg.TTL / 2
	}
	if cfg.TakeoverAfter <= 0 {
		cfg.TakeoverAfter = DefaultTakeoverAfter
	}
	if cfg.LeaseBeat <= 0 {
		cfg.LeaseBeat = cfg.TakeoverAfter / 5
	}
	cfg.LeaseBeat = min(cfg.LeaseBeat, cfg.TTL/2)
	if cfg.LeasePoll <= 0 {
		cfg.LeasePoll = min(cfg.TakeoverAfter/10, time.Second)
	}
	return &Elector{c: c, cfg: cfg, log: logger.Named("elector")}
}

// IsLeader reports whether this agent holds the lock now.
func (e *Elector) IsLeader() bool { return e.leader.Load() }

// Holder returns the HolderID of the current lock holder ("" if none):
// the lease's holder, or, without a lease (an older leader), the lock's
// holder item. Nomad shows a variable's lock only to management tokens
// (and without ACLs); with a scheduler token the holder item is all there
// is, which a clean release empties (see release) but a crashed holder
// leaves until the next holder overwrites it.
func (e *Elector) Holder(ctx context.Context) (string, error) {
	l, err := e.readLease(ctx)
	if err != nil {
		return "", err
	}
	if l != nil {
		return l.Holder, nil
	}
	v, _, err := e.c.api.Variables().Peek(e.cfg.Path, e.c.q(ctx))
	if err != nil {
		return "", fmt.Errorf("read lock %s: %w", e.cfg.Path, err)
	}
	if v == nil {
		return "", nil
	}
	return v.Items["holder"], nil
}

// Run contends for leadership until ctx ends. Each time it wins, it runs
// lead with a context that is cancelled as soon as leadership is lost (a
// renewal refused, the lease claimed by another agent, or no successful
// renewal in time), and waits for lead to return before contending again.
// On exit it releases the lock and empties the lease.
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context)) error {
	for ctx.Err() == nil {
		// The lock's TTL runs from when Nomad granted it, some time after
		// the request left: counting from the send errs on the safe side.
		sent := time.Now()
		lockID, err := e.acquire(ctx)
		if err != nil || lockID == "" {
			if err != nil {
				e.log.Warn("lock acquisition failed", "path", e.cfg.Path, "error", err)
			}
			e.standBy(ctx)
			continue
		}
		beatSent := time.Now()
		leaseIdx, err := e.claimLease(ctx, lockID)
		if err != nil {
			// Leading without a lease would let a standby take over
			// while this agent acts.
			e.log.Warn("lock acquired but the lease could not be written; releasing the lock", "error", err)
			e.release(context.WithoutCancel(ctx), lockID)
			_ = sleepCtx(ctx, e.cfg.RetryInterval)
			continue
		}
		e.mu.Lock()
		e.watch = leaseWatch{}
		e.mu.Unlock()
		e.log.Info("became leader", "holder", e.cfg.HolderID)
		e.leader.Store(true)
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			lead(lctx)
		}()
		lost, leaseIdx := e.hold(lctx, lockID, sent, leaseIdx, beatSent, done)
		cancel()
		<-done
		e.leader.Store(false)
		if e.crashed.Load() {
			return nil
		}
		if !lost {
			// Stepping down on purpose (shutdown or lead returned): free
			// the lock, then the lease, so a successor need not wait.
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			e.release(rctx, lockID)
			e.clearLease(rctx, leaseIdx)
			rcancel()
		}
		e.log.Info("no longer leader", "lost", lost)
	}
	return nil
}

// acquire tries once; "" with no error means someone else holds the lock.
func (e *Elector) acquire(ctx context.Context) (string, error) {
	v := &api.Variable{
		Path:  e.cfg.Path,
		Items: map[string]string{"holder": e.cfg.HolderID},
		Lock:  &api.VariableLock{TTL: e.cfg.TTL.String(), LockDelay: e.cfg.LockDelay.String()},
	}
	out, _, err := e.c.api.Variables().AcquireLock(v, e.c.w(ctx))
	if err != nil {
		if statusCode(err) == http.StatusConflict {
			return "", nil
		}
		return "", err
	}
	if out == nil || out.Lock == nil || out.Lock.ID == "" {
		return "", fmt.Errorf("lock %s acquired without a lock ID", e.cfg.Path)
	}
	return out.Lock.ID, nil
}

// hold renews the lease and the lock every LeaseBeat until ctx ends or
// lead returns (lost=false), or leadership is lost (lost=true); it returns
// the lease's last index. lastRenew and lastBeat are when the requests
// that last renewed the lock and the lease were sent. The agent steps
// down once 3/4 of a TTL passes without a newer lock renewal (before the
// lock can expire and pass to another agent), or half of TakeoverAfter
// without a newer lease renewal (before a standby takes over), or at once
// when the lock renewal is refused or the lease was claimed.
func (e *Elector) hold(ctx context.Context, lockID string, lastRenew time.Time, leaseIdx uint64, lastBeat time.Time, done <-chan struct{}) (bool, uint64) {
	t := time.NewTicker(e.cfg.LeaseBeat)
	defer t.Stop()
	leaseLimit := e.cfg.TakeoverAfter / 2
	lockLimit := e.cfg.TTL * 3 / 4
	for {
		select {
		case <-ctx.Done():
			return false, leaseIdx
		case <-done:
			return false, leaseIdx
		case <-t.C:
		}
		// A request that hangs (Nomad stalled, a half-open connection)
		// must not keep this agent leading past the point where it has to
		// step down.
		deadline := lastRenew.Add(lockLimit)
		if d := lastBeat.Add(leaseLimit); d.Before(deadline) {
			deadline = d
		}
		sent := time.Now()
		rctx, cancel := context.WithDeadline(ctx, deadline)
		idx, err := e.writeLease(rctx, lease{Holder: e.cfg.HolderID, LockID: lockID}, leaseIdx)
		cancel()
		if ctx.Err() != nil {
			return false, leaseIdx
		}
		switch {
		case err == nil:
			leaseIdx, lastBeat = idx, sent
		case errors.Is(err, errLeaseMoved):
			idx, rerr := e.recreateLease(ctx, lockID, deadline)
			if rerr != nil {
				e.log.Warn("lease claimed by another agent; stepping down", "path", e.leasePath(), "detail", rerr)
				return true, leaseIdx
			}
			leaseIdx, lastBeat, lastRenew = idx, sent, sent
		case time.Since(lastBeat) >= leaseLimit:
			e.log.Warn("cannot renew the lease in time; stepping down", "error", err)
			return true, leaseIdx
		default:
			e.log.Warn("lease renewal failed; retrying", "error", err)
		}
		sent = time.Now()
		rctx, cancel = context.WithDeadline(ctx, lastRenew.Add(lockLimit))
		v := &api.Variable{Path: e.cfg.Path, Lock: &api.VariableLock{ID: lockID}}
		_, _, err = e.c.api.Variables().RenewLock(v, e.c.w(rctx))
		cancel()
		if ctx.Err() != nil {
			return false, leaseIdx
		}
		if err == nil {
			lastRenew = sent
			continue
		}
		if statusCode(err) == http.StatusConflict {
			e.log.Warn("lock renewal refused: another agent holds it", "path", e.cfg.Path)
			return true, leaseIdx
		}
		if time.Since(lastRenew) >= lockLimit {
			e.log.Warn("cannot renew the lock in time; stepping down", "error", err)
			return true, leaseIdx
		}
		e.log.Warn("lock renewal failed; retrying", "error", err)
	}
}

func (e *Elector) release(ctx context.Context, lockID string) {
	v := &api.Variable{Path: e.cfg.Path, Lock: &api.VariableLock{ID: lockID}}
	out, _, err := e.c.api.Variables().ReleaseLock(v, e.c.w(ctx))
	if err != nil {
		e.log.Warn("lock release failed (it expires after its TTL)", "error", err)
		return
	}
	// Clear the holder item, unless someone took the lock meanwhile (the
	// check-and-set then fails, harmlessly).
	blank := &api.Variable{Path: e.cfg.Path, Items: map[string]string{"holder": ""}, ModifyIndex: out.ModifyIndex}
	if _, _, err := e.c.api.Variables().CheckedUpdate(blank, e.c.w(ctx)); err != nil {
		e.log.Debug("holder item not cleared", "error", err)
	}
}
