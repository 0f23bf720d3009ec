package cluster

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Store is the mutable model of the cluster: it applies upserts and deletes
// of nodes, jobs and allocations (from Nomad's event stream or from the
// simulator) and hands out immutable Snapshots. Taking a snapshot is O(1);
// the first write after a snapshot copies only the small shard it touches.
//
// A Store is safe for concurrent use. Objects passed to Upsert* belong to
// the store afterwards and must not be modified by the caller: snapshots
// share them.
type Store struct {
	mu      sync.Mutex
	version uint64
	nodes   cowMap[*Node]
	jobs    cowMap[*Job]
	allocs  cowMap[*Alloc]
	// byJob indexes allocation IDs per job ID; each value is replaced, never
	// modified in place, so snapshots can share it.
	byJob cowMap[[]string]
	// finished is the log of allocations that stopped (FinishAlloc,
	// CompleteAlloc), for usage charging and learned run times;
	// finishedBase is the sequence number of its first record. Records are only appended, and trimming builds a new slice,
	// so a snapshot can share the slice it was given.
	finished     []Finished
	finishedBase uint64
}

// MaxFinished bounds the log of finished allocations a store keeps for
// usage charging: the engine reads it every cycle, so only more than this
// many allocations ending between two cycles loses charges (the oldest).
const MaxFinished = 1 << 16

// NewStore returns an empty store.
func NewStore() *Store { return &Store{} }

// ErrInvalid wraps every rejected update.
var ErrInvalid = errors.New("invalid cluster update")

// UpsertNode adds or replaces a node.
func (s *Store) UpsertNode(n *Node) error {
	if n == nil || n.ID == "" {
		return fmt.Errorf("%w: node without ID", ErrInvalid)
	}
	seen := make(map[string]struct{}, len(n.GPUs))
	for i, g := range n.GPUs {
		if g.ID == "" {
			return fmt.Errorf("%w: node %s: GPU %d has no instance ID", ErrInvalid, n.ID, i)
		}
		if _, dup := seen[g.ID]; dup {
			return fmt.Errorf("%w: node %s: GPU instance ID %s listed twice", ErrInvalid, n.ID, g.ID)
		}
		seen[g.ID] = struct{}{}
	}
	s.mu.Lock()
	s.nodes.set(n.ID, n)
	s.version++
	s.mu.Unlock()
	return nil
}

// DeleteNode removes a node; it reports whether the node was known.
func (s *Store) DeleteNode(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ok := s.nodes.del(id)
	if ok {
		s.version++
	}
	return ok
}

// UpsertJob adds or replaces a job.
func (s *Store) UpsertJob(j *Job) error {
	if j == nil || j.ID == "" {
		return fmt.Errorf("%w: job without ID", ErrInvalid)
	}
	for _, g := range j.Groups {
		if g.Count < 0 || g.GPUs < 0 {
			return fmt.Errorf("%w: job %s group %q: negative count or GPUs", ErrInvalid, j.ID, g.Name)
		}
	}
	s.mu.Lock()
	s.jobs.set(j.ID, j)
	s.version++
	s.mu.Unlock()
	return nil
}

// DeleteJob removes a job (its allocations are removed separately, as
// their own events arrive); it reports whether the job was known.
func (s *Store) DeleteJob(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ok := s.jobs.del(id)
	if ok {
		s.version++
	}
	return ok
}

// UpsertAlloc adds or replaces a running allocation.
func (s *Store) UpsertAlloc(a *Alloc) error {
	if a == nil || a.ID == "" {
		return fmt.Errorf("%w: allocation without ID", ErrInvalid)
	}
	if a.JobID == "" || a.NodeID == "" {
		return fmt.Errorf("%w: allocation %s without job or node", ErrInvalid, a.ID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shareNodeStrings(a)
	if old, ok := s.allocs.get(a.ID); ok && old.JobID != a.JobID {
		s.unindex(old)
	}
	s.allocs.set(a.ID, a)
	ids, _ := s.byJob.get(a.JobID)
	found := false
	for _, id := range ids {
		if id == a.ID {
			found = true
			break
		}
	}
	if !found {
		next := make([]string, len(ids), len(ids)+1)
		copy(next, ids)
		s.byJob.set(a.JobID, append(next, a.ID))
	}
	s.version++
	return nil
}

// shareNodeStrings points an allocation's node ID and GPU instance IDs
// at its node's own copies of the same strings (when the node is known
// and lists them). The values do not change; what changes is that every
// cycle, which looks each allocation's node and GPUs up by these strings,
// compares them by pointer and hashes bytes already in cache instead of
// reading one copy per allocation.
func (s *Store) shareNodeStrings(a *Alloc) {
	n, ok := s.nodes.get(a.NodeID)
	if !ok {
		return
	}
	a.NodeID = n.ID
	for i, id := range a.GPUs {
		for k := range n.GPUs {
			if n.GPUs[k].ID == id {
				a.GPUs[i] = n.GPUs[k].ID
				break
			}
		}
	}
}

// DeleteAlloc removes an allocation (it stopped); it reports whether the
// allocation was known.
func (s *Store) DeleteAlloc(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.removeAlloc(id) != nil
}

// removeAlloc removes an allocation and returns it (nil when unknown).
func (s *Store) removeAlloc(id string) *Alloc {
	old, ok := s.allocs.get(id)
	if !ok {
		return nil
	}
	s.allocs.del(id)
	s.unindex(old)
	s.version++
	return old
}

// FinishAlloc removes an allocation that stopped at end and records the
// GPU time it used (see Finished), so that fair-share usage is charged for
// it even when it ran between two cycles. It reports whether the
// allocation was known. Allocations without GPUs, or of jobs the store
// does not hold or whose impact metadata is bad, are not charged (as in
// the engine's per-cycle charge). Use it for an allocation that was
// stopped, failed or lost; CompleteAlloc for one that ran to its end.
func (s *Store) FinishAlloc(id string, end time.Time) bool {
	return s.finish(id, end, false)
}

// CompleteAlloc is FinishAlloc for an allocation that ran to its end on
// its own (its tasks exited successfully, nobody stopped it): its record
// is marked Completed, so its run time may teach the engine how long
// such jobs run.
func (s *Store) CompleteAlloc(id string, end time.Time) bool {
	return s.finish(id, end, true)
}

func (s *Store) finish(id string, end time.Time, completed bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.removeAlloc(id)
	if old == nil {
		return false
	}
	j, known := s.jobs.get(old.JobID)
	if !known || j.SpecErr != nil || len(old.GPUs) == 0 {
		return true
	}
	if len(s.finished) >= MaxFinished {
		keep := make([]Finished, MaxFinished/2, MaxFinished)
		drop := len(s.finished) - len(keep)
		copy(keep, s.finished[drop:])
		s.finished = keep
		s.finishedBase += uint64(drop)
	}
	s.finished = append(s.finished, Finished{
		AllocID: old.ID, JobID: old.JobID, Project: j.Spec.Project, Tier: j.Spec.Tier,
		GPUs: len(old.GPUs), NodeID: old.NodeID, Start: old.Start, End: end, Completed: completed, Progress: j.Spec.Progress,
	})
	return true
}

func (s *Store) unindex(a *Alloc) {
	ids, _ := s.byJob.get(a.JobID)
	next := make([]string, 0, len(ids))
	for _, id := range ids {
		if id != a.ID {
			next = append(next, id)
		}
	}
	if len(next) == 0 {
		s.byJob.del(a.JobID)
	} else {
		s.byJob.set(a.JobID, next)
	}
}

// Version counts the updates applied so far.
func (s *Store) Version() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// Snapshot returns an immutable view of the current state.
func (s *Store) Snapshot() *Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &Snapshot{
		version:      s.version,
		nodes:        s.nodes.freeze(),
		jobs:         s.jobs.freeze(),
		allocs:       s.allocs.freeze(),
		byJob:        s.byJob.freeze(),
		finished:     s.finished[:len(s.finished):len(s.finished)],
		finishedBase: s.finishedBase,
	}
}

// Snapshot is an immutable view of the cluster. Its lists are sorted by ID,
// computed on first use and cached, so every consumer sees the same
// deterministic order.
type Snapshot struct {
	version uint64
	nodes   frozen[*Node]
	jobs    frozen[*Job]
	allocs  frozen[*Alloc]
	byJob   frozen[[]string]

	finished     []Finished
	finishedBase uint64

	nodesOnce  sync.Once
	nodeList   []*Node
	jobsOnce   sync.Once
	jobList    []*Job
	allocsOnce sync.Once
	allocList  []*Alloc
}

// Version is the store version the snapshot was taken at.
func (s *Snapshot) Version() uint64 { return s.version }

// Node returns a node by ID.
func (s *Snapshot) Node(id string) (*Node, bool) { return s.nodes.get(id) }

// Job returns a job by ID.
func (s *Snapshot) Job(id string) (*Job, bool) { return s.jobs.get(id) }

// Alloc returns an allocation by ID.
func (s *Snapshot) Alloc(id string) (*Alloc, bool) { return s.allocs.get(id) }

// NumNodes, NumJobs and NumAllocs count the tables.
func (s *Snapshot) NumNodes() int  { return s.nodes.n }
func (s *Snapshot) NumJobs() int   { return s.jobs.n }
func (s *Snapshot) NumAllocs() int { return s.allocs.n }

// Nodes returns all nodes sorted by ID. The slice is shared: do not modify.
func (s *Snapshot) Nodes() []*Node {
	s.nodesOnce.Do(func() {
		s.nodeList = make([]*Node, 0, s.nodes.n)
		s.nodes.each(func(_ string, n *Node) { s.nodeList = append(s.nodeList, n) })
		slices.SortFunc(s.nodeList, func(a, b *Node) int { return strings.Compare(a.ID, b.ID) })
	})
	return s.nodeList
}

// Jobs returns all jobs sorted by ID. The slice is shared: do not modify.
func (s *Snapshot) Jobs() []*Job {
	s.jobsOnce.Do(func() {
		s.jobList = make([]*Job, 0, s.jobs.n)
		s.jobs.each(func(_ string, j *Job) { s.jobList = append(s.jobList, j) })
		slices.SortFunc(s.jobList, func(a, b *Job) int { return strings.Compare(a.ID, b.ID) })
	})
	return s.jobList
}

// Allocs returns all allocations sorted by ID. The slice is shared: do not
// modify.
func (s *Snapshot) Allocs() []*Alloc {
	s.allocsOnce.Do(func() {
		s.allocList = make([]*Alloc, 0, s.allocs.n)
		s.allocs.each(func(_ string, a *Alloc) { s.allocList = append(s.allocList, a) })
		slices.SortFunc(s.allocList, func(a, b *Alloc) int { return strings.Compare(a.ID, b.ID) })
	})
	return s.allocList
}

// EachJob calls fn for every job, in no particular order: cheaper than
// Jobs when the caller sorts by its own key anyway.
func (s *Snapshot) EachJob(fn func(*Job)) { s.jobs.each(func(_ string, j *Job) { fn(j) }) }

// FinishedSince returns the records of allocations finished (FinishAlloc)
// with sequence number seq or later, oldest first, and the sequence number
// to ask for next time. Records trimmed from the store's bounded log are
// skipped. The slice is shared: do not modify.
func (s *Snapshot) FinishedSince(seq uint64) ([]Finished, uint64) {
	next := s.finishedBase + uint64(len(s.finished))
	if seq >= next {
		return nil, next
	}
	if seq < s.finishedBase {
		seq = s.finishedBase
	}
	return s.finished[seq-s.finishedBase:], next
}

// JobAllocs returns the allocations of a job (its running gang), sorted by
// ID.
func (s *Snapshot) JobAllocs(jobID string) []*Alloc {
	ids, _ := s.byJob.get(jobID)
	out := make([]*Alloc, 0, len(ids))
	for _, id := range ids {
		if a, ok := s.allocs.get(id); ok {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b *Alloc) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Build returns a snapshot of the given objects: a shorthand for tests and
// for the simulator's initial state.
func Build(nodes []*Node, jobs []*Job, allocs []*Alloc) (*Snapshot, error) {
	s := NewStore()
	for _, n := range nodes {
		if err := s.UpsertNode(n); err != nil {
			return nil, err
		}
	}
	for _, j := range jobs {
		if err := s.UpsertJob(j); err != nil {
			return nil, err
		}
	}
	for _, a := range allocs {
		if err := s.UpsertAlloc(a); err != nil {
			return nil, err
		}
	}
	return s.Snapshot(), nil
}

// NumShards is the number of shards of each table of a snapshot (see
// JobShard and AllocShard).
func (s *Snapshot) NumShards() int { return shardCount }

// ShardKey identifies the contents of one table shard. The store copies a
// shard before changing it, so two snapshots whose shard i has equal keys
// hold exactly the same objects in it: a consumer that derives something
// per snapshot (the engine's queue, placement's capacity) can keep what it
// derived per shard and redo only the shards whose key changed. The zero
// key is a shard never created (empty); an emptied shard keeps a key of
// its own. A key is the shard's pointer: comparing two is comparing
// words, not interfaces.
type ShardKey struct {
	jobs   *shard[*Job]
	allocs *shard[*Alloc]
}

// JobShard returns shard i of the job table: its key and its jobs, in no
// particular order. The slice is shared: do not modify.
func (s *Snapshot) JobShard(i int) (ShardKey, []*Job) {
	sh := s.jobs.at(i)
	if sh == nil {
		return ShardKey{}, nil
	}
	return ShardKey{jobs: sh}, sh.vals
}

// AllocShard returns shard i of the allocation table (see JobShard).
func (s *Snapshot) AllocShard(i int) (ShardKey, []*Alloc) {
	sh := s.allocs.at(i)
	if sh == nil {
		return ShardKey{}, nil
	}
	return ShardKey{allocs: sh}, sh.vals
}

// JobShardKey is JobShard's key alone, read without touching the shard
// (two array reads): what a consumer compares before it needs the jobs.
func (s *Snapshot) JobShardKey(i int) ShardKey { return ShardKey{jobs: s.jobs.at(i)} }

// AllocShardKey is AllocShard's key alone (see JobShardKey).
func (s *Snapshot) AllocShardKey(i int) ShardKey { return ShardKey{allocs: s.allocs.at(i)} }

// TableKey identifies a whole table of a snapshot (JobsKey, AllocsKey):
// equal keys, every shard equal. The store hands a new snapshot the last
// one's shard table when nothing changed since, so a consumer that kept
// what it derived from a table skips the table without comparing its
// 1,024 shard keys. Unequal keys say nothing: compare the shards then.
// The zero TableKey equals no snapshot's with a table.
type TableKey struct {
	jobs   *table[*Job]
	allocs *table[*Alloc]
}

// JobsKey is the job table's key (see TableKey).
func (s *Snapshot) JobsKey() TableKey { return TableKey{jobs: s.jobs.shards} }

// AllocsKey is the allocation table's key (see TableKey).
func (s *Snapshot) AllocsKey() TableKey { return TableKey{allocs: s.allocs.shards} }

// NodesKey identifies the node table: equal keys, equal nodes (the same
// *Node objects). Comparing costs a scan of the shard pointers.
func (s *Snapshot) NodesKey() NodesKey {
	if s.nodes.shards == nil {
		return NodesKey{}
	}
	return NodesKey{p: s.nodes.shards}
}

// NodesKey is the identity of a node table (see Snapshot.NodesKey).
type NodesKey struct {
	p *table[*Node]
}

// Equal reports whether two node tables hold the same nodes.
func (k NodesKey) Equal(o NodesKey) bool {
	if k.p == nil || o.p == nil {
		return k.p == o.p
	}
	return k.p == o.p || *k.p == *o.p
}

// ShardOf returns the shard (of every table) that holds key id.
func (s *Snapshot) ShardOf(id string) int { return shardOf(id) }
