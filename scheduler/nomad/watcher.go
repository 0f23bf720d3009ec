package nomad

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"golang.org/x/sync/errgroup"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// WatcherConfig tunes the watcher. Zero values take the defaults noted.
type WatcherConfig struct {
	// ParkingPool is the node pool where managed jobs wait
	// (default "impact-queue").
	ParkingPool string
	// MinBackoff and MaxBackoff bound the reconnect delay (100ms, 30s).
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
	// OnBatch, when set, is called after each applied batch with its index
	// and events (tests and metrics).
	OnBatch func(index uint64, events []AppliedEvent)
}

// AppliedEvent identifies one event the watcher applied.
type AppliedEvent struct {
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
		cfg.MaxBackoff = 30 * time.Second
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

// Store is the model the watcher writes.
func (w *Watcher) Store() *cluster.Store { return w.store }

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

var topics = "topic=Job&topic=Allocation&topic=Node&topic=Evaluation"

// Run watches Nomad until ctx ends. It never gives up on errors: it logs
// them, backs off and reconnects.
func (w *Watcher) Run(ctx context.Context) error {
	needResync := true
	failures := 0
	var brokenAt time.Time
	for ctx.Err() == nil {
		if !needResync && !brokenAt.IsZero() {
			if time.Since(brokenAt) > w.cfg.ResyncAfter {
				w.log.Info("stream was down long enough to miss events; resyncing", "down", time.Since(brokenAt).Round(time.Millisecond))
				needResync = true
			} else if reset, err := w.probeReset(ctx); err != nil {
				w.log.Warn("probe after reconnect failed", "error", err)
				failures++
				_ = sleepCtx(ctx, backoff(failures, w.cfg.MinBackoff, w.cfg.MaxBackoff))
				continue
			} else if reset {
				w.log.Warn("Nomad's indexes went backwards (agent restarted with new state); resyncing")
				needResync = true
			}
		}
		if needResync && !brokenAt.IsZero() {
			// After a reset the old index means nothing; start over.
			w.lastIndex.Store(0)
			w.atLast = nil
		}
		body, err := w.open(ctx, w.lastIndex.Load())
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			failures++
			if brokenAt.IsZero() {
				brokenAt = time.Now()
			}
			d := backoff(failures, w.cfg.MinBackoff, w.cfg.MaxBackoff)
			w.log.Warn("event stream connect failed", "error", err, "retry_in", d)
			_ = sleepCtx(ctx, d)
			continue
		}
		if needResync {
			if err := w.resync(ctx); err != nil {
				body.Close()
				if ctx.Err() != nil {
					break
				}
				failures++
				d := backoff(failures, w.cfg.MinBackoff, w.cfg.MaxBackoff)
				w.log.Warn("resync failed", "error", err, "retry_in", d)
				_ = sleepCtx(ctx, d)
				continue
			}
			needResync = false
		}
		failures = 0
		brokenAt = time.Time{}
		w.setConnected(true)
		err = w.consume(ctx, body, w.lastIndex.Load())
		w.setConnected(false)
		body.Close()
		if ctx.Err() != nil {
			break
		}
		brokenAt = time.Now()
		w.mu.Lock()
		w.stats.Reconnects++
		w.mu.Unlock()
		var d doubtful
		switch {
		case errors.Is(err, errResyncDue):
			needResync = true
			brokenAt = time.Time{}
		case errors.As(err, &d):
			w.log.Error("event stream data not usable; resyncing", "error", err)
			needResync = true
		default:
			w.log.Warn("event stream ended; reconnecting", "error", err, "index", w.lastIndex.Load())
			_ = sleepCtx(ctx, w.cfg.MinBackoff)
		}
	}
	return nil
}

func (w *Watcher) setConnected(v bool) {
	w.mu.Lock()
	w.stats.Connected = v
	w.mu.Unlock()
}

// open starts an event stream after index.
func (w *Watcher) open(ctx context.Context, index uint64) (io.ReadCloser, error) {
	ep := "/v1/event/stream?" + topics + "&index=" + strconv.FormatUint(index, 10)
	q := &api.QueryOptions{Namespace: "*"}
	body, err := w.c.api.Raw().Response(ep, q.WithContext(ctx))
	if err != nil {
		if statusCode(err) == http.StatusForbidden {
			// Nomad checks a namespace=* subscription against every
			// namespace that exists now, so a namespace created after the
			// token's policy was written breaks the stream.
			return nil, fmt.Errorf("open event stream at index %d: %w (the token needs read-job in every namespace, including ones created later: namespace \"*\" in example/acl/impact-scheduler.policy.hcl)", index, err)
		}
		return nil, fmt.Errorf("open event stream at index %d: %w", index, err)
	}
	return body, nil
}

// consume applies the stream's batches until it fails.
//
// Nomad resumes a stream AT the index asked for (that batch is re-sent and
// skipped here) and answers an index beyond its latest with its latest
// event: a first batch below the resume index means Nomad's state went
// backwards, which needs a resync.
func (w *Watcher) consume(ctx context.Context, body io.ReadCloser, resumeAt uint64) error {
	w.seenAtLast = map[eventKey]int{}
	// A watchdog closes the body when nothing arrives for IdleTimeout or
	// a periodic resync is due, which unblocks the reader.
	var activity atomic.Int64
	activity.Store(time.Now().UnixNano())
	stop := make(chan struct{})
	defer close(stop)
	var why atomic.Value
	go func() {
		start := time.Now()
		t := time.NewTicker(min(w.cfg.IdleTimeout/4, time.Second))
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				body.Close()
				return
			case now := <-t.C:
				if now.Sub(time.Unix(0, activity.Load())) > w.cfg.IdleTimeout {
					why.Store(fmt.Errorf("no event or heartbeat for %v", w.cfg.IdleTimeout))
					body.Close()
					return
				}
				if w.cfg.ResyncInterval > 0 && now.Sub(start) > w.cfg.ResyncInterval {
					why.Store(errResyncDue)
					body.Close()
					return
				}
			}
		}
	}()
	r := bufio.NewReaderSize(body, 256<<10)
	var batch wireBatch
	var scratch []byte
	for {
		line, err := readLine(r)
		if err != nil {
			if v := why.Load(); v != nil {
				return v.(error)
			}
			return fmt.Errorf("read event stream: %w", err)
		}
		now := time.Now()
		activity.Store(now.UnixNano())
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err := decodeBatch(line, &batch, &scratch); err != nil {
			return doubtful{fmt.Errorf("decode event batch: %w", err)}
		}
		if resumeAt > 0 && batch.Index > 0 {
			if batch.Index < resumeAt {
				return doubtful{fmt.Errorf("stream resumed at index %d sent index %d: Nomad's state went backwards", resumeAt, batch.Index)}
			}
			resumeAt = 0
		}
		if err := w.applyBatch(&batch, now); err != nil {
			return doubtful{err}
		}
	}
}

// readLine returns one full line (without the newline), however long.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err == nil {
		return line, nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		return nil, err
	}
	buf := append([]byte(nil), line...)
	for {
		more, err := r.ReadSlice('\n')
		buf = append(buf, more...)
		if err == nil {
			return buf, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

// eventKey identifies an event within its index.
type eventKey struct{ topic, typ, key string }

// applyBatch applies one decoded line (a heartbeat when it has no events).
//
// Nomad may write several lines for one index (a job registration's Job
// and Evaluation events come on two lines), and resumes a stream AT the
// index asked for, re-sending all of that index's lines. So: lines below
// the last applied index are replays and skipped; for lines at the last
// index, the events already applied at that index (counted per topic,
// type and key, in atLast) are skipped once each on a new connection
// (seenAtLast counts them per connection). Nothing is applied twice and
// nothing is lost.
func (w *Watcher) applyBatch(b *wireBatch, now time.Time) error {
	if b.Index == 0 && len(b.Events) == 0 {
		w.mu.Lock()
		w.stats.LastEventAt = now
		w.mu.Unlock()
		return nil
	}
	last := w.lastIndex.Load()
	if b.Index < last {
		w.mu.Lock()
		w.stats.Skipped++
		w.mu.Unlock()
		return nil
	}
	if b.Index > last || w.atLast == nil {
		w.atLast = map[eventKey]int{}
		w.seenAtLast = map[eventKey]int{}
	}
	start := time.Now()
	var applied []AppliedEvent
	if w.cfg.OnBatch != nil {
		applied = make([]AppliedEvent, 0, len(b.Events))
	}
	n := 0
	changed := false
	for i := range b.Events {
		e := &b.Events[i]
		k := eventKey{e.Topic, e.Type, e.Key}
		if w.seenAtLast[k] < w.atLast[k] {
			w.seenAtLast[k]++
			continue
		}
		w.seenAtLast[k]++
		w.atLast[k]++
		n++
		if w.applyEvent(e) {
			changed = true
		}
		if applied != nil {
			applied = append(applied, AppliedEvent{Index: e.Index, Topic: e.Topic, Type: e.Type, Key: e.Key})
		}
	}
	if n == 0 {
		w.mu.Lock()
		w.stats.Skipped++
		w.mu.Unlock()
		return nil
	}
	// Only a change of the model is worth a cycle: evaluation events and
	// stale replays leave it as it was.
	var err error
	if changed {
		err = w.m.flush(w.store, translateConfig{parkingPool: w.cfg.ParkingPool})
	}
	w.lastIndex.Store(b.Index)
	w.mu.Lock()
	w.stats.LastIndex = b.Index
	w.stats.EventsApplied += uint64(n)
	w.stats.Batches++
	w.stats.LastEventAt = now
	w.stats.ApplyLatency = time.Since(start)
	w.syncNodeErrs()
	w.mu.Unlock()
	if w.cfg.OnBatch != nil {
		w.cfg.OnBatch(b.Index, applied)
	}
	if changed {
		w.notify()
	}
	if err != nil {
		w.log.Error("model rejected an update", "index", b.Index, "error", err)
	}
	return nil
}

func (w *Watcher) syncNodeErrs() {
	w.stats.NodeErrors = map[string]string{}
	for id, err := range w.m.nodeErrs {
		w.stats.NodeErrors[id] = err.Error()
	}
}

// applyEvent applies one event to the mirror and reports whether it changed
// anything (an older version of an object, or a topic the model does not
// hold, changes nothing).
func (w *Watcher) applyEvent(e *wireEvent) bool {
	p := &e.Payload
	switch e.Topic {
	case "Job":
		if p.Job != nil {
			deleted := e.Type == "JobDeregistered" && p.Deleted
			return w.m.upsertJob(p.Job, deleted, e.Index)
		}
	case "Allocation":
		if p.Allocation != nil {
			return w.m.upsertAlloc(p.Allocation, e.Index)
		}
	case "Node":
		switch {
		case e.Type == "NodeDeregistration":
			w.m.deleteNode(e.Key)
			return true
		case p.Node != nil:
			return w.m.upsertNode(p.Node, e.Index)
		}
	}
	return false
}

// probeReset reports whether Nomad's table indexes are now below what the
// model has seen: the agent lost its state (a dev agent restart) and the
// stream's old index is meaningless. The probes use a prefix that matches
// nothing, so they are cheap whatever the cluster's size.
func (w *Watcher) probeReset(ctx context.Context) (bool, error) {
	probes := []struct {
		path string
		seen uint64
	}{
		{"/v1/nodes?prefix=0000000000000000", w.m.maxNodes},
		{"/v1/jobs?prefix=impact-probe-none", w.m.maxJobs},
		{"/v1/allocations?prefix=0000000000000000", w.m.maxAllocs},
	}
	for _, p := range probes {
		var out []map[string]any
		qm, err := w.c.api.Raw().Query(p.path, &out, w.c.qns(ctx, "*"))
		if err != nil {
			return false, fmt.Errorf("probe %s: %w", p.path, err)
		}
		if qm.LastIndex < p.seen {
			return true, nil
		}
	}
	return false, nil
}

// resync lists nodes, jobs and allocations and replaces the mirror. The
// stream opened before it replays what changed meanwhile; the ModifyIndex
// guard makes that replay harmless.
func (w *Watcher) resync(ctx context.Context) error {
	start := time.Now()
	nm := newMirror()
	// Nodes: the list has no devices' attributes or meta, so read each.
	var stubs []struct{ ID string }
	qm, err := w.c.api.Raw().Query("/v1/nodes", &stubs, w.c.q(ctx))
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	nm.listedNodes = qm.LastIndex
	nodes := make([]*wireNode, len(stubs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, s := range stubs {
		g.Go(func() error {
			var n wireNode
			if _, err := w.c.api.Raw().Query("/v1/node/"+s.ID, &n, w.c.q(gctx)); err != nil {
				if isNotFound(err) {
					return nil
				}
				return fmt.Errorf("read node %s: %w", s.ID, err)
			}
			nodes[i] = &n
			return nil
		})
	}
	// Jobs: the list says which are alive; read those in full.
	var jstubs []struct {
		ID, Namespace, Status string
		Stop                  bool
	}
	qm, err = w.c.api.Raw().Query("/v1/jobs", &jstubs, w.c.qns(ctx, "*"))
	if err != nil {
		_ = g.Wait()
		return fmt.Errorf("list jobs: %w", err)
	}
	nm.listedJobs = qm.LastIndex
	jobs := make([]*wireJob, len(jstubs))
	for i, s := range jstubs {
		if s.Stop || s.Status == "dead" {
			continue
		}
		g.Go(func() error {
			var j wireJob
			ns := s.Namespace
			if ns == "" {
				ns = w.c.ns
			}
			if _, err := w.c.api.Raw().Query("/v1/job/"+s.ID, &j, w.c.qns(gctx, ns)); err != nil {
				if isNotFound(err) {
					return nil
				}
				return fmt.Errorf("read job %s: %w", s.ID, err)
			}
			jobs[i] = &j
			return nil
		})
	}
	var allocs []*wireAlloc
	qm, err = w.c.api.Raw().Query("/v1/allocations?resources=true&task_states=true", &allocs, w.c.qns(ctx, "*"))
	if err != nil {
		_ = g.Wait()
		return fmt.Errorf("list allocations: %w", err)
	}
	nm.listedAllocs = qm.LastIndex
	if err := g.Wait(); err != nil {
		return err
	}
	for _, n := range nodes {
		if n != nil {
			nm.upsertNode(n, 0)
		}
	}
	for _, j := range jobs {
		if j != nil {
			nm.upsertJob(j, false, 0)
		}
	}
	ended := map[string]*wireAlloc{}
	replaced := map[string]string{} // replacement -> the allocation it replaced
	for _, a := range allocs {
		if a.NextAllocation != "" {
			replaced[a.NextAllocation] = a.ID
		}
	}
	for _, a := range allocs {
		a.listed = true
		if prev, ok := replaced[a.ID]; ok && a.PreviousAllocation == "" {
			a.PreviousAllocation = prev
		}
		if terminalAlloc(a) {
			ended[a.ID] = a
			ns := a.Namespace
			if ns == "" {
				ns = "default"
			}
			nm.noteEnded(cluster.JobKey(ns, a.JobID), a, true)
		} else {
			nm.upsertAlloc(a, 0)
		}
	}
	// Replace the model: drop what Nomad no longer has.
	old := w.m
	snap := w.store.Snapshot()
	for _, n := range snap.Nodes() {
		if nm.nodes[n.ID] == nil {
			nm.dirtyNodes[n.ID] = true
		}
	}
	for _, j := range snap.Jobs() {
		if nm.jobs[j.ID] == nil {
			nm.dirtyJobs[j.ID] = true
		}
	}
	for _, a := range snap.Allocs() {
		if nm.allocs[a.ID] != nil {
			continue
		}
		if t := ended[a.ID]; t != nil {
			finishAlloc(w.store, t) // ended while the stream was down
		} else {
			w.store.DeleteAlloc(a.ID) // gone (garbage-collected): end unknown
		}
	}
	// Keep the regression guard across resyncs unless Nomad reset.
	if w.lastIndex.Load() != 0 {
		nm.maxJobs, nm.maxAllocs, nm.maxNodes = max(nm.maxJobs, old.maxJobs), max(nm.maxAllocs, old.maxAllocs), max(nm.maxNodes, old.maxNodes)
	}
	w.m = nm
	err = nm.flush(w.store, translateConfig{parkingPool: w.cfg.ParkingPool})
	w.mu.Lock()
	w.stats.Resyncs++
	w.syncNodeErrs()
	w.mu.Unlock()
	w.log.Info("resynced with Nomad", "nodes", len(nm.nodes), "jobs", len(nm.jobs), "allocs", len(nm.allocs), "took", time.Since(start).Round(time.Millisecond))
	w.readyOnce.Do(func() { close(w.ready) })
	w.notify()
	if err != nil {
		w.log.Error("model rejected objects during resync", "error", err)
	}
	return nil
}
