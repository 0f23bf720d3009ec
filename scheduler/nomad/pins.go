package nomad

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// pinJob rewrites a job for admission: target pool, a set_contains_any
// pin per placed group (distinct_hosts when each allocation has a node of
// its own), and in each GPU device block of the group's tasks a pin of the
// exact GPUs the plan gave that block (ownDevicePin): the union over the
// group's allocations, since Nomad applies a device constraint to every
// allocation of the group alike (placement keeps that union exact).
func (x *Executor) pinJob(job *api.Job, a engine.Admission) error {
	pool := a.Pool
	job.NodePool = &pool
	byName := map[string]*api.TaskGroup{}
	for _, tg := range job.TaskGroups {
		byName[deref(tg.Name)] = tg
		unpinGroup(tg)
	}
	for _, g := range a.Groups {
		tg := byName[g.Group]
		if tg == nil {
			return fmt.Errorf("plan places group %q, which the job does not have", g.Group)
		}
		nodes := g.Nodes()
		if len(nodes) == 0 {
			continue
		}
		tg.Constraints = append(tg.Constraints, &api.Constraint{LTarget: PinTarget, RTarget: strings.Join(nodes, ","), Operand: "set_contains_any"})
		if len(nodes) > 1 && len(nodes) == len(g.Allocs) {
			tg.Constraints = append(tg.Constraints, ownDistinctHosts())
		}
		if err := pinDevices(tg, g); err != nil {
			return fmt.Errorf("group %q: %w", g.Group, err)
		}
	}
	return nil
}

// pinDevices adds to each GPU device block of the group's tasks the pin of
// its planned GPUs. Which block gets which GPUs is the plan's: a plan
// without per-block GPUs (AllocPlacement.Blocks) is taken only for a
// group of exactly one GPU block, whose GPUs are then the allocations';
// a plan that leaves a block without GPUs, or several blocks unsplit, is
// refused rather than letting Nomad choose.
func pinDevices(tg *api.TaskGroup, g engine.GroupPlacement) error {
	type key struct {
		task  string
		index int
	}
	blocks := map[key][]string{}
	split := false
	var all []string
	for _, ap := range g.Allocs {
		all = append(all, ap.GPUs...)
		for _, b := range ap.Blocks {
			split = true
			k := key{b.Task, b.Index}
			blocks[k] = append(blocks[k], b.GPUs...)
		}
	}
	var gpuBlocks []*api.RequestedDevice
	var keys []key
	for _, t := range tg.Tasks {
		if t.Resources == nil {
			continue
		}
		for bi, d := range t.Resources.Devices {
			if isGPURequest(d.Name) {
				gpuBlocks = append(gpuBlocks, d)
				keys = append(keys, key{t.Name, bi})
			}
		}
	}
	if !split && len(gpuBlocks) > 1 {
		return fmt.Errorf("the plan does not split the group's GPUs among its %d GPU device blocks", len(gpuBlocks))
	}
	if !split && len(gpuBlocks) == 1 {
		blocks[keys[0]] = all
	}
	for i, d := range gpuBlocks {
		ids := blocks[keys[i]]
		if len(ids) == 0 {
			return fmt.Errorf("the plan gives no GPUs to device block %d (%s) of task %q", keys[i].index, d.Name, keys[i].task)
		}
		slices.Sort(ids)
		d.Constraints = append(d.Constraints, ownDevicePin(slices.Compact(ids)))
	}
	return nil
}

// ownDevicePin is the constraint an admission adds inside a device block:
// the instance IDs as its LTarget and ${device.ids} as its RTarget. Nomad
// reads a ${device.ids} constraint from either side alike (the device
// group must hold one of the IDs; each instance given must be one of
// them), so it allocates exactly those instances; the mirrored form is
// how unpinning tells it from a ${device.ids} constraint the user wrote,
// which has the attribute on the left (as Nomad's docs write it).
func ownDevicePin(ids []string) *api.Constraint {
	return &api.Constraint{LTarget: strings.Join(ids, ","), Operand: "set_contains_any", RTarget: DeviceIDsTarget}
}

// isOwnDevicePin reports whether a device constraint is ownDevicePin's.
func isOwnDevicePin(l, op, r string) bool {
	return op == "set_contains_any" && r == DeviceIDsTarget && l != "" && !strings.HasPrefix(l, "${")
}

// ownDistinctHosts is the distinct_hosts constraint an admission adds. It
// carries PinTarget as its LTarget, which Nomad's distinct_hosts check
// ignores (it reads only the operand and RTarget), so that withoutPins can
// tell it from a distinct_hosts the user wrote, whose LTarget is empty.
func ownDistinctHosts() *api.Constraint {
	return &api.Constraint{LTarget: PinTarget, Operand: "distinct_hosts", RTarget: "true"}
}

// withoutPins drops the constraints an admission added (the node pin and
// our own distinct_hosts) and keeps every constraint of the user's, so a
// job parked again is the job its user submitted.
func withoutPins(cs []*api.Constraint) []*api.Constraint {
	out := cs[:0:0]
	for _, c := range cs {
		if c.LTarget == PinTarget && (c.Operand == "set_contains_any" || c.Operand == "distinct_hosts") {
			continue
		}
		out = append(out, c)
	}
	return out
}

func withoutDevicePins(cs []*api.Constraint) []*api.Constraint {
	out := cs[:0:0]
	for _, c := range cs {
		if isOwnDevicePin(c.LTarget, c.Operand, c.RTarget) {
			continue
		}
		out = append(out, c)
	}
	return out
}

// unpinGroup removes from a task group what an admission added: the node
// pin, our distinct_hosts and the device pins; the user's own constraints
// stay.
func unpinGroup(tg *api.TaskGroup) {
	tg.Constraints = withoutPins(tg.Constraints)
	for _, t := range tg.Tasks {
		if t.Resources == nil {
			continue
		}
		for _, d := range t.Resources.Devices {
			if len(d.Constraints) > 0 {
				d.Constraints = withoutDevicePins(d.Constraints)
			}
		}
	}
}

// unpin turns an admitted job back into a parked one.
func (x *Executor) unpin(job *api.Job) {
	pool := x.cfg.ParkingPool
	job.NodePool = &pool
	for _, tg := range job.TaskGroups {
		unpinGroup(tg)
	}
}

func pinnedAPI(job *api.Job) bool {
	for _, tg := range job.TaskGroups {
		for _, c := range tg.Constraints {
			if c.LTarget == PinTarget && c.Operand == "set_contains_any" {
				return true
			}
		}
	}
	return false
}
