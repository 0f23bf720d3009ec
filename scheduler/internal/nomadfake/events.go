package nomadfake

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// wireEvent is one event as Nomad writes it on the stream (keys in the
// order of testdata/events.ndjson).
type wireEvent struct {
	FilterKeys []string
	Index      uint64
	Key        string
	Namespace  string
	Payload    json.RawMessage
	Topic      string
	Type       string
}

type bufferedEvent struct {
	wire wireEvent
}

type wireBatch struct {
	Events []wireEvent
	Index  uint64
}

// emit records an event whose payload is {payloadKey: obj}, serialised
// now so that later changes to obj do not alter it.
func (s *Server) emit(idx uint64, topic, typ, key, ns string, filterKeys []string, payloadKey string, obj any) {
	s.emitRaw(idx, topic, typ, key, ns, filterKeys, map[string]any{payloadKey: obj})
}

func (s *Server) emitRaw(idx uint64, topic, typ, key, ns string, filterKeys []string, payload any) {
	b, err := json.Marshal(payload)
	if err != nil {
		b = []byte(`{}`)
	}
	s.events = append(s.events, bufferedEvent{wire: wireEvent{
		FilterKeys: filterKeys, Index: idx, Key: key, Namespace: ns, Payload: b, Topic: topic, Type: typ,
	}})
	if over := len(s.events) - s.opts.EventBufferSize; over > 0 {
		s.events = append(s.events[:0:0], s.events[over:]...)
	}
}

type topicFilter map[string][]string // topic -> keys ("*" = all)

func parseTopics(vals []string) topicFilter {
	f := topicFilter{}
	if len(vals) == 0 {
		f["*"] = []string{"*"}
		return f
	}
	for _, v := range vals {
		topic, key, ok := strings.Cut(v, ":")
		if !ok {
			key = "*"
		}
		f[topic] = append(f[topic], key)
	}
	return f
}

func (f topicFilter) match(e *wireEvent) bool {
	for _, topic := range []string{e.Topic, "*"} {
		for _, k := range f[topic] {
			if k == "*" || k == e.Key {
				return true
			}
			for _, fk := range e.FilterKeys {
				if fk == k {
					return true
				}
			}
		}
	}
	return false
}

// serveStream implements /v1/event/stream: NDJSON, one line per index with
// the matching events of that index, `{}` heartbeats while idle. As on a
// real 2.0.6 agent, ?index=N starts AT index N (inclusive); an index older
// than the buffer starts at the oldest buffered event, and an index beyond
// the latest starts at the latest event (Nomad's "closest index" rule).
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	from, _ := strconv.ParseUint(q.Get("index"), 10, 64)
	filter := parseTopics(q["topic"])
	after := s.streamStart(from)
	sid, kill, epoch := s.openStream()
	defer s.closeStream(sid, kill)
	fl, _ := w.(http.Flusher)
	flush := func(bw *bufio.Writer) bool {
		if bw.Flush() != nil {
			return false
		}
		if fl != nil {
			fl.Flush()
		}
		return true
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	if fl != nil {
		fl.Flush()
	}
	hb := time.NewTicker(s.opts.HeartbeatInterval)
	defer hb.Stop()
	for {
		batches, wake, ok := s.batchesAfter(after, filter, epoch)
		if !ok {
			return
		}
		for _, b := range batches {
			line, _ := json.Marshal(b)
			_, _ = bw.Write(line)
			_ = bw.WriteByte('\n')
			after = b.Index
		}
		if len(batches) > 0 && !flush(bw) {
			return
		}
		select {
		case <-wake:
		case <-hb.C:
			_, _ = bw.WriteString("{}\n")
			if !flush(bw) {
				return
			}
		case <-kill:
			// An abrupt drop: the connection is hijacked and closed so the
			// client sees a broken stream, not a clean end.
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					_ = conn.Close()
				}
			}
			return
		case <-r.Context().Done():
			return
		}
	}
}

// streamStart is the index a stream asked to start at index from has
// already sent: one below from, once from is brought down to the latest
// event's index (Nomad's "closest index" rule).
func (s *Server) streamStart(from uint64) uint64 {
	s.mu.Lock()
	if n := len(s.events); n > 0 && from > s.events[n-1].wire.Index {
		from = s.events[n-1].wire.Index
	}
	s.mu.Unlock()
	if from > 0 {
		return from - 1
	}
	return 0
}

// openStream registers a stream (DropStreams closes kill) and returns the
// epoch it belongs to (Restart ends every stream of an older one).
func (s *Server) openStream() (sid int, kill chan struct{}, epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kill = make(chan struct{})
	sid = s.nextSID
	s.nextSID++
	s.streams[sid] = kill
	return sid, kill, s.epoch
}

func (s *Server) closeStream(sid int, kill chan struct{}) {
	s.mu.Lock()
	if ch, ok := s.streams[sid]; ok && ch == kill {
		delete(s.streams, sid)
	}
	s.mu.Unlock()
}

// batchesAfter gathers the buffered events after index after that match
// the filter, as the stream's lines, and the channel that wakes when more
// are written; ok is false once the server restarted (a new epoch).
func (s *Server) batchesAfter(after uint64, filter topicFilter, epoch uint64) (batches []wireBatch, wake chan struct{}, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epoch != epoch {
		return nil, nil, false
	}
	for i := range s.events {
		e := &s.events[i].wire
		if e.Index <= after || !filter.match(e) {
			continue
		}
		// Like Nomad 2.0.6 (testdata/events.ndjson), a job
		// registration's Job and Evaluation events come on two lines
		// with the same index.
		if n := len(batches); n > 0 && batches[n-1].Index == e.Index && !splitLine(&batches[n-1], e) {
			batches[n-1].Events = append(batches[n-1].Events, *e)
		} else {
			batches = append(batches, wireBatch{Events: []wireEvent{*e}, Index: e.Index})
		}
	}
	// Whole indexes only: every write emits all its events under the
	// lock, so what is buffered now is complete.
	return batches, s.wake, true
}

func splitLine(b *wireBatch, e *wireEvent) bool {
	if e.Type != "JobRegistered" && e.Type != "JobDeregistered" {
		return false
	}
	prev := b.Events[len(b.Events)-1]
	return prev.Topic != e.Topic
}

// EventRecord identifies one event the fake emitted.
type EventRecord struct {
	Index            uint64
	Topic, Type, Key string
}

// Events returns the buffered events (oldest first).
func (s *Server) Events() []EventRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]EventRecord, 0, len(s.events))
	for _, e := range s.events {
		out = append(out, EventRecord{Index: e.wire.Index, Topic: e.wire.Topic, Type: e.wire.Type, Key: e.wire.Key})
	}
	return out
}
