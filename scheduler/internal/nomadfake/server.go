package nomadfake

import (
	"bytes"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
)

// ClientBehavior says what the simulated Nomad client on a node does with
// the allocations placed on it.
type ClientBehavior int

const (
	// ClientRun starts allocations right away (ClientStatus running).
	ClientRun ClientBehavior = iota
	// ClientHold leaves allocations pending (e.g. image pull that never ends).
	ClientHold
	// ClientFail fails allocations on start (ClientStatus failed).
	ClientFail
)

// Options tune the fake.
type Options struct {
	// HeartbeatInterval is how often an idle event stream writes `{}`.
	// Nomad uses 10s; tests use less. Zero means 10s.
	HeartbeatInterval time.Duration
	// EventBufferSize is how many events are kept for stream resumption;
	// older indexes resume from the oldest kept event (Nomad's
	// "closest index" rule). Zero means 10000.
	EventBufferSize int
	// ExitOnSignal makes tasks exit (alloc complete) when they receive a
	// signal, like a trainer that checkpoints and quits.
	ExitOnSignal bool
	// TLS serves HTTPS with a self-signed certificate (see CACertPEM).
	TLS bool
	// TLSConfig, when set, serves HTTPS with this configuration instead
	// (its server certificate, and e.g. ClientAuth/ClientCAs to require
	// mTLS client certificates, as an agent with verify_https_client
	// does). It implies TLS.
	TLSConfig *tls.Config
}

// Server is the fake Nomad agent. Create it with New and Close it.
type Server struct {
	opts Options
	ts   *httptest.Server

	mu      sync.Mutex
	index   uint64
	wake    chan struct{} // closed and replaced on every index bump
	epoch   uint64        // bumped by Restart; streams of older epochs end
	nodes   map[string]*api.Node
	pools   map[string]*api.NodePool
	jobs    map[string]*jobState // key ns/id
	allocs  map[string]*api.Allocation
	evals   map[string]*api.Evaluation
	vars    map[string]*varState // key ns/path
	events  []bufferedEvent
	streams map[int]chan struct{} // open stream id -> kill channel
	nextSID int

	behavior    map[string]ClientBehavior // node ID -> behaviour
	failNext    []failure
	failAfter   []failure
	armed       []failure // failNext entries armed when a failAfter fires
	hangs       []hang
	afterNext   []afterHook
	signals     []SignalRecord
	requests    []RequestRecord
	idCounter   uint64
	tableIndex  map[string]uint64 // table -> last index it changed
	onRegister  func(job *api.Job)
	exitOnSig   bool
	sigExitCode int
	lockDelayed map[string]time.Time // var key -> lock delay end
	shortTTL    bool                 // accept lock TTLs under Nomad's 10s minimum
	idKey       ed25519.PrivateKey   // workload identity signing key, made on first use
	now         func() time.Time
}

// SignalRecord is one signal the fake delivered.
type SignalRecord struct {
	AllocID, Task, Signal string
	Index                 uint64
}

// RequestRecord is one request the fake served (for tests that assert on
// the adapter's traffic).
type RequestRecord struct {
	Method, Path, Query string
}

type jobState struct {
	job     *api.Job
	queued  map[string]int
	summary map[string]*api.TaskGroupSummary
	evalIDs []string
	blocked string // blocked eval ID, if any
}

type varState struct {
	v         api.Variable
	lockID    string
	lockTTL   time.Duration
	lockDelay time.Duration
	lockUntil time.Time
}

// New starts a fake Nomad agent on a loopback port.
func New(opts Options) *Server {
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = 10 * time.Second
	}
	if opts.EventBufferSize <= 0 {
		opts.EventBufferSize = 10000
	}
	s := &Server{opts: opts, now: time.Now, exitOnSig: opts.ExitOnSignal}
	s.reset(1)
	if opts.TLSConfig != nil {
		s.ts = httptest.NewUnstartedServer(http.HandlerFunc(s.serveHTTP))
		s.ts.TLS = opts.TLSConfig.Clone()
		s.ts.StartTLS()
	} else if opts.TLS {
		s.ts = httptest.NewTLSServer(http.HandlerFunc(s.serveHTTP))
	} else {
		s.ts = httptest.NewServer(http.HandlerFunc(s.serveHTTP))
	}
	return s
}

// CACertPEM is the PEM of the certificate a TLS fake serves (nil without
// TLS), to write to a file for the client's CA certificate setting.
func (s *Server) CACertPEM() []byte {
	if s.ts.Certificate() == nil {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.ts.Certificate().Raw})
}

func (s *Server) reset(startIndex uint64) {
	s.index = startIndex
	if s.wake != nil {
		close(s.wake)
	}
	s.wake = make(chan struct{})
	s.nodes = map[string]*api.Node{}
	s.pools = map[string]*api.NodePool{
		"all":     {Name: "all", Description: "Node pool with all nodes in the cluster.", CreateIndex: 1, ModifyIndex: 1},
		"default": {Name: "default", Description: "Default node pool.", CreateIndex: 1, ModifyIndex: 1},
	}
	s.jobs = map[string]*jobState{}
	s.allocs = map[string]*api.Allocation{}
	s.evals = map[string]*api.Evaluation{}
	s.vars = map[string]*varState{}
	s.events = nil
	if s.streams == nil {
		s.streams = map[int]chan struct{}{}
	}
	if s.behavior == nil {
		s.behavior = map[string]ClientBehavior{}
	}
	s.tableIndex = map[string]uint64{"nodes": 1, "jobs": 1, "allocs": 1, "evals": 1, "vars": 1, "node_pools": 1}
	s.lockDelayed = map[string]time.Time{}
}

// URL is the fake agent's address, e.g. for api.Config.Address.
func (s *Server) URL() string { return s.ts.URL }

// Close stops the server and ends all streams.
func (s *Server) Close() {
	s.DropStreams()
	s.ts.CloseClientConnections()
	s.ts.Close()
}

// Index is the fake's current Raft index.
func (s *Server) Index() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.index
}

// SetClock replaces the fake's clock (lock TTLs, times in objects).
func (s *Server) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
}

// SetExitOnSignal changes whether signalled tasks exit (with exit code 0,
// or the one SetSignalExitCode set).
func (s *Server) SetExitOnSignal(v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exitOnSig = v
}

// SetSignalExitCode sets the exit code signalled tasks exit with when
// ExitOnSignal is on: 0 (the default) completes the allocation; another
// code is handled as Nomad's client handles a batch task exiting non-zero
// under the default restart policy (see ExitTasks).
func (s *Server) SetSignalExitCode(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sigExitCode = code
}

// AllowShortLockTTL makes the fake accept lock TTLs below the 10s that
// Nomad requires, so that lock tests run in milliseconds.
func (s *Server) AllowShortLockTTL(v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shortTTL = v
}

// OnRegister installs a hook called (under the fake's lock, so it must not
// call back into the Server) with every job that is registered.
func (s *Server) OnRegister(fn func(job *api.Job)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onRegister = fn
}

// Signals returns the signals delivered so far.
func (s *Server) Signals() []SignalRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]SignalRecord(nil), s.signals...)
}

// Requests returns the requests served so far.
func (s *Server) Requests() []RequestRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]RequestRecord(nil), s.requests...)
}

// bump advances the index and wakes waiters; callers hold s.mu.
func (s *Server) bump(tables ...string) uint64 {
	s.index++
	for _, t := range tables {
		s.tableIndex[t] = s.index
	}
	close(s.wake)
	s.wake = make(chan struct{})
	return s.index
}

func (s *Server) newID() string {
	s.idCounter++
	n := s.idCounter
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", uint32(n*2654435761), uint16(n>>8), uint16(n), uint16(n*7), n*1099511628211&0xffffffffffff)
}

// ---- HTTP plumbing ----

type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func errf(status int, format string, a ...any) *httpError {
	return &httpError{status: status, msg: fmt.Sprintf(format, a...)}
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if s.injected(w, r) {
		return
	}
	if r.URL.Path == "/v1/event/stream" {
		s.serveStream(w, r)
		return
	}
	var body []byte
	s.mu.Lock()
	hooked := len(s.afterNext) > 0
	s.mu.Unlock()
	if hooked {
		body, _ = io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	out, index, err := s.route(r)
	if hooked && err == nil {
		s.runAfterHook(r, body)
	}
	if lost := s.lostAnswer(r); lost != nil {
		out, err = nil, lost
	}
	writeAnswer(w, out, index, err)
}

// writeAnswer writes a route's answer: an error as Nomad's plain-text
// status, a variable conflict as 409 with the current variable, else the
// JSON (or an empty 200) with the index headers.
func writeAnswer(w http.ResponseWriter, out any, index uint64, err error) {
	if err != nil {
		var he *httpError
		if e, ok := err.(*httpError); ok {
			he = e
		} else {
			he = &httpError{status: http.StatusInternalServerError, msg: err.Error()}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(he.status)
		_, _ = io.WriteString(w, he.msg)
		return
	}
	if vc, ok := out.(varConflict); ok {
		writeJSON(w, http.StatusConflict, index, vc.v)
		return
	}
	if out == nil {
		setMeta(w, index)
		w.WriteHeader(http.StatusOK)
		return
	}
	writeJSON(w, http.StatusOK, index, out)
}

func setMeta(w http.ResponseWriter, index uint64) {
	h := w.Header()
	h.Set("X-Nomad-Index", strconv.FormatUint(index, 10))
	h.Set("X-Nomad-KnownLeader", "true")
	h.Set("X-Nomad-LastContact", "0")
}

func writeJSON(w http.ResponseWriter, status int, index uint64, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	setMeta(w, index)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// varConflict marks a 409 answer that carries a variable body.
type varConflict struct{ v any }

func decode(r *http.Request, into any) error {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return errf(http.StatusBadRequest, "failed to read body: %v", err)
	}
	if len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, into); err != nil {
		return errf(http.StatusBadRequest, "Failed to decode request body: %v", err)
	}
	return nil
}

func namespaceOf(r *http.Request) string {
	if ns := r.URL.Query().Get("namespace"); ns != "" {
		return ns
	}
	return "default"
}

// blockingWait implements ?index=&wait=: it waits (without the lock) until
// the table's index passes minIndex or the wait ends. Called with s.mu held;
// returns with s.mu held.
func (s *Server) blockingWait(r *http.Request, tables ...string) {
	q := r.URL.Query()
	minIndex, _ := strconv.ParseUint(q.Get("index"), 10, 64)
	if minIndex == 0 {
		return
	}
	wait := 5 * time.Minute
	if ws := q.Get("wait"); ws != "" {
		if d, err := time.ParseDuration(ws); err == nil {
			wait = d
		} else if n, err := strconv.Atoi(ws); err == nil {
			wait = time.Duration(n) * time.Millisecond
		}
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for s.maxTable(tables...) <= minIndex {
		ch := s.wake
		s.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			s.mu.Lock()
			return
		case <-r.Context().Done():
			s.mu.Lock()
			return
		}
		s.mu.Lock()
	}
}

func (s *Server) maxTable(tables ...string) uint64 {
	var m uint64
	for _, t := range tables {
		m = max(m, s.tableIndex[t])
	}
	return m
}
