package nomad

import (
	"errors"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// mirror is the watcher's copy of the Nomad objects it cares about, keyed
// like the model (jobs and allocations by cluster.JobKey / alloc ID). Each
// object keeps its ModifyIndex so that an older version (a replay after a
// resync) never overwrites a newer one.
type mirror struct {
	jobs      map[string]*wireJob
	allocs    map[string]*wireAlloc
	nodes     map[string]*wireNode
	jobAllocs map[string]map[string]bool // job key -> alloc IDs
	// deleted remembers the index at which an object was removed, so a
	// replayed older upsert does not resurrect it.
	deleted map[string]uint64
	// max ModifyIndex seen per table, to notice a Nomad whose state went
	// backwards (a restarted dev agent).
	maxJobs, maxAllocs, maxNodes uint64
	// listed* are the table indexes of the resync's lists: an event at or
	// below them for an object the list did not have is a replay of
	// something since deleted (or finished), and must not resurrect it.
	listedJobs, listedAllocs, listedNodes uint64

	// ended: job key -> alloc ID -> what the gang watch needs of the
	// job's allocations that ended: their group, whether they completed on
	// their own (client status complete, desired status run: a finished
	// member, not a missing one; cluster.Job.Completed), and which
	// registration of the job they belonged to, so that a replacement
	// (PreviousAllocation) and a completed member are counted only for
	// the registration running now, not for an earlier admission.
	ended map[string]map[string]endedAlloc

	dirtyJobs  map[string]bool
	dirtyNodes map[string]bool
	// nodeErrs holds why a node's GPUs could not be read.
	nodeErrs map[string]error
}

func newMirror() *mirror {
	return &mirror{
		jobs: map[string]*wireJob{}, allocs: map[string]*wireAlloc{}, nodes: map[string]*wireNode{},
		jobAllocs: map[string]map[string]bool{}, deleted: map[string]uint64{}, ended: map[string]map[string]endedAlloc{},
		dirtyJobs: map[string]bool{}, dirtyNodes: map[string]bool{}, nodeErrs: map[string]error{},
	}
}

func (m *mirror) upsertJob(j *wireJob, deleted bool, at uint64) bool {
	if j.Namespace == "" {
		j.Namespace = "default"
	}
	key := cluster.JobKey(j.Namespace, j.ID)
	if old := m.jobs[key]; old != nil && old.ModifyIndex > j.ModifyIndex {
		return false
	}
	if d, ok := m.deleted["job/"+key]; ok && d >= j.ModifyIndex && !deleted {
		return false
	}
	if m.jobs[key] == nil && at != 0 && at <= m.listedJobs {
		return false
	}
	m.maxJobs = max(m.maxJobs, j.ModifyIndex)
	m.dirtyJobs[key] = true
	if deleted {
		delete(m.jobs, key)
		m.deleted["job/"+key] = max(at, j.ModifyIndex)
		// A purge (`nomad job stop -purge`) deletes the job's allocations
		// from Nomad's state without allocation events (seen on Nomad
		// 2.0.6: only Job/JobDeregistered with Deleted, and the allocation
		// list no longer has them), so they end here, now: waiting work
		// gets their GPUs within a cycle, not at the next resync.
		now := time.Now().UnixNano()
		for id := range m.jobAllocs[key] {
			if a := m.allocs[id]; a != nil && !terminalAlloc(a) {
				c := *a
				c.ClientStatus, c.DesiredStatus, c.ModifyTime = "complete", "stop", now
				m.allocs[id] = &c
			}
		}
		return true
	}
	delete(m.deleted, "job/"+key)
	m.jobs[key] = j
	return true
}

func (m *mirror) upsertAlloc(a *wireAlloc, at uint64) bool {
	if a.Namespace == "" {
		a.Namespace = "default"
	}
	old := m.allocs[a.ID]
	if old != nil && old.ModifyIndex > a.ModifyIndex {
		return false
	}
	if old == nil && at != 0 && at <= m.listedAllocs {
		return false
	}
	m.maxAllocs = max(m.maxAllocs, a.ModifyIndex)
	key := cluster.JobKey(a.Namespace, a.JobID)
	m.allocs[a.ID] = a
	if m.jobAllocs[key] == nil {
		m.jobAllocs[key] = map[string]bool{}
	}
	m.jobAllocs[key][a.ID] = true
	m.dirtyJobs[key] = true
	return true
}

// endedAlloc is an allocation that ended. Nomad's allocation events carry
// no job version (only the allocation list does), so one seen ending on
// the stream is tied to the job's JobModifyIndex at that moment (every
// re-register, ours included, changes it), and one found ended by a
// resync to its JobVersion.
type endedAlloc struct {
	group     string
	completed bool
	listed    bool
	version   uint64 // listed: the allocation's JobVersion
	jmi       uint64 // streamed: the job's JobModifyIndex when it ended
	// name is the allocation's name (a replacement takes it over); why
	// says how it ended, for a dead job's reason (endedWhy).
	name, why string
}

// current reports whether an ended allocation belongs to the job's
// registration j (for a live allocation's predecessor, live's own
// JobVersion when the list gave one).
func (e endedAlloc) current(j *wireJob, liveVersion uint64, liveListed bool) bool {
	if e.listed {
		if liveListed {
			return e.version == liveVersion
		}
		return e.version == j.Version
	}
	return e.jmi == j.JobModifyIndex
}

// noteEnded remembers an allocation that ended.
func (m *mirror) noteEnded(key string, a *wireAlloc, listed bool) {
	if m.ended[key] == nil {
		m.ended[key] = map[string]endedAlloc{}
	}
	e := endedAlloc{group: a.TaskGroup, completed: a.ClientStatus == "complete" && a.DesiredStatus == "run", listed: listed, version: a.JobVersion,
		name: a.Name}
	if !e.completed {
		e.why = endedWhy(a)
	}
	if j := m.jobs[key]; j != nil {
		e.jmi = j.JobModifyIndex
	}
	m.ended[key][a.ID] = e
}

func (m *mirror) upsertNode(n *wireNode, at uint64) bool {
	old := m.nodes[n.ID]
	if old != nil && old.ModifyIndex > n.ModifyIndex {
		return false
	}
	if old == nil && at != 0 && at <= m.listedNodes {
		return false
	}
	m.maxNodes = max(m.maxNodes, n.ModifyIndex)
	m.nodes[n.ID] = n
	m.dirtyNodes[n.ID] = true
	return true
}

func (m *mirror) deleteNode(id string) {
	delete(m.nodes, id)
	m.dirtyNodes[id] = true
}

// config the translation needs.
type translateConfig struct {
	parkingPool string
}

// flush writes every dirty object into the store.
func (m *mirror) flush(store *cluster.Store, tc translateConfig) error {
	var errs []error
	for id := range m.dirtyNodes {
		n := m.nodes[id]
		if n == nil {
			store.DeleteNode(id)
			delete(m.nodeErrs, id)
			continue
		}
		cn, err := translateNode(n)
		if err != nil {
			m.nodeErrs[id] = err
		} else {
			delete(m.nodeErrs, id)
		}
		if err := store.UpsertNode(cn); err != nil {
			errs = append(errs, err)
		}
	}
	clear(m.dirtyNodes)
	for key := range m.dirtyJobs {
		if err := m.flushJob(store, tc, key); err != nil {
			errs = append(errs, err)
		}
	}
	clear(m.dirtyJobs)
	return errors.Join(errs...)
}

func (m *mirror) flushJob(store *cluster.Store, tc translateConfig, key string) error {
	j := m.jobs[key]
	live := m.dropEnded(store, key)
	managed := j != nil && isManaged(j, tc.parkingPool)
	var errs []error
	for _, a := range live {
		ca := translateAlloc(a, key)
		// A replacement of an allocation of the same job version is a
		// later generation of the same gang; one whose predecessor ran an
		// older version (or is unknown) is not.
		if ca.Replacement {
			prev, ok := m.ended[key][a.PreviousAllocation]
			ca.Replacement = ok && j != nil && prev.current(j, a.JobVersion, a.listed)
		}
		if !ca.Replacement && j != nil {
			// Nomad also places replacements without a link (from a
			// blocked evaluation, when a lost node comes back): by name.
			ca.Replacement = m.replacesByName(key, j, a, live)
		}
		if len(ca.GPUs) == 0 && !managed {
			store.DeleteAlloc(a.ID)
			continue
		}
		if err := store.UpsertAlloc(ca); err != nil {
			errs = append(errs, err)
		}
	}
	var cj *cluster.Job
	if managed {
		ended := m.endedReason(key, j)
		cj = translateJob(j, key, len(live), deadRun(j, len(live), ended), tc)
		if cj != nil {
			cj.Ended = ended
		}
	}
	if cj == nil {
		store.DeleteJob(key)
		if j == nil {
			delete(m.ended, key)
		}
		return errors.Join(errs...)
	}
	for _, e := range m.ended[key] {
		if e.completed && e.current(j, 0, false) {
			if cj.Completed == nil {
				cj.Completed = map[string]int{}
			}
			cj.Completed[e.group]++
		}
	}
	if err := store.UpsertJob(cj); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// dropEnded forgets the job's terminal allocations (they hold nothing),
// recording the GPU time they used for fair-share charging and what the
// gang watch needs of them (noteEnded), and returns the live ones.
func (m *mirror) dropEnded(store *cluster.Store, key string) []*wireAlloc {
	var live []*wireAlloc
	for id := range m.jobAllocs[key] {
		a := m.allocs[id]
		if a == nil {
			continue
		}
		if terminalAlloc(a) {
			m.noteEnded(key, a, a.listed)
			delete(m.allocs, id)
			delete(m.jobAllocs[key], id)
			finishAlloc(store, a)
			continue
		}
		live = append(live, a)
	}
	if len(m.jobAllocs[key]) == 0 {
		delete(m.jobAllocs, key)
	}
	return live
}

// finishAlloc removes a terminal allocation from the model, recording when
// it ended so that its GPU time since the last cycle is charged (see
// cluster.Store.FinishAlloc); without an end time it is only deleted.
// One that completed while Nomad still wanted it running (its tasks
// exited successfully, nobody stopped it) is recorded as completed
// (cluster.Store.CompleteAlloc), so the engine may learn its run time.
func finishAlloc(store *cluster.Store, a *wireAlloc) {
	if end := allocEnd(a); !end.IsZero() {
		if a.ClientStatus == "complete" && a.DesiredStatus == "run" {
			store.CompleteAlloc(a.ID, end)
			return
		}
		store.FinishAlloc(a.ID, end)
		return
	}
	store.DeleteAlloc(a.ID)
}

// allocEnd is when a terminal allocation stopped: its last task's finish,
// else the allocation's last modification (a lost allocation's tasks may
// never report one); zero when Nomad gave neither.
func allocEnd(a *wireAlloc) time.Time {
	var end time.Time
	for _, ts := range a.TaskStates {
		if ts.FinishedAt.After(end) {
			end = ts.FinishedAt
		}
	}
	if end.IsZero() && a.ModifyTime > 0 {
		end = time.Unix(0, a.ModifyTime)
	}
	return end
}

func terminalAlloc(a *wireAlloc) bool { return terminalStatus(a.ClientStatus) }

// terminalStatus reports whether an allocation's client status is final:
// it holds no resources any more.
func terminalStatus(clientStatus string) bool {
	switch clientStatus {
	case "complete", "failed", "lost":
		return true
	}
	return false
}

// constraintTargets are the node facts the model keeps for constraints
// (cluster.Node.Lookup); ${meta.*} and ${attr.*} are matched by prefix.
var constraintTargets = map[string]bool{
	"${node.class}": true, "${node.datacenter}": true, "${node.unique.id}": true,
	"${node.unique.name}": true, "${node.pool}": true,
}
