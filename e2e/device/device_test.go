// Package device is the end-to-end suite of the impact-gpu device plugin:
// a real Nomad agent (server and client, 127.0.0.1 only, started by
// e2e/internal/nomadagent) loads the plugin with a fake topology, and the
// suite checks what Nomad makes of it: 4-GPU tasks get four GPUs of one
// NVLink island (and see exactly those), island constraints, NUMA
// grouping, a GPU made unhealthy by an injected XID and healthy again
// after recovery, and device stats in the node's host stats.
// It is skipped unless a nomad binary is on PATH (PATH=/opt/nomad-e2e:$PATH
// go test -v ./e2e/device/).
package device

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/device/gpu/fake"
	"github.com/impact-sched/nomad-impact/device/topology"
	"github.com/impact-sched/nomad-impact/e2e/internal/nomadagent"
)

type agent struct {
	client *api.Client
	// ctl is the topology's control file ("" if it names none).
	ctl string
}

func startAgent(t *testing.T, groupBy string) *agent {
	return startAgentWith(t, "two-islands-8x-a100.hcl", groupBy)
}

// startAgentWith starts a server+client agent (nomadagent: 127.0.0.1, free
// ports, its own dirs, stopped at cleanup) with impact-gpu on the fake
// backend serving topoFile, grouped by groupBy, and raw_exec for the jobs.
func startAgentWith(t *testing.T, topoFile, groupBy string) *agent {
	t.Helper()
	nomadagent.Binary(t) // skip early, before building anything
	dir := t.TempDir()
	topo, err := os.ReadFile(filepath.Join("../../example/topologies", topoFile))
	if err != nil {
		t.Fatal(err)
	}
	topoPath := filepath.Join(dir, topoFile)
	if err := os.WriteFile(topoPath, topo, 0o644); err != nil {
		t.Fatal(err)
	}
	parsed, err := fake.LoadTopology(topoPath)
	if err != nil {
		t.Fatal(err)
	}
	gpu := nomadagent.ImpactBinary(t, dir, "plugins/impact-gpu", "github.com/impact-sched/nomad-impact/cmd/impact-gpu")
	a := nomadagent.Start(t, nomadagent.Config{Prefix: "impact-e2e-device-", Plugins: map[string]string{"impact-gpu": gpu}, Extra: fmt.Sprintf(`
plugin "raw_exec" {
  config {
    enabled = true
  }
}
plugin "impact-gpu" {
  config {
    backend       = "fake"
    fake_topology = %q
    group_by      = %q
  }
}
`, topoPath, groupBy)})
	c, err := api.NewClient(&api.Config{Address: a.Addr})
	if err != nil {
		t.Fatal(err)
	}
	return &agent{client: c, ctl: parsed.ControlFile}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok {
			return
		}
		last = err
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s (last error: %v)", what, d, last)
}

// nodeTopology reads the node's GPU topology the way the scheduler will.
func nodeTopology(n *api.Node) (topology.Node, error) {
	var groups []topology.DeviceGroup
	if n.NodeResources == nil {
		return topology.Node{}, fmt.Errorf("no node resources")
	}
	for _, d := range n.NodeResources.Devices {
		g := topology.DeviceGroup{Vendor: d.Vendor, Type: d.Type, Name: d.Name, Attributes: map[string]topology.Attribute{}}
		for _, in := range d.Instances {
			inst := topology.Instance{ID: in.ID, Healthy: in.Healthy, HealthDescription: in.HealthDescription}
			if in.Locality != nil {
				inst.PCIBusID = in.Locality.PciBusID
			}
			g.Instances = append(g.Instances, inst)
		}
		for k, a := range d.Attributes {
			if a != nil {
				g.Attributes[k] = topology.Attribute{Float: a.FloatVal, Int: a.IntVal, String: a.StringVal, Bool: a.BoolVal, Unit: a.Unit}
			}
		}
		groups = append(groups, g)
	}
	return topology.FromAttributes(groups)
}

func (a *agent) gpuNode(t *testing.T) (*api.Node, topology.Node) {
	return a.gpuNodeN(t, 8)
}

func (a *agent) gpuNodeN(t *testing.T, want int) (*api.Node, topology.Node) {
	t.Helper()
	var node *api.Node
	var topo topology.Node
	waitFor(t, 90*time.Second, fmt.Sprintf("node with %d healthy GPUs", want), func() (bool, error) {
		nodes, _, err := a.client.Nodes().List(nil)
		if err != nil || len(nodes) == 0 {
			return false, err
		}
		n, _, err := a.client.Nodes().Info(nodes[0].ID, nil)
		if err != nil {
			return false, err
		}
		tp, err := nodeTopology(n)
		if err != nil {
			return false, err
		}
		healthy := 0
		for _, g := range tp.GPUs {
			if g.Healthy && g.Known {
				healthy++
			}
		}
		if n.Status != "ready" || healthy != want {
			return false, fmt.Errorf("status %s, %d healthy GPUs", n.Status, healthy)
		}
		node, topo = n, tp
		return true, nil
	})
	return node, topo
}

func gpuJob(id string, count uint64, sleep int) *api.Job {
	job := api.NewBatchJob(id, id, "global", 50)
	job.Datacenters = []string{"*"}
	tg := api.NewTaskGroup("train", 1)
	zero, fail := 0, "fail"
	tg.RestartPolicy = &api.RestartPolicy{Attempts: &zero, Mode: &fail}
	tg.ReschedulePolicy = &api.ReschedulePolicy{Attempts: &zero, Unlimited: new(bool)}
	task := api.NewTask("main", "raw_exec")
	task.Config = map[string]interface{}{
		"command": "/bin/sh",
		"args":    []string{"-c", fmt.Sprintf("echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES; sleep %d", sleep)},
	}
	cpu, mem := 50, 32
	task.Resources = &api.Resources{CPU: &cpu, MemoryMB: &mem,
		Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: &count}}}
	tg.Tasks = []*api.Task{task}
	job.TaskGroups = []*api.TaskGroup{tg}
	return job
}

var visibleRE = regexp.MustCompile(`CUDA_VISIBLE_DEVICES=(\S*)`)

// visibleGPUs waits for the job's allocation to finish and returns the GPUs
// its task saw, and the GPUs Nomad allocated to it.
func (a *agent) visibleGPUs(t *testing.T, jobID string) (seen, allocated []string) {
	t.Helper()
	var alloc *api.Allocation
	waitFor(t, 90*time.Second, "allocation of "+jobID+" complete", func() (bool, error) {
		stubs, _, err := a.client.Jobs().Allocations(jobID, false, nil)
		if err != nil || len(stubs) == 0 {
			return false, err
		}
		if s := stubs[0].ClientStatus; s == "failed" || s == "lost" {
			t.Fatalf("allocation of %s %s: %v", jobID, s, stubs[0].TaskStates)
		}
		if stubs[0].ClientStatus != "complete" {
			return false, fmt.Errorf("status %s", stubs[0].ClientStatus)
		}
		alloc, _, err = a.client.Allocations().Info(stubs[0].ID, nil)
		return err == nil, err
	})
	rc, err := a.client.AllocFS().Cat(alloc, "alloc/logs/main.stdout.0", nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s stdout:\n%s", jobID, out)
	m := visibleRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("%s printed no CUDA_VISIBLE_DEVICES", jobID)
	}
	seen = strings.Split(string(m[1]), ",")
	for _, tr := range alloc.AllocatedResources.Tasks {
		for _, d := range tr.Devices {
			allocated = append(allocated, d.DeviceIDs...)
		}
	}
	return seen, allocated
}

func TestFourGPUTaskGetsOneIsland(t *testing.T) {
	a := startAgent(t, "island")
	node, topo := a.gpuNode(t)
	t.Logf("node %s: islands %v", node.ID, topo.Islands)
	if len(topo.Islands) != 2 {
		t.Fatalf("islands %v, want 2", topo.Islands)
	}
	islandOf := map[string]int{}
	for _, g := range topo.GPUs {
		islandOf[g.ID] = g.Island
	}
	// Two 4-GPU jobs at once: each must get one whole island, so
	// together they use both.
	for _, id := range []string{"gpu4-a", "gpu4-b"} {
		if _, _, err := a.client.Jobs().Register(gpuJob(id, 4, 3), nil); err != nil {
			t.Fatal(err)
		}
	}
	used := map[int]bool{}
	for _, id := range []string{"gpu4-a", "gpu4-b"} {
		seen, allocated := a.visibleGPUs(t, id)
		if len(seen) != 4 {
			t.Fatalf("%s saw %d GPUs: %v", id, len(seen), seen)
		}
		s1, s2 := append([]string(nil), seen...), append([]string(nil), allocated...)
		sort.Strings(s1)
		sort.Strings(s2)
		if strings.Join(s1, ",") != strings.Join(s2, ",") {
			t.Fatalf("%s saw %v but was allocated %v", id, seen, allocated)
		}
		island := islandOf[seen[0]]
		for _, g := range seen {
			if islandOf[g] != island {
				t.Fatalf("%s got GPUs of two islands: %v", id, seen)
			}
		}
		// NVLink-friendly order: the island's index order.
		if strings.Join(seen, ",") != strings.Join(topo.Islands[island], ",") {
			t.Fatalf("%s order %v, want %v", id, seen, topo.Islands[island])
		}
		used[island] = true
		t.Logf("%s: CUDA_VISIBLE_DEVICES = island %d: %v", id, island, seen)
	}
	if len(used) != 2 {
		t.Logf("both jobs used island(s) %v (they did not overlap in time)", used)
	}
}

func TestXIDMakesGPUUnhealthyOnNode(t *testing.T) {
	a := startAgent(t, "island")
	node, topo := a.gpuNode(t)
	victim := topo.Islands[1][2]
	var idx int
	for _, g := range topo.GPUs {
		if g.ID == victim {
			idx = g.Index
		}
	}
	if err := os.WriteFile(a.ctl, []byte(fmt.Sprintf("xid %d 79\n", idx)), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "GPU unhealthy on the node", func() (bool, error) {
		n, _, err := a.client.Nodes().Info(node.ID, nil)
		if err != nil {
			return false, err
		}
		tp, err := nodeTopology(n)
		if err != nil {
			return false, err
		}
		for _, g := range tp.GPUs {
			if g.ID == victim && !g.Healthy && strings.Contains(g.HealthDescription, "XID 79") {
				t.Logf("node reports %s unhealthy: %s", victim, g.HealthDescription)
				return true, nil
			}
		}
		return false, nil
	})
	// Island 1 now has 3 healthy GPUs: a 4-GPU job must land on island 0.
	if _, _, err := a.client.Jobs().Register(gpuJob("after-xid", 4, 0), nil); err != nil {
		t.Fatal(err)
	}
	seen, _ := a.visibleGPUs(t, "after-xid")
	if strings.Join(seen, ",") != strings.Join(topo.Islands[0], ",") {
		t.Fatalf("after XID the job got %v, want island 0 %v", seen, topo.Islands[0])
	}
	// The GPU is reset: the node reports it healthy again.
	f, err := os.OpenFile(a.ctl, os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fmt.Fprintf(f, "recover %d\n", idx)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	a.gpuNode(t)
	t.Logf("node reports %s healthy again after recovery", victim)
}

// TestIslandConstraint pins a request to an island through the typed int
// attribute, as the impact scheduler does when it chooses islands itself.
func TestIslandConstraint(t *testing.T) {
	a := startAgent(t, "island")
	_, topo := a.gpuNode(t)
	for _, island := range []int{1, 0} {
		id := fmt.Sprintf("pinned-%d", island)
		job := gpuJob(id, 2, 0)
		job.TaskGroups[0].Tasks[0].Resources.Devices[0].Constraints = []*api.Constraint{
			api.NewConstraint("${device.attr.island}", "=", fmt.Sprint(island)),
		}
		if _, _, err := a.client.Jobs().Register(job, nil); err != nil {
			t.Fatal(err)
		}
		seen, _ := a.visibleGPUs(t, id)
		if len(seen) != 2 {
			t.Fatalf("%s saw %v", id, seen)
		}
		for _, g := range seen {
			found := false
			for _, m := range topo.Islands[island] {
				found = found || m == g
			}
			if !found {
				t.Fatalf("%s got %v, not all in island %d %v", id, seen, island, topo.Islands[island])
			}
		}
		t.Logf("%s: constraint island = %d gave %v", id, island, seen)
	}
}

// TestLargerThanIslandDoesNotPlace documents the price of island grouping:
// a request larger than an island blocks, as Nomad never spans groups.
func TestLargerThanIslandDoesNotPlace(t *testing.T) {
	a := startAgent(t, "island")
	a.gpuNode(t)
	if _, _, err := a.client.Jobs().Register(gpuJob("five", 5, 0), nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "a blocked evaluation for the 5-GPU job", func() (bool, error) {
		evals, _, err := a.client.Jobs().Evaluations("five", nil)
		if err != nil {
			return false, err
		}
		for _, e := range evals {
			if e.Status == "blocked" {
				for tg, m := range e.FailedTGAllocs {
					t.Logf("group %s: %v", tg, m.DimensionExhausted)
				}
				return true, nil
			}
		}
		return false, fmt.Errorf("%d evaluations, none blocked", len(evals))
	})
	stubs, _, err := a.client.Jobs().Allocations("five", false, nil)
	if err != nil || len(stubs) != 0 {
		t.Fatalf("5-GPU job placed: %v %v", stubs, err)
	}
}

// TestNUMAGrouping: on a PCIe-only node with two NUMA nodes, group_by =
// "numa" gives a 2-GPU task both GPUs of one socket.
func TestNUMAGrouping(t *testing.T) {
	a := startAgentWith(t, "pcie-2numa-4x-l40s.hcl", "numa")
	_, topo := a.gpuNodeN(t, 4)
	numaOf := map[string]int{}
	for _, g := range topo.GPUs {
		numaOf[g.ID] = g.NUMA
	}
	if _, _, err := a.client.Jobs().Register(gpuJob("numa2", 2, 0), nil); err != nil {
		t.Fatal(err)
	}
	seen, _ := a.visibleGPUs(t, "numa2")
	if len(seen) != 2 || numaOf[seen[0]] != numaOf[seen[1]] {
		t.Fatalf("2-GPU task got %v across NUMA nodes %v", seen, numaOf)
	}
	t.Logf("numa2: both GPUs on NUMA node %d", numaOf[seen[0]])
}

// TestDeviceStatsReachNomad: per-GPU stats travel through Nomad's client to
// its HTTP API with their values and units (what `nomad node status
// -stats` shows), including a change injected through the control file.
func TestDeviceStatsReachNomad(t *testing.T) {
	a := startAgent(t, "island")
	node, topo := a.gpuNode(t)
	var gpu1 string
	for _, g := range topo.GPUs {
		if g.Index == 1 {
			gpu1 = g.ID
		}
	}
	if err := os.WriteFile(a.ctl, []byte("stats 1 utilization=77 memory_used_mib=4096 power_w=287.5 temperature_c=66\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the injected stats of GPU 1 in the node's host stats", func() (bool, error) {
		hs, err := a.client.Nodes().Stats(node.ID, nil)
		if err != nil {
			return false, err
		}
		n := 0
		var ds *api.DeviceStats
		for _, g := range hs.DeviceStats {
			n += len(g.InstanceStats)
			if s, ok := g.InstanceStats[gpu1]; ok {
				ds = s
			}
		}
		if ds == nil || ds.Summary == nil || ds.Summary.IntNumeratorVal == nil || *ds.Summary.IntNumeratorVal != 77 {
			return false, fmt.Errorf("%d GPU stats, none with the injected utilisation yet", n)
		}
		if n != 8 {
			return false, fmt.Errorf("stats for %d GPUs, want 8", n)
		}
		at := ds.Stats.Attributes
		mem, pow, temp := at["Memory state"], at["Power usage"], at["Temperature"]
		switch {
		case ds.Summary.Unit != "%":
			return false, fmt.Errorf("summary unit %q", ds.Summary.Unit)
		case mem == nil || mem.IntNumeratorVal == nil || *mem.IntNumeratorVal != 4096 || mem.IntDenominatorVal == nil || *mem.IntDenominatorVal != 81920 || mem.Unit != "MiB":
			return false, fmt.Errorf("memory state %+v", mem)
		case pow == nil || pow.FloatNumeratorVal == nil || *pow.FloatNumeratorVal != 287.5 || pow.FloatDenominatorVal == nil || *pow.FloatDenominatorVal != 400 || pow.Unit != "W":
			return false, fmt.Errorf("power usage %+v", pow)
		case temp == nil || temp.IntNumeratorVal == nil || *temp.IntNumeratorVal != 66 || temp.Unit != "C":
			return false, fmt.Errorf("temperature %+v", temp)
		case ds.Timestamp.IsZero():
			return false, fmt.Errorf("no timestamp")
		}
		t.Logf("node stats of %s: utilization %d%%, memory %d/%d MiB, power %.1f/%.0f W, %d C (%d GPUs with stats)",
			gpu1, *ds.Summary.IntNumeratorVal, *mem.IntNumeratorVal, *mem.IntDenominatorVal, *pow.FloatNumeratorVal, *pow.FloatDenominatorVal, *temp.IntNumeratorVal, n)
		return true, nil
	})
}
