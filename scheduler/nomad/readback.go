package nomad

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// checkPins reads back the GPUs Nomad allocated to a fully started
// admission and compares them, node by node, with the GPUs the admission
// pinned: a difference means the model and Nomad disagree about which
// GPUs are taken, so it is counted and logged naming the job, node and
// GPUs. It reads exactly the allocations admissionState counted as the
// admission's start (started), whatever they became since: an allocation
// that completed or was stopped still holds its AllocatedResources, so a
// job that finished or was stopped meanwhile is no mismatch. Reading the
// job's live allocations instead counted one whenever a job was stopped
// (or its tasks exited) before the check ran, seen once on a real Nomad.
func (x *Executor) checkPins(ctx context.Context, in *Intent, started []string) {
	if len(in.PinnedGPUs) == 0 || len(started) == 0 {
		return
	}
	got, err := x.allocatedGPUs(ctx, in.JobID, started)
	if err != nil {
		x.log.Debug("cannot read back the GPUs of an admission", "job", in.JobID, "error", err)
		return
	}
	nodes := make([]string, 0, len(in.PinnedGPUs))
	for n := range in.PinnedGPUs {
		nodes = append(nodes, n)
	}
	for n := range got {
		if _, ok := in.PinnedGPUs[n]; !ok {
			nodes = append(nodes, n)
		}
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		want := slices.Clone(in.PinnedGPUs[n])
		have := slices.Clone(got[n])
		slices.Sort(want)
		slices.Sort(have)
		if slices.Equal(want, have) {
			continue
		}
		x.pinMismatches.Add(1)
		x.log.Warn("Nomad allocated other GPUs than the admission pinned", "job", in.JobID, "node", n,
			"pinned", strings.Join(want, ","), "allocated", strings.Join(have, ","))
	}
}

// allocatedGPUs reads the GPU instance IDs Nomad gave the allocations
// (every task's gpu devices in AllocatedResources), by node.
func (x *Executor) allocatedGPUs(ctx context.Context, jobID string, allocs []string) (map[string][]string, error) {
	ns, _ := splitJobKey(jobID)
	got := map[string][]string{}
	for _, id := range allocs {
		a, _, err := x.c.api.Allocations().Info(id, x.c.qns(ctx, ns))
		if err != nil {
			return nil, fmt.Errorf("read allocation %s: %w", id, err)
		}
		if a.AllocatedResources == nil {
			continue
		}
		for _, tr := range a.AllocatedResources.Tasks {
			if tr == nil {
				continue
			}
			for _, d := range tr.Devices {
				if d != nil && d.Type == "gpu" {
					got[a.NodeID] = append(got[a.NodeID], d.DeviceIDs...)
				}
			}
		}
	}
	return got, nil
}
