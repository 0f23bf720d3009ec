package agent

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/scheduler/nomad"
)

// leadership is this agent's part in the election: it campaigns for the
// leader lock (Elector) in its own goroutine and hands each change to the
// loop (changes); while a term lasts it holds the term's context, which
// bounds every action of the term and ends when the lock is lost; as a
// standby it asks, at a bounded rate, who holds the lock, so health can
// name the leader or report that there is none. Consul's leader tag and
// the leader gauge follow the terms.
type leadership struct {
	name        string
	elector     Elector
	holderEvery time.Duration // Options.HolderCheckEvery
	clk         func() time.Time
	log         hclog.Logger
	metrics     *Metrics
	registrar   *Registrar // nil without Consul

	changes chan leadershipChange
	leader  atomic.Bool

	mu          sync.Mutex
	electionErr error
	ctx         context.Context // this term's; nil while standing by
	cancel      context.CancelFunc
	holder      string
	holderErr   error
	// holderChecked is the clock time of the last holder check (zero:
	// check at the next cycle); noLeaderSince the wall time since when no
	// agent holds the lock (zero while one does).
	holderChecked time.Time
	noLeaderSince time.Time
}

// leadershipChange is one term won (lost closes when it ends) or lost.
type leadershipChange struct {
	gained bool
	lost   <-chan struct{}
}

// leaderStatus is the election as health reports it.
type leaderStatus struct {
	leader        bool
	holder        string
	holderErr     error
	electionErr   error
	noLeaderSince time.Time
	// lease is the leader's lease as this agent sees it (nil when the
	// elector does not report one).
	lease *nomad.LeaseStatus
}

func newLeadership(o Options, log hclog.Logger) *leadership {
	return &leadership{
		name: o.Name, elector: o.Elector, holderEvery: o.HolderCheckEvery, clk: o.Clock,
		log: log, metrics: o.Metrics, registrar: o.Registrar,
		changes: make(chan leadershipChange, 2),
	}
}

// campaign runs the election until ctx ends, reporting each change on
// changes; a failing campaign is retried with back-off (500ms doubling to
// 30s) and reported by health meanwhile.
func (l *leadership) campaign(ctx context.Context) {
	backoff := 500 * time.Millisecond
	for ctx.Err() == nil {
		lost, err := l.elector.Campaign(ctx)
		if err != nil && ctx.Err() != nil {
			return
		}
		l.mu.Lock()
		l.electionErr = err
		l.mu.Unlock()
		if err != nil {
			l.log.Warn("campaign failed, retrying", "error", err, "backoff", backoff)
			if !sleepCtx(ctx, backoff) {
				return
			}
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		backoff = 500 * time.Millisecond
		if !l.send(ctx, leadershipChange{gained: true, lost: lost}) {
			return
		}
		select {
		case <-lost:
		case <-ctx.Done():
			return
		}
		if !l.send(ctx, leadershipChange{gained: false}) {
			return
		}
	}
}

func (l *leadership) send(ctx context.Context, ch leadershipChange) bool {
	select {
	case l.changes <- ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// sleepCtx waits d or until ctx ends; false when ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// start begins a term won with lost: its context ends when lost closes or
// ctx ends. The term is not published (context, IsLeader) until won, so
// the agent can first load the durable state with it.
func (l *leadership) start(ctx context.Context, lost <-chan struct{}) (context.Context, context.CancelFunc) {
	lctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-lost:
			cancel()
		case <-lctx.Done():
		}
	}()
	return lctx, cancel
}

// won publishes the term start began.
func (l *leadership) won(lctx context.Context, cancel context.CancelFunc) {
	l.mu.Lock()
	l.ctx, l.cancel = lctx, cancel
	l.mu.Unlock()
	l.leader.Store(true)
	l.announce(true)
	l.log.Info("acquired leadership", "agent", l.name)
}

// stepDown ends the term, if any, and reports whether there was one.
func (l *leadership) stepDown() bool {
	l.mu.Lock()
	cancel := l.cancel
	l.ctx, l.cancel = nil, nil
	if cancel != nil {
		// A fresh standby learns who leads now at its next cycle.
		l.holderChecked = time.Time{}
	}
	l.mu.Unlock()
	if cancel == nil {
		return false
	}
	cancel()
	l.leader.Store(false)
	l.announce(false)
	l.log.Info("lost leadership; standing by", "agent", l.name)
	return true
}

// leading reports whether a term is published.
func (l *leadership) leading() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ctx != nil
}

func (l *leadership) announce(leader bool) {
	l.metrics.RecordLeader(leader)
	if l.registrar != nil {
		if err := l.registrar.SetLeader(leader); err != nil {
			l.metrics.RecordConsulInSync(false)
			l.log.Warn("updating consul tag failed; the registration reconciler retries", "error", err)
		}
	}
}

// context returns the context bounding this term's actions, or nil when
// not leading (or the term just ended).
func (l *leadership) context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil || l.ctx.Err() != nil {
		return nil
	}
	return l.ctx
}

// checkHolder asks the elector who leads (standbys only), so health can
// name the leader and report a cluster where nobody does. It asks at most
// once every holderEvery: every standby runs a cycle on each model
// update, and asking on each would add one request to Nomad per cycle per
// standby for an answer that changes at most once per lock TTL.
func (l *leadership) checkHolder(ctx context.Context) {
	hr, ok := l.elector.(HolderReporter)
	if !ok || !l.holderDue() {
		return
	}
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	h, err := hr.Holder(hctx)
	if err == nil && h == l.name && !l.leader.Load() {
		// The lock's holder item names this agent, which does not lead:
		// it lost the lock without releasing it (Nomad was restarted or
		// unreachable, its renewals failed). Nobody leads until another
		// agent takes the lock; a scheduler token does not see the lock
		// itself, only this item, which stays until overwritten.
		h = ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.holder, l.holderErr = h, err
	if err == nil && h != "" {
		l.noLeaderSince = time.Time{}
	} else if l.noLeaderSince.IsZero() {
		l.noLeaderSince = time.Now()
	}
}

// holderDue says whether a holder check is due, and if so counts it as
// made now.
func (l *leadership) holderDue() bool {
	now := l.clk()
	l.mu.Lock()
	defer l.mu.Unlock()
	last := l.holderChecked
	if !last.IsZero() && now.Sub(last) < l.holderEvery && !now.Before(last) {
		return false
	}
	l.holderChecked = now
	return true
}

// resign releases the lock with a fresh context (the agent's is done), so
// a standby takes over at once instead of after the lock TTL.
func (l *leadership) resign() {
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.elector.Resign(rctx); err != nil {
		l.log.Warn("resigning leadership failed; a standby takes over after the lock TTL", "error", err)
	}
}

func (l *leadership) status() leaderStatus {
	var lease *nomad.LeaseStatus
	if lr, ok := l.elector.(LeaseReporter); ok {
		st := lr.LeaseStatus()
		lease = &st
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return leaderStatus{leader: l.leader.Load(), holder: l.holder, holderErr: l.holderErr,
		electionErr: l.electionErr, noLeaderSince: l.noLeaderSince, lease: lease}
}
