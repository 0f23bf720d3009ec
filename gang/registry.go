package gang

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Errors returned by the registry; the HTTP layer maps them to status codes.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
	ErrInvalid  = errors.New("invalid request")
)

// SizeResolver answers how many members a gang needs when no member said
// so: the impact agent answers with the job's total allocation count.
type SizeResolver func(ctx context.Context, namespace, jobID string) (int, error)

// Clock is the time source of the registry (injected so tests drive TTLs).
type Clock func() time.Time

// RegistryConfig configures a Registry.
type RegistryConfig struct {
	Clock Clock
	// DefaultTTL applies to members that do not send a TTL (default 30s).
	DefaultTTL time.Duration
	// Retention is how long a gang whose members have all exited is kept
	// for inspection before it is dropped (default 10m).
	Retention    time.Duration
	SizeResolver SizeResolver
}

// Registry is the in-memory rendezvous registry. It is safe for concurrent
// use; every read and write first expires members whose TTL has passed.
type Registry struct {
	cfg   RegistryConfig
	mu    sync.Mutex
	gangs map[string]*gangRecord
	index uint64
}

type gangRecord struct {
	id         string
	job        string // "<namespace>/<job_id>" of the member that created it
	state      State
	size       int
	generation int
	index      uint64
	reason     string
	endedAt    time.Time // when the last member became terminal
	members    map[string]*memberRecord
	changed    chan struct{} // closed and replaced on every change
}

type memberRecord struct {
	Member
	ttl time.Duration
}

// NewRegistry returns an empty registry.
func NewRegistry(cfg RegistryConfig) *Registry {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.DefaultTTL <= 0 {
		cfg.DefaultTTL = 30 * time.Second
	}
	if cfg.Retention <= 0 {
		cfg.Retention = 10 * time.Minute
	}
	return &Registry{cfg: cfg, gangs: map[string]*gangRecord{}}
}

// Join registers a member, or refreshes it if it is already registered.
func (r *Registry) Join(ctx context.Context, gangID, memberID string, req JoinRequest) (Status, error) {
	if gangID == "" || memberID == "" {
		return Status{}, fmt.Errorf("%w: gang and member IDs are required", ErrInvalid)
	}
	if err := req.Validate(); err != nil {
		return Status{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	ttl := r.cfg.DefaultTTL
	if req.TTL != "" {
		ttl, _ = time.ParseDuration(req.TTL) // validated above
	}
	if req.Resume != nil {
		return r.resume(gangID, memberID, req, ttl)
	}
	size, err := r.joinSize(ctx, gangID, req)
	if err != nil {
		return Status{}, err
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.cfg.Clock()
	r.sweepLocked(now)
	g, err := r.gangLocked(gangID, req, size)
	if err != nil {
		return Status{}, err
	}
	if err := g.sameJob(req, memberID); err != nil {
		return Status{}, err
	}
	if m, ok := g.members[memberID]; ok && !m.State.Terminal() {
		// Idempotent re-join: refresh only.
		m.LastSeen = now
		m.ttl = ttl
		return r.statusLocked(g), nil
	}
	switch {
	case g.state.Terminal():
		return Status{}, fmt.Errorf("%w: gang %q is %s (%s): retry after its members have exited", ErrConflict, gangID, g.state, g.reason)
	case req.Size != 0 && req.Size != g.size:
		return Status{}, fmt.Errorf("%w: gang %q has size %d, member %q asks for %d", ErrConflict, gangID, g.size, memberID, req.Size)
	case g.state == StateReady:
		return Status{}, fmt.Errorf("%w: gang %q is already complete with %d members", ErrConflict, gangID, g.size)
	}
	g.members[memberID] = newMemberRecord(memberID, MemberWaiting, req, ttl, now)
	if len(g.members) == g.size {
		assignRanks(g)
		g.state = StateReady
	}
	r.changedLocked(g)
	return r.statusLocked(g), nil
}

// joinSize is the size of the gang a member joins: the member's, else asked of
// the size resolver (outside the lock) unless the gang knows it already
// (0 then).
func (r *Registry) joinSize(ctx context.Context, gangID string, req JoinRequest) (int, error) {
	if req.Size != 0 {
		return req.Size, nil
	}
	r.mu.Lock()
	g := r.gangs[gangID]
	known := g != nil && g.size > 0 && !r.resettable(g)
	r.mu.Unlock()
	if known {
		return 0, nil
	}
	if r.cfg.SizeResolver == nil {
		return 0, fmt.Errorf("%w: gang %q: size unknown: set the gang size in the task config (no size resolver on this server)", ErrInvalid, gangID)
	}
	n, err := r.cfg.SizeResolver(ctx, req.Namespace, req.JobID)
	if err != nil {
		return 0, fmt.Errorf("resolving size of gang %q (job %q): %w", gangID, req.JobID, err)
	}
	if n <= 0 {
		return 0, fmt.Errorf("%w: resolved size of gang %q is %d", ErrInvalid, gangID, n)
	}
	return n, nil
}

// gangLocked is the gang a member joins: the one registered, else a new
// one of size, of the next generation when every member of the previous
// run has exited.
func (r *Registry) gangLocked(gangID string, req JoinRequest, size int) (*gangRecord, error) {
	g := r.gangs[gangID]
	generation := 1
	if g != nil && r.resettable(g) {
		generation = g.generation + 1
		r.dropLocked(g)
		g = nil
	}
	if g != nil {
		return g, nil
	}
	if size == 0 {
		return nil, fmt.Errorf("%w: gang %q: size unknown", ErrInvalid, gangID)
	}
	g = &gangRecord{id: gangID, job: jobKey(req), state: StateForming, size: size, generation: generation,
		members: map[string]*memberRecord{}, changed: make(chan struct{})}
	r.gangs[gangID] = g
	return g, nil
}

// resume re-registers a running member after the server lost the gang.
func (r *Registry) resume(gangID, memberID string, req JoinRequest, ttl time.Duration) (Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.cfg.Clock()
	r.sweepLocked(now)
	res := req.Resume
	g := r.gangs[gangID]
	if g != nil && r.resettable(g) {
		r.dropLocked(g)
		g = nil
	}
	if g == nil {
		g = &gangRecord{id: gangID, job: jobKey(req), state: StateReady, size: req.Size, generation: res.Generation,
			members: map[string]*memberRecord{}, changed: make(chan struct{})}
		r.gangs[gangID] = g
	}
	if err := g.sameJob(req, memberID); err != nil {
		return Status{}, err
	}
	if m, ok := g.members[memberID]; ok {
		if m.State.Terminal() {
			return Status{}, fmt.Errorf("%w: member %q of gang %q has already ended (%s)", ErrConflict, memberID, gangID, m.State)
		}
		m.LastSeen, m.ttl = now, ttl
		return r.statusLocked(g), nil
	}
	switch {
	case g.state != StateReady:
		return Status{}, fmt.Errorf("%w: cannot resume member %q: gang %q is %s (%s)", ErrConflict, memberID, gangID, g.state, g.reason)
	case g.generation != res.Generation || g.size != req.Size:
		return Status{}, fmt.Errorf("%w: cannot resume member %q: gang %q is generation %d of size %d, member has %d of %d",
			ErrConflict, memberID, gangID, g.generation, g.size, res.Generation, req.Size)
	case len(g.members) >= g.size:
		return Status{}, fmt.Errorf("%w: gang %q is already complete with %d members", ErrConflict, gangID, g.size)
	}
	m := newMemberRecord(memberID, MemberRunning, req, ttl, now)
	m.Rank, m.NodeRank, m.LocalRank, m.LocalWorldSize = res.Rank, res.NodeRank, res.LocalRank, res.LocalWorldSize
	g.members[memberID] = m
	r.changedLocked(g)
	return r.statusLocked(g), nil
}

// jobKey names the job a join comes from.
func jobKey(req JoinRequest) string { return req.Namespace + "/" + req.JobID }

// sameJob refuses a member of another job: a gang is one job's (a member
// of job "a" cannot join the gang of job "a:b" by naming it).
func (g *gangRecord) sameJob(req JoinRequest, memberID string) error {
	if k := jobKey(req); g.job != "" && k != g.job {
		return fmt.Errorf("%w: gang %q belongs to job %s, member %q is of job %s", ErrConflict, g.id, g.job, memberID, k)
	}
	return nil
}

// newMemberRecord is a member as its join describes it, without ranks.
func newMemberRecord(id string, state MemberState, req JoinRequest, ttl time.Duration, now time.Time) *memberRecord {
	return &memberRecord{ttl: ttl, Member: Member{
		ID: id, State: state, AllocID: req.AllocID, AllocName: req.AllocName,
		AllocIndex: req.AllocIndex, Group: req.Group, Task: req.Task, NodeID: req.NodeID,
		NodeName: req.NodeName, Addr: req.Addr, Port: req.Port,
		Rank: -1, NodeRank: -1, LocalRank: -1, JoinedAt: now, LastSeen: now,
	}}
}

// Heartbeat refreshes a member's TTL.
func (r *Registry) Heartbeat(gangID, memberID string) (Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.cfg.Clock()
	r.sweepLocked(now)
	g, m, err := r.memberLocked(gangID, memberID)
	if err != nil {
		return Status{}, err
	}
	if m.State == MemberLost {
		return Status{}, fmt.Errorf("%w: member %q of gang %q missed its heartbeats and was declared lost", ErrConflict, memberID, gangID)
	}
	m.LastSeen = now
	return r.statusLocked(g), nil
}

// Exit records the end of a member's process. A non-zero exit fails the
// gang, a stop makes it stopping; a clean exit only marks the member done.
func (r *Registry) Exit(gangID, memberID string, req ExitRequest) (Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.cfg.Clock()
	r.sweepLocked(now)
	g, m, err := r.memberLocked(gangID, memberID)
	if err != nil {
		return Status{}, err
	}
	if m.State.Terminal() {
		return r.statusLocked(g), nil
	}
	m.LastSeen = now
	m.ExitCode, m.Signal = req.ExitCode, req.Signal
	switch {
	case req.Stopped:
		m.State = MemberStopped
		r.terminateLocked(g, StateStopping, fmt.Sprintf("member %s was stopped%s", memberID, suffix(req.Reason)))
	case req.ExitCode != 0 || req.Signal != 0:
		m.State = MemberFailed
		r.terminateLocked(g, StateFailed, fmt.Sprintf("member %s exited with code %d, signal %d%s", memberID, req.ExitCode, req.Signal, suffix(req.Reason)))
	default:
		m.State = MemberDone
	}
	r.settleLocked(g, now)
	r.changedLocked(g)
	return r.statusLocked(g), nil
}

// Leave removes a member that has not started (barrier timeout, stop while
// waiting). A member that has started is treated as stopped.
func (r *Registry) Leave(gangID, memberID string) (Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.cfg.Clock()
	r.sweepLocked(now)
	g, m, err := r.memberLocked(gangID, memberID)
	if err != nil {
		return Status{}, err
	}
	switch {
	case m.State.Terminal():
	case g.state == StateForming:
		delete(g.members, memberID)
	default:
		m.State = MemberStopped
		r.terminateLocked(g, StateStopping, fmt.Sprintf("member %s left", memberID))
	}
	r.settleLocked(g, now)
	r.changedLocked(g)
	return r.statusLocked(g), nil
}

// Stop asks every member of a gang to checkpoint and stop.
func (r *Registry) Stop(gangID string, req StopRequest) (Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepLocked(r.cfg.Clock())
	g := r.gangs[gangID]
	if g == nil {
		return Status{}, fmt.Errorf("%w: gang %q", ErrNotFound, gangID)
	}
	reason := "stop requested"
	if req.Reason != "" {
		reason = req.Reason
	}
	r.terminateLocked(g, StateStopping, reason)
	r.changedLocked(g)
	return r.statusLocked(g), nil
}

// Get returns a gang's status and a channel closed at its next change.
func (r *Registry) Get(gangID string) (Status, <-chan struct{}, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepLocked(r.cfg.Clock())
	g := r.gangs[gangID]
	if g == nil {
		return Status{}, nil, fmt.Errorf("%w: gang %q", ErrNotFound, gangID)
	}
	return r.statusLocked(g), g.changed, nil
}

// List returns every gang, sorted by ID.
func (r *Registry) List() []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepLocked(r.cfg.Clock())
	out := make([]Status, 0, len(r.gangs))
	for _, g := range r.gangs {
		out = append(out, r.statusLocked(g))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (r *Registry) memberLocked(gangID, memberID string) (*gangRecord, *memberRecord, error) {
	g := r.gangs[gangID]
	if g == nil {
		return nil, nil, fmt.Errorf("%w: gang %q", ErrNotFound, gangID)
	}
	m := g.members[memberID]
	if m == nil {
		return nil, nil, fmt.Errorf("%w: member %q of gang %q", ErrNotFound, memberID, gangID)
	}
	return g, m, nil
}

// resettable: every member has ended, so a new join starts a new run.
func (r *Registry) resettable(g *gangRecord) bool {
	if !g.state.Terminal() {
		return false
	}
	for _, m := range g.members {
		if !m.State.Terminal() {
			return false
		}
	}
	return true
}

// terminateLocked moves a gang to failed/stopping; the first reason wins.
func (r *Registry) terminateLocked(g *gangRecord, s State, reason string) {
	if g.state == StateFailed || g.state == StateStopping {
		return
	}
	if g.state == StateForming {
		// Nobody started: waiting members are told to give up too.
		for _, m := range g.members {
			if m.State == MemberWaiting {
				m.State = MemberStopped
			}
		}
	}
	g.state, g.reason = s, reason
}

// settleLocked marks a gang done when every member exited cleanly, and
// notes when the last member ended.
func (r *Registry) settleLocked(g *gangRecord, now time.Time) {
	if len(g.members) == 0 {
		return
	}
	allDone, allTerminal := true, true
	for _, m := range g.members {
		allTerminal = allTerminal && m.State.Terminal()
		allDone = allDone && m.State == MemberDone
	}
	if g.state == StateReady && allDone {
		g.state = StateDone
	}
	if allTerminal && g.endedAt.IsZero() {
		g.endedAt = now
	}
}

// sweepLocked expires members whose TTL passed and drops old ended gangs.
func (r *Registry) sweepLocked(now time.Time) {
	for _, g := range r.gangs {
		changed := false
		for mid, m := range g.members {
			if m.State.Terminal() || now.Sub(m.LastSeen) <= m.ttl {
				continue
			}
			changed = true
			if g.state == StateForming {
				delete(g.members, mid)
				continue
			}
			m.State = MemberLost
			r.terminateLocked(g, StateFailed, fmt.Sprintf("member %s missed its heartbeats for %s", mid, m.ttl))
		}
		if changed {
			r.settleLocked(g, now)
			r.changedLocked(g)
		}
		if (g.state == StateForming && len(g.members) == 0) ||
			(!g.endedAt.IsZero() && now.Sub(g.endedAt) > r.cfg.Retention) {
			r.dropLocked(g)
		}
	}
}

// dropLocked forgets a gang and wakes its blocked readers (they get 404).
func (r *Registry) dropLocked(g *gangRecord) {
	delete(r.gangs, g.id)
	close(g.changed)
	g.changed = make(chan struct{})
}

func (r *Registry) changedLocked(g *gangRecord) {
	r.index++
	g.index = r.index
	close(g.changed)
	g.changed = make(chan struct{})
}

func suffix(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}
