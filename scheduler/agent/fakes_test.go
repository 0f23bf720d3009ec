package agent

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/nomad"
)

// fakeNomad is a tiny stand-in for the Nomad cluster the agents share: a
// cluster.Store, a register counter per job with EnforceIndex semantics,
// a Variables lock, durable state and explanation Variables. Agents reach
// it through the ports, each with its own fakeModel watching it.
type fakeNomad struct {
	mu        sync.Mutex
	store     *cluster.Store
	index     uint64
	watchers  []chan struct{}
	registers map[string]int // job ID -> admissions (re-registers into a pool)
	signals   map[string][]string
	stops     map[string]int
	lockOwner string
	lockLost  map[string]chan struct{}
	state     *DurableState
	explained map[string]agentapi.Explanation
	allocSeq  int
	clock     func() time.Time
	// failApply makes every Apply fail, once per entry.
	failApply int
	// admittedAt records when Apply received each admission.
	admittedAt map[string]time.Time
}

func newFakeNomad(clock func() time.Time) *fakeNomad {
	return &fakeNomad{
		store:      cluster.NewStore(),
		registers:  map[string]int{},
		signals:    map[string][]string{},
		stops:      map[string]int{},
		lockLost:   map[string]chan struct{}{},
		explained:  map[string]agentapi.Explanation{},
		clock:      clock,
		admittedAt: map[string]time.Time{},
	}
}

func (f *fakeNomad) changed() {
	f.index++
	for _, w := range f.watchers {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

func (f *fakeNomad) addNode(id string, gpus, islands int, pool string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := &cluster.Node{ID: id, Name: id, Pool: pool, Eligible: true, Ready: true}
	per := gpus / islands
	for i := 0; i < gpus; i++ {
		n.GPUs = append(n.GPUs, cluster.GPU{ID: fmt.Sprintf("%s-gpu%d", id, i), Index: i, Island: i / per, NUMA: i / per, Model: "H100", Healthy: true})
	}
	if err := f.store.UpsertNode(n); err != nil {
		panic(err)
	}
	f.changed()
}

// submit parks a job: groups are (name, count, gpus per alloc).
func (f *fakeNomad) submit(name string, meta map[string]string, groups ...cluster.TaskGroup) {
	f.mu.Lock()
	defer f.mu.Unlock()
	spec, err := jobspec.ParseMeta(meta, nil)
	j := &cluster.Job{ID: cluster.JobKey("default", name), Namespace: "default", Name: name, Priority: 50,
		Submit: f.clock(), State: cluster.JobQueued, Spec: spec, SpecErr: err, ModifyIndex: f.index + 1}
	for _, g := range groups {
		g.Spec = spec
		j.Groups = append(j.Groups, g)
	}
	if err := f.store.UpsertJob(j); err != nil {
		panic(err)
	}
	f.changed()
}

// userUpdate simulates a user re-submitting a job: its modify index moves.
func (f *fakeNomad) userUpdate(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, _ := f.store.Snapshot().Job(id)
	c := *j
	c.ModifyIndex = f.index + 100
	_ = f.store.UpsertJob(&c)
	f.changed()
}

// finish ends a running job: its allocations stop and it leaves the model.
func (f *fakeNomad) finish(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.store.Snapshot().JobAllocs(id) {
		f.store.DeleteAlloc(a.ID)
	}
	f.store.DeleteJob(id)
	f.changed()
}

func (f *fakeNomad) registerCount(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.registers[id]
}

func (f *fakeNomad) jobState(id string) (cluster.JobState, bool) {
	j, ok := f.store.Snapshot().Job(id)
	if !ok {
		return 0, false
	}
	return j.State, true
}

// fakeModel is one agent's watcher of the fakeNomad.
type fakeModel struct {
	n       *fakeNomad
	updated chan struct{}
}

func (f *fakeNomad) model() *fakeModel {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := &fakeModel{n: f, updated: make(chan struct{}, 1)}
	f.watchers = append(f.watchers, m.updated)
	return m
}

func (m *fakeModel) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (m *fakeModel) Snapshot() *cluster.Snapshot   { return m.n.store.Snapshot() }
func (m *fakeModel) Updated() <-chan struct{}      { return m.updated }
func (m *fakeModel) Status() ModelStatus {
	m.n.mu.Lock()
	defer m.n.mu.Unlock()
	return ModelStatus{Index: m.n.index, Synced: true}
}

// fakeExec acts on plans against the fakeNomad the way the adapter acts on
// Nomad: admissions re-register with EnforceIndex (a stale index is a
// conflict), preemptions signal, stop and re-park the victim.
type fakeExec struct {
	n     *fakeNomad
	agent string
	mu    sync.Mutex
	plans []*engine.Plan
}

func (e *fakeExec) Apply(ctx context.Context, plan *engine.Plan, _ *cluster.Snapshot) (nomad.ApplyReport, error) {
	e.mu.Lock()
	e.plans = append(e.plans, plan)
	e.mu.Unlock()
	f := e.n
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failApply > 0 {
		f.failApply--
		return nomad.ApplyReport{}, errors.New("nomad unreachable")
	}
	if ctx.Err() != nil {
		return nomad.ApplyReport{}, ctx.Err()
	}
	rep := nomad.ApplyReport{Skipped: map[string]string{}, Failed: map[string]error{}}
	snap := f.store.Snapshot()
	for _, p := range plan.Preemptions {
		j, ok := snap.Job(p.JobID)
		if !ok || j.State != cluster.JobRunning {
			rep.Skipped[p.JobID] = "not running"
			continue
		}
		for _, a := range snap.JobAllocs(p.JobID) {
			if p.CheckpointSignal != "" {
				f.signals[p.JobID] = append(f.signals[p.JobID], p.CheckpointSignal)
			}
			f.stops[p.JobID]++
			f.store.DeleteAlloc(a.ID)
		}
		c := *j
		c.State = cluster.JobQueued
		f.index++
		c.ModifyIndex = f.index
		_ = f.store.UpsertJob(&c)
		rep.Preempted = append(rep.Preempted, p.JobID)
	}
	for _, r := range plan.Reclaims {
		j, ok := snap.Job(r.JobID)
		if !ok || j.State != cluster.JobRunning {
			rep.Skipped[r.JobID] = "not running"
			continue
		}
		for _, a := range snap.JobAllocs(r.JobID) {
			if r.CheckpointSignal != "" {
				f.signals[r.JobID] = append(f.signals[r.JobID], r.CheckpointSignal)
			}
			f.stops[r.JobID]++
			f.store.DeleteAlloc(a.ID)
		}
		if r.Requeue {
			c := *j
			c.State = cluster.JobQueued
			f.index++
			c.ModifyIndex = f.index
			_ = f.store.UpsertJob(&c)
		} else {
			f.store.DeleteJob(r.JobID) // stopped for good: it leaves the model
		}
		rep.Reclaimed = append(rep.Reclaimed, r.JobID)
	}
	for _, adm := range plan.Admissions {
		j, ok := snap.Job(adm.JobID)
		if !ok || j.State != cluster.JobQueued {
			rep.Skipped[adm.JobID] = "not parked"
			continue
		}
		if j.ModifyIndex != adm.ModifyIndex {
			rep.Skipped[adm.JobID] = fmt.Sprintf("enforcing job modify index %d: job exists with conflicting job modify index: %d", adm.ModifyIndex, j.ModifyIndex)
			continue
		}
		f.registers[adm.JobID]++
		f.admittedAt[adm.JobID] = time.Now()
		c := *j
		c.State = cluster.JobRunning
		f.index++
		c.ModifyIndex = f.index
		_ = f.store.UpsertJob(&c)
		for _, g := range adm.Groups {
			for _, pl := range g.Allocs {
				f.allocSeq++
				_ = f.store.UpsertAlloc(&cluster.Alloc{ID: fmt.Sprintf("alloc-%d", f.allocSeq), JobID: adm.JobID,
					Group: g.Group, NodeID: pl.NodeID, GPUs: pl.GPUs, Start: f.clock()})
			}
		}
		rep.Admitted = append(rep.Admitted, adm.JobID)
	}
	f.changed()
	return rep, nil
}

func (e *fakeExec) WriteExplanation(_ context.Context, x agentapi.Explanation) error {
	e.n.mu.Lock()
	defer e.n.mu.Unlock()
	e.n.explained[cluster.JobKey(x.Namespace, x.Job)] = x
	return nil
}

func (e *fakeExec) EnsureNodePool(context.Context, string, string) error { return nil }

func (e *fakeExec) LoadState(context.Context) (DurableState, bool, error) {
	e.n.mu.Lock()
	defer e.n.mu.Unlock()
	if e.n.state == nil {
		return DurableState{}, false, nil
	}
	return *e.n.state, true, nil
}

func (e *fakeExec) SaveState(_ context.Context, s DurableState) error {
	e.n.mu.Lock()
	defer e.n.mu.Unlock()
	e.n.state = &s
	return nil
}

// Campaign takes the shared lock when free, polling like a lock waiter.
func (e *fakeExec) Campaign(ctx context.Context) (<-chan struct{}, error) {
	for {
		e.n.mu.Lock()
		if e.n.lockOwner == "" {
			e.n.lockOwner = e.agent
			lost := make(chan struct{})
			e.n.lockLost[e.agent] = lost
			e.n.mu.Unlock()
			return lost, nil
		}
		e.n.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (e *fakeExec) Resign(context.Context) error {
	e.n.mu.Lock()
	defer e.n.mu.Unlock()
	if e.n.lockOwner == e.agent {
		e.n.lockOwner = ""
		close(e.n.lockLost[e.agent])
		delete(e.n.lockLost, e.agent)
	}
	return nil
}

// expireLock simulates the leader's lock being lost (missed renewals).
func (f *fakeNomad) expireLock() string { return f.stealLock("") }

// stealLock ends the current holder's lock and gives it to newOwner in one
// step (another agent won it while this one missed its renewals).
func (f *fakeNomad) stealLock(newOwner string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	defer func() { f.lockOwner = newOwner }()
	owner := f.lockOwner
	if owner != "" {
		close(f.lockLost[owner])
		delete(f.lockLost, owner)
		f.lockOwner = ""
	}
	return owner
}

func (f *fakeNomad) owner() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lockOwner
}

func (e *fakeExec) admissionsOrder() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, p := range e.plans {
		for _, a := range p.Admissions {
			out = append(out, a.JobID)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Holder reports the fake lock's owner.
func (e *fakeExec) Holder(context.Context) (string, error) {
	e.n.mu.Lock()
	defer e.n.mu.Unlock()
	return e.n.lockOwner, nil
}
