package nomad

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// DefaultWatcherMaxBackoff is the longest the watcher waits between
// reconnect attempts (WatcherConfig.MaxBackoff).
const DefaultWatcherMaxBackoff = 5 * time.Second

// WatcherConfig tunes the watcher. Zero values take the defaults noted.
type WatcherConfig struct {
	// ParkingPool is the node pool where managed jobs wait
	// (default "impact-queue").
	ParkingPool string
	// MinBackoff and MaxBackoff bound the reconnect delay (100ms, 5s).
	// The cap is what an outage of Nomad costs beyond its own length:
	// the model is back at most MaxBackoff (plus a resync) after Nomad
	// answers again, within one leader lock period (10s at least); with
	// 30s a 30s server outage left the queue
	// unattended 19s after Nomad was back (e2e/scheduler
	// TestLeaderAfterNomadRestart). An attempt every 5s while Nomad is
	// down costs it nothing.
	MinBackoff, MaxBackoff time.Duration
	// ResyncAfter: an outage longer than this ends in a full resync, since
	// Nomad's event buffer may no longer hold the missed events (10s).
	ResyncAfter time.Duration
	// ResyncInterval forces a full resync this often as a safety net
	// (10m; negative disables).
	ResyncInterval time.Duration
	// IdleTimeout: a stream that sends nothing, not even a heartbeat, for
	// this long is considered dead (Nomad heartbeats every 10s; 35s).
	IdleTimeout time.Duration
	// Store receives the model (default: a new one).
	Store *cluster.Store
	// onBatch, when set, is called after each applied batch with its index
	// and events. Only the package's tests set it (unexported: production
	// observes the watcher through Stats and the store's subscription).
	onBatch func(index uint64, events []appliedEvent)
}

// appliedEvent identifies one event the watcher applied (for onBatch).
type appliedEvent struct {
	Index uint64
	Topic string
	Type  string
	Key   string
}

// WatcherStats are counters for metrics and health.
type WatcherStats struct {
	// LastIndex is the index of the last applied event batch.
	LastIndex uint64
	// EventsApplied and Batches count what the stream delivered and was
	// applied; Skipped counts replayed batches at or below LastIndex.
	EventsApplied, Batches, Skipped uint64
	// Resyncs and Reconnects count full resyncs and stream reconnects.
	Resyncs, Reconnects uint64
	// LastEventAt is when the last batch (or heartbeat) arrived.
	LastEventAt time.Time
	// ApplyLatency is how long applying the last batch took.
	ApplyLatency time.Duration
	// Connected is true while a stream is open.
	Connected bool
	// NodeErrors lists nodes whose GPU attributes could not be read.
	NodeErrors map[string]string
}

// Watcher keeps the cluster model in step with Nomad.
//
// Nomad writes the stream as NDJSON lines of events, several lines per
// index at times (a registration's Job and Evaluation events), resumes a
// stream AT the index asked for, and answers an index beyond its latest
// with its latest event (all checked on a real 2.0.6 agent). The watcher
// applies lines in order, skips lines below its last index and, at the
// last index, the events it already applied there, so a reconnect neither
// loses nor repeats an event. Every object also carries Nomad's
// ModifyIndex and an older version never overwrites a newer one, and an
// object missing from a resync's lists is not brought back by a replayed
// older event, so the replay that follows a resync is harmless. It resyncs
// (lists nodes, jobs and allocations, replacing the model) at start, after
// an outage longer than ResyncAfter (Nomad's event buffer may no longer
// hold the gap), when Nomad's indexes went backwards (probe after a
// reconnect, or a resumed stream starting below its index: a restarted
// agent that lost its state), after undecodable data, and every
// ResyncInterval as a safety net.
type Watcher struct {
	c     *Client
	cfg   WatcherConfig
	log   hclog.Logger
	store *cluster.Store
	m     *mirror // owned by the Run goroutine

	ready     chan struct{}
	readyOnce sync.Once
	changes   chan struct{}

	mu    sync.Mutex
	stats WatcherStats

	lastIndex atomic.Uint64
	// atLast counts the events applied at lastIndex; seenAtLast counts
	// those seen at lastIndex on the current connection (see applyBatch).
	// Owned by the Run goroutine.
	atLast, seenAtLast map[eventKey]int
}

// NewWatcher builds a watcher; call Run.
func NewWatcher(c *Client, cfg WatcherConfig, logger hclog.Logger) *Watcher {
	if cfg.ParkingPool == "" {
		cfg.ParkingPool = "impact-queue"
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultWatcherMaxBackoff
	}
	if cfg.ResyncAfter <= 0 {
		cfg.ResyncAfter = 10 * time.Second
	}
	if cfg.ResyncInterval == 0 {
		cfg.ResyncInterval = 10 * time.Minute
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 35 * time.Second
	}
	if cfg.Store == nil {
		cfg.Store = cluster.NewStore()
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Watcher{
		c: c, cfg: cfg, log: logger.Named("watcher"), store: cfg.Store, m: newMirror(),
		ready: make(chan struct{}), changes: make(chan struct{}, 1),
	}
}

// Snapshot returns the current model.
func (w *Watcher) Snapshot() *cluster.Snapshot { return w.store.Snapshot() }

// Ready is closed once the first full resync is applied.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// Changes receives (coalesced) after every change of the model.
func (w *Watcher) Changes() <-chan struct{} { return w.changes }

// Stats returns a copy of the counters.
func (w *Watcher) Stats() WatcherStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stats
	s.NodeErrors = map[string]string{}
	for k, v := range w.stats.NodeErrors {
		s.NodeErrors[k] = v
	}
	return s
}

func (w *Watcher) notify() {
	select {
	case w.changes <- struct{}{}:
	default:
	}
}

var errResyncDue = errors.New("periodic resync due")

// doubtful marks stream errors after which the model cannot be trusted
// without a resync (undecodable data, an apply error).
type doubtful struct{ err error }

func (d doubtful) Error() string { return d.err.Error() }
func (d doubtful) Unwrap() error { return d.err }

// Run watches Nomad until ctx ends. It never gives up on errors: it logs
// them, backs off and reconnects.
func (w *Watcher) Run(ctx context.Context) error {
	rs := &runState{needResync: true}
	for ctx.Err() == nil {
		if !w.checkAfterBreak(ctx, rs) {
			continue
		}
		body, err := w.open(ctx, w.lastIndex.Load())
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if rs.brokenAt.IsZero() {
				rs.brokenAt = time.Now()
			}
			w.retry(ctx, rs, "event stream connect failed", err)
			continue
		}
		if rs.needResync {
			if err := w.resync(ctx); err != nil {
				body.Close()
				if ctx.Err() != nil {
					break
				}
				w.retry(ctx, rs, "resync failed", err)
				continue
			}
			rs.needResync = false
		}
		rs.failures, rs.brokenAt = 0, time.Time{}
		w.setConnected(true)
		err = w.consume(ctx, body, w.lastIndex.Load())
		w.setConnected(false)
		body.Close()
		if ctx.Err() != nil {
			break
		}
		w.streamEnded(ctx, rs, err)
	}
	return nil
}

// runState is what Run carries from one connection to the next.
type runState struct {
	needResync bool
	failures   int       // attempts failed in a row (the backoff)
	brokenAt   time.Time // when the stream broke; zero while it is healthy
}

// retry counts a failed attempt and backs off before the next.
func (w *Watcher) retry(ctx context.Context, rs *runState, msg string, err error) {
	rs.failures++
	d := backoff(rs.failures, w.cfg.MinBackoff, w.cfg.MaxBackoff)
	w.log.Warn(msg, "error", err, "retry_in", d)
	_ = sleepCtx(ctx, d)
}

// checkAfterBreak decides, before reconnecting a broken stream, whether
// the model needs a resync: after an outage longer than ResyncAfter, or
// when Nomad's indexes went backwards (probeReset); a resync after a break
// starts the stream over from index 0. It returns false when the probe
// failed (after backing off): try again.
func (w *Watcher) checkAfterBreak(ctx context.Context, rs *runState) bool {
	if !rs.needResync && !rs.brokenAt.IsZero() {
		if time.Since(rs.brokenAt) > w.cfg.ResyncAfter {
			w.log.Info("stream was down long enough to miss events; resyncing", "down", time.Since(rs.brokenAt).Round(time.Millisecond))
			rs.needResync = true
		} else if reset, err := w.probeReset(ctx); err != nil {
			w.retry(ctx, rs, "probe after reconnect failed", err)
			return false
		} else if reset {
			w.log.Warn("Nomad's indexes went backwards (agent restarted with new state); resyncing")
			rs.needResync = true
		}
	}
	if rs.needResync && !rs.brokenAt.IsZero() {
		// After a reset the old index means nothing; start over.
		w.lastIndex.Store(0)
		w.atLast = nil
	}
	return true
}

// streamEnded notes a stream that ended with err and decides what the
// next connection needs: a resync when one is due or the data could not
// be used, else a short pause.
func (w *Watcher) streamEnded(ctx context.Context, rs *runState, err error) {
	rs.brokenAt = time.Now()
	w.mu.Lock()
	w.stats.Reconnects++
	w.mu.Unlock()
	var d doubtful
	switch {
	case errors.Is(err, errResyncDue):
		rs.needResync = true
		rs.brokenAt = time.Time{}
	case errors.As(err, &d):
		w.log.Error("event stream data not usable; resyncing", "error", err)
		rs.needResync = true
	default:
		w.log.Warn("event stream ended; reconnecting", "error", err, "index", w.lastIndex.Load())
		_ = sleepCtx(ctx, w.cfg.MinBackoff)
	}
}

func (w *Watcher) setConnected(v bool) {
	w.mu.Lock()
	w.stats.Connected = v
	w.mu.Unlock()
}

func (w *Watcher) syncNodeErrs() {
	w.stats.NodeErrors = map[string]string{}
	for id, err := range w.m.nodeErrs {
		w.stats.NodeErrors[id] = err.Error()
	}
}
