package nomad

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/device/topology"
	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// PinTarget is the constraint attribute an admission pins task groups on.
const PinTarget = "${node.unique.id}"

// DeviceIDsTarget is the device attribute an admission pins device blocks
// on: Nomad's list of a device group's instance IDs.
const DeviceIDsTarget = "${device.ids}"

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

// translateJob turns a managed job into the model's. A dead job without
// live allocations leaves the model (nil), unless dead (mirror.deadReason)
// says an admitted job's run ended with its work not done: it stays,
// running with no allocations, until the scheduler has requeued it or
// ended it (cluster.Job.Dead). A job in the parking pool is queued even
// when dead: its status derives from its evaluations and allocations, so
// a job parked after all its allocations ended (a preempted gang that
// checkpointed and exited) can read dead until its registration's
// evaluation is stored and blocks (the fake emits that status); dropping
// it made it leave the model for a cycle and lose its history, its
// "Preempted by" and its first submit time.
func translateJob(j *wireJob, key string, live int, dead bool, tc translateConfig) *cluster.Job {
	if j.Status == "dead" && live == 0 && !dead && j.NodePool != tc.parkingPool {
		return nil
	}
	cj := &cluster.Job{
		ID: key, Namespace: j.Namespace, Name: j.ID, Priority: j.Priority,
		Submit: time.Unix(0, j.SubmitTime), ModifyIndex: j.JobModifyIndex, Dead: dead,
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
	cj.Spec, cj.SpecErr = jobspec.ParseMeta(j.Meta, nil)
	jobCons, jobDistinct := translateConstraints(j.Constraints)
	cj.DistinctHosts = jobDistinct
	for _, g := range j.TaskGroups {
		cj.Groups = append(cj.Groups, translateGroup(j, g, jobCons, cj))
	}
	return cj
}

// translateGroup turns one task group into the model's: its constraints
// (the job's, the group's and its tasks'), its GPU device blocks, and its
// jobspec (a bad one adds its problems to the job's SpecErr).
func translateGroup(j *wireJob, g wireGroup, jobCons []cluster.Constraint, cj *cluster.Job) cluster.TaskGroup {
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
				IDs: userDeviceIDs(d.Constraints), Constraints: deviceConstraints(d.Constraints), Driver: t.Driver})
		}
	}
	// Every group is parsed, also after a bad job meta or group, so that
	// the job's error lists all its problems at once (the job's own are
	// listed once, not once per group).
	spec, err := jobspec.ParseGroupMeta(j.Meta, g.Meta, g.Name)
	if err != nil {
		cj.SpecErr = jobspec.JoinMetaErrors(cj.SpecErr, err)
	}
	tg.Spec = spec
	if g.Count < 0 {
		cj.SpecErr = jobspec.JoinMetaErrors(cj.SpecErr, fmt.Errorf("group %q: negative count %d", g.Name, g.Count))
		tg.Count = 0
	}
	return tg
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

// deviceConstraints returns a device block's own constraints on the
// device group's facts (attributes, model, vendor, type), which the model
// judges as Nomad does (cluster.DeviceConstraint); nil when it has none.
// Those naming ${device.ids} are left out: the user's set_contains_any
// lists are the block's IDs (userDeviceIDs), the admission's own pin is
// not the user's, and Nomad applies the others per instance, which the
// model does not follow (an admission breaking one is rolled back).
func deviceConstraints(cs []wireConstraint) cluster.DeviceConstraints {
	var out cluster.DeviceConstraints
	for _, c := range cs {
		if c.LTarget == DeviceIDsTarget || c.RTarget == DeviceIDsTarget {
			continue
		}
		out = append(out, cluster.NewDeviceConstraint(c.LTarget, c.Operand, c.RTarget))
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
	groups, groupIndex := deviceGroups(n)
	for _, g := range groups {
		if g.Vendor != "nvidia" || g.Type != "gpu" {
			continue
		}
		if a, ok := g.Attributes[topology.AttrGroupBy]; ok && a.String != nil {
			cn.GroupBy = *a.String
		}
		cn.DeviceGroups = append(cn.DeviceGroups, modelGroup(g))
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

// modelGroup is a device group as the model keeps it for device
// constraints: vendor, type, name and typed attributes.
func modelGroup(g topology.DeviceGroup) cluster.DeviceGroup {
	dg := cluster.DeviceGroup{Vendor: g.Vendor, Type: g.Type, Name: g.Name,
		Attributes: make(map[string]cluster.Attribute, len(g.Attributes))}
	for k, a := range g.Attributes {
		ca := cluster.Attribute{Unit: a.Unit}
		switch {
		case a.Int != nil:
			ca.Kind, ca.Int = cluster.AttrInt, *a.Int
		case a.Float != nil:
			ca.Kind, ca.Float = cluster.AttrFloat, *a.Float
		case a.String != nil:
			ca.Kind, ca.Str = cluster.AttrString, *a.String
		case a.Bool != nil:
			ca.Kind, ca.Bool = cluster.AttrBool, *a.Bool
		default:
			continue
		}
		dg.Attributes[k] = ca
	}
	return dg
}

// deviceGroups turns a node's device groups into topology's, with each
// group's position by name.
func deviceGroups(n *wireNode) ([]topology.DeviceGroup, map[string]int) {
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
	return groups, groupIndex
}
