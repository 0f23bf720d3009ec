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
	"sync/atomic"
	"time"

	"github.com/hashicorp/nomad/api"
)

var topics = "topic=Job&topic=Allocation&topic=Node&topic=Evaluation"

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
	dog := w.watch(ctx, body)
	defer close(dog.stop)
	r := bufio.NewReaderSize(body, 256<<10)
	var batch wireBatch
	var scratch []byte
	for {
		line, err := readLine(r)
		if err != nil {
			if why := dog.reason(); why != nil {
				return why
			}
			return fmt.Errorf("read event stream: %w", err)
		}
		now := time.Now()
		dog.activity.Store(now.UnixNano())
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

// watchdog closes a stream's body when nothing arrived for IdleTimeout
// or a periodic resync is due, which unblocks the reader; reason says
// why it did (nil if it did not).
type watchdog struct {
	activity atomic.Int64 // UnixNano of the last line read
	why      atomic.Value
	stop     chan struct{}
}

func (d *watchdog) reason() error {
	if v := d.why.Load(); v != nil {
		return v.(error)
	}
	return nil
}

// watch starts the watchdog of one stream; close its stop channel when
// the stream is done.
func (w *Watcher) watch(ctx context.Context, body io.Closer) *watchdog {
	d := &watchdog{stop: make(chan struct{})}
	d.activity.Store(time.Now().UnixNano())
	go func() {
		start := time.Now()
		t := time.NewTicker(min(w.cfg.IdleTimeout/4, time.Second))
		defer t.Stop()
		for {
			select {
			case <-d.stop:
				return
			case <-ctx.Done():
				body.Close()
				return
			case now := <-t.C:
				if now.Sub(time.Unix(0, d.activity.Load())) > w.cfg.IdleTimeout {
					d.why.Store(fmt.Errorf("no event or heartbeat for %v", w.cfg.IdleTimeout))
					body.Close()
					return
				}
				if w.cfg.ResyncInterval > 0 && now.Sub(start) > w.cfg.ResyncInterval {
					d.why.Store(errResyncDue)
					body.Close()
					return
				}
			}
		}
	}()
	return d
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
		w.noteSkipped()
		return nil
	}
	if b.Index > last || w.atLast == nil {
		w.atLast = map[eventKey]int{}
		w.seenAtLast = map[eventKey]int{}
	}
	start := time.Now()
	applied, n, changed := w.applyNew(b)
	if n == 0 {
		w.noteSkipped()
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
	if w.cfg.onBatch != nil {
		w.cfg.onBatch(b.Index, applied)
	}
	if changed {
		w.notify()
	}
	if err != nil {
		w.log.Error("model rejected an update", "index", b.Index, "error", err)
	}
	return nil
}

// applyNew applies the batch's events not applied before (see applyBatch)
// to the mirror: n of them, changed if any changed it, and, for onBatch,
// which ones.
func (w *Watcher) applyNew(b *wireBatch) (applied []appliedEvent, n int, changed bool) {
	if w.cfg.onBatch != nil {
		applied = make([]appliedEvent, 0, len(b.Events))
	}
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
			applied = append(applied, appliedEvent{Index: e.Index, Topic: e.Topic, Type: e.Type, Key: e.Key})
		}
	}
	return applied, n, changed
}

func (w *Watcher) noteSkipped() {
	w.mu.Lock()
	w.stats.Skipped++
	w.mu.Unlock()
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
