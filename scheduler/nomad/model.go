package nomad

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/device/topology"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// PinTarget is the constraint attribute an admission pins task groups on.
const PinTarget = "${node.unique.id}"

// DeviceIDsTarget is the device attribute an admission pins device blocks
// on: Nomad's list of a device group's instance IDs.
const DeviceIDsTarget = "${device.ids}"

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
	e := endedAlloc{group: a.TaskGroup, completed: a.ClientStatus == "complete" && a.DesiredStatus == "run", listed: listed, version: a.JobVersion}
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
	var live []*wireAlloc
	for id := range m.jobAllocs[key] {
		a := m.allocs[id]
		if a == nil {
			continue
		}
		if terminalAlloc(a) {
			// Terminal allocations hold nothing: forget them, recording
			// the GPU time they used for fair-share charging.
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
		if len(ca.GPUs) == 0 && !managed {
			store.DeleteAlloc(a.ID)
			continue
		}
		if err := store.UpsertAlloc(ca); err != nil {
			errs = append(errs, err)
		}
	}
	if !managed {
		store.DeleteJob(key)
		if j == nil {
			delete(m.ended, key)
		}
		return errors.Join(errs...)
	}
	cj := translateJob(j, key, len(live), tc)
	if cj != nil {
		for _, e := range m.ended[key] {
			if e.completed && e.current(j, 0, false) {
				if cj.Completed == nil {
					cj.Completed = map[string]int{}
				}
				cj.Completed[e.group]++
			}
		}
	}
	if cj == nil {
		store.DeleteJob(key)
		return errors.Join(errs...)
	}
	if err := store.UpsertJob(cj); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// finishAlloc removes a terminal allocation from the model, recording when
// it ended so that its GPU time since the last cycle is charged (see
// cluster.Store.FinishAlloc); without an end time it is only deleted.
func finishAlloc(store *cluster.Store, a *wireAlloc) {
	if end := allocEnd(a); !end.IsZero() {
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

// isManaged: the job opted in (it is in the parking pool) or the scheduler
// admitted it (its groups carry our pin constraint).
func isManaged(j *wireJob, parkingPool string) bool {
	if j.Stop {
		return false
	}
	return j.NodePool == parkingPool || pinned(j)
}

func pinned(j *wireJob) bool {
	for _, g := range j.TaskGroups {
		for _, c := range g.Constraints {
			if c.LTarget == PinTarget && c.Operand == "set_contains_any" {
				return true
			}
		}
	}
	return false
}

// isGPU reports whether a device request or allocation names NVIDIA-style
// GPUs ("gpu", "nvidia/gpu", "nvidia/gpu/<model>").
func isGPURequest(name string) bool {
	parts := strings.Split(name, "/")
	switch len(parts) {
	case 1:
		return parts[0] == "gpu"
	default:
		return parts[1] == "gpu"
	}
}

func translateJob(j *wireJob, key string, live int, tc translateConfig) *cluster.Job {
	if j.Status == "dead" && live == 0 {
		return nil
	}
	cj := &cluster.Job{
		ID: key, Namespace: j.Namespace, Name: j.ID, Priority: j.Priority,
		Submit: time.Unix(0, j.SubmitTime), ModifyIndex: j.JobModifyIndex,
	}
	parked := j.NodePool == tc.parkingPool
	if parked && live == 0 {
		cj.State = cluster.JobQueued
	} else {
		cj.State = cluster.JobRunning
		// Registered into the parking pool without our pins while
		// allocations still run: re-submitted by its user (or being
		// parked by a preemption, which the engine knows it ordered).
		cj.Parked = parked && !pinned(j)
	}
	cj.Spec, cj.SpecErr = policy.ParseMeta(j.Meta, nil)
	jobCons, jobDistinct := translateConstraints(j.Constraints)
	cj.DistinctHosts = jobDistinct
	for _, g := range j.TaskGroups {
		tg := cluster.TaskGroup{Name: g.Name, Count: g.Count}
		var groupCons []cluster.Constraint
		groupCons, tg.DistinctHosts = translateConstraints(g.Constraints)
		tg.Constraints = append(append([]cluster.Constraint(nil), jobCons...), groupCons...)
		for _, t := range g.Tasks {
			taskCons, _ := translateConstraints(t.Constraints)
			tg.Constraints = append(tg.Constraints, taskCons...)
			if t.Resources == nil {
				continue
			}
			for bi, d := range t.Resources.Devices {
				if !isGPURequest(d.Name) {
					continue
				}
				n := 1
				if d.Count != nil {
					n = int(*d.Count)
				}
				tg.GPUs += n
				tg.Devices = append(tg.Devices, cluster.DeviceAsk{Task: t.Name, Index: bi, Name: d.Name, Count: n,
					IDs: userDeviceIDs(d.Constraints), Driver: t.Driver})
			}
		}
		if cj.SpecErr == nil {
			spec, err := policy.ParseGroupMeta(j.Meta, g.Meta, g.Name)
			if err != nil {
				cj.SpecErr = err
			}
			tg.Spec = spec
		}
		if g.Count < 0 && cj.SpecErr == nil {
			cj.SpecErr = fmt.Errorf("group %q: negative count %d", g.Name, g.Count)
			tg.Count = 0
		}
		cj.Groups = append(cj.Groups, tg)
	}
	return cj
}

// userDeviceIDs returns the instance IDs a device block's own
// constraints allow, from ${device.ids} set_contains_any (either side), or
// nil when the block has none. The admission's own pin (ownDevicePin) is
// left out: it is the scheduler's choice, not the user's. Several such
// constraints intersect.
func userDeviceIDs(cs []wireConstraint) []string {
	var out []string
	found := false
	for _, c := range cs {
		if c.Operand != "set_contains_any" || isOwnDevicePin(c.LTarget, c.Operand, c.RTarget) {
			continue
		}
		var list string
		switch {
		case c.LTarget == DeviceIDsTarget && !strings.Contains(c.RTarget, "${"):
			list = c.RTarget
		case c.RTarget == DeviceIDsTarget && !strings.Contains(c.LTarget, "${"):
			list = c.LTarget
		default:
			continue
		}
		ids := splitIDs(list)
		if !found {
			out, found = ids, true
			continue
		}
		var keep []string
		for _, id := range out {
			if slices.Contains(ids, id) {
				keep = append(keep, id)
			}
		}
		out = keep
	}
	if found && out == nil {
		out = []string{} // nothing allowed: the block fits nowhere
	}
	return out
}

// splitIDs splits a comma-separated ID list as Nomad's set operators do
// (elements trimmed).
func splitIDs(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// constraintTargets are the node facts the model keeps for constraints
// (cluster.Node.Lookup); ${meta.*} and ${attr.*} are matched by prefix.
var constraintTargets = map[string]bool{
	"${node.class}": true, "${node.datacenter}": true, "${node.unique.id}": true,
	"${node.unique.name}": true, "${node.pool}": true,
}

// translateConstraints keeps the constraints the scheduler can check
// itself: distinct_hosts (reported apart, as Nomad applies it to the level
// it is written at) and equality, inequality and presence tests of node
// facts the model holds, with a literal right side. Others (regexp,
// version, set_contains, distinct_property, ordering, interpolated right
// sides, the scheduler's own set_contains_any pin) are left to Nomad, as
// before: an admission that breaks one fails in Nomad and is rolled back.
func translateConstraints(cs []wireConstraint) (out []cluster.Constraint, distinctHosts bool) {
	for _, c := range cs {
		op := c.Operand
		switch op {
		case "distinct_hosts":
			if c.LTarget == PinTarget {
				continue // the admission's own (ownDistinctHosts), not the user's
			}
			// As Nomad reads it: on unless RTarget parses as false.
			if v, err := strconv.ParseBool(c.RTarget); c.RTarget == "" || err != nil || v {
				distinctHosts = true
			}
			continue
		case "", "==", "is":
			op = "="
		case "not":
			op = "!="
		case "=", "!=", "is_set", "is_not_set":
		default:
			continue
		}
		known := constraintTargets[c.LTarget] ||
			((strings.HasPrefix(c.LTarget, "${meta.") || strings.HasPrefix(c.LTarget, "${attr.")) && strings.HasSuffix(c.LTarget, "}"))
		if !known || strings.Contains(c.RTarget, "${") {
			continue
		}
		out = append(out, cluster.Constraint{Target: c.LTarget, Operand: op, Value: c.RTarget})
	}
	return out, distinctHosts
}

func translateAlloc(a *wireAlloc, jobKey string) *cluster.Alloc {
	ca := &cluster.Alloc{
		ID: a.ID, JobID: jobKey, Group: a.TaskGroup, NodeID: a.NodeID,
		Stopping: a.DesiredStatus != "run", Replacement: a.PreviousAllocation != "",
	}
	if a.AllocatedResources != nil {
		names := make([]string, 0, len(a.AllocatedResources.Tasks))
		for n := range a.AllocatedResources.Tasks {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			for _, d := range a.AllocatedResources.Tasks[n].Devices {
				if d.Type == "gpu" {
					ca.GPUs = append(ca.GPUs, d.DeviceIDs...)
				}
			}
		}
	}
	start := time.Time{}
	for _, ts := range a.TaskStates {
		if !ts.StartedAt.IsZero() && (start.IsZero() || ts.StartedAt.Before(start)) {
			start = ts.StartedAt
		}
	}
	if start.IsZero() {
		start = time.Unix(0, a.CreateTime)
	}
	ca.Start = start
	return ca
}

// translateNode turns a Nomad node into the model's node. GPUs come from
// the device groups: with impact-gpu's topology attributes they carry
// their island and NUMA node; without them (another device plugin) each
// device group counts as one island, since Nomad places a request within
// one group. Unusable attributes leave the node without GPUs and return
// the error (the node stays visible, its GPUs are not offered).
func translateNode(n *wireNode) (*cluster.Node, error) {
	cn := &cluster.Node{
		ID: n.ID, Name: n.Name, Pool: n.NodePool, Labels: n.Meta,
		Class: n.NodeClass, Datacenter: n.Datacenter, Attributes: n.Attributes,
		Eligible: n.SchedulingEligibility == "eligible",
		Ready:    n.Status == "ready" && !n.Drain,
	}
	if n.NodeResources == nil || len(n.NodeResources.Devices) == 0 {
		return cn, nil
	}
	groups := make([]topology.DeviceGroup, 0, len(n.NodeResources.Devices))
	groupIndex := map[string]int{}
	for i, g := range n.NodeResources.Devices {
		dg := topology.DeviceGroup{Vendor: g.Vendor, Type: g.Type, Name: g.Name, Attributes: map[string]topology.Attribute{}}
		for k, a := range g.Attributes {
			if a != nil {
				dg.Attributes[k] = topology.Attribute{Float: a.Float, Int: a.Int, String: a.String, Bool: a.Bool, Unit: a.Unit}
			}
		}
		for _, inst := range g.Instances {
			ti := topology.Instance{ID: inst.ID, Healthy: inst.Healthy, HealthDescription: inst.HealthDescription}
			if inst.Locality != nil {
				ti.PCIBusID = inst.Locality.PciBusID
			}
			dg.Instances = append(dg.Instances, ti)
		}
		groups = append(groups, dg)
		groupIndex[g.Name] = i
	}
	for _, g := range groups {
		if a, ok := g.Attributes[topology.AttrGroupBy]; ok && a.String != nil && g.Vendor == "nvidia" && g.Type == "gpu" {
			cn.GroupBy = *a.String
		}
	}
	tn, err := topology.FromAttributes(groups)
	if err != nil {
		return cn, fmt.Errorf("node %s (%s): GPU topology: %w", n.Name, n.ID, err)
	}
	next := 0
	for _, g := range tn.GPUs {
		if len(cn.GPUs) >= cluster.MaxGPUsPerNode {
			break
		}
		cg := cluster.GPU{ID: g.ID, Model: g.Model, Healthy: g.Healthy, Group: g.Group}
		if g.Known {
			cg.Index, cg.Island, cg.NUMA = g.Index, g.Island, g.NUMA
		} else {
			// Unknown topology: the device group is the only locality
			// Nomad guarantees. Offset past any known islands.
			cg.Index, cg.Island, cg.NUMA = next, 1000+groupIndex[g.Group], -1
		}
		next++
		cn.GPUs = append(cn.GPUs, cg)
	}
	sort.SliceStable(cn.GPUs, func(i, j int) bool { return cn.GPUs[i].Index < cn.GPUs[j].Index })
	return cn, nil
}
