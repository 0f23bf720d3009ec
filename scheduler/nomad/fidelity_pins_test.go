package nomad

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/internal/nomadfake"
)

// TestFidelityDevicePins runs the device-pin scenario (runDeviceScenario)
// on the fake, seeded with a node that a real agent with impact-gpu's
// shipped defaults reported (scheduler/internal/nomadfake/testdata/
// node-gpus.json: 8 A100s of the fake two-island topology in one device
// group), and, with a nomad
// binary on PATH, on such a real agent; both must observe the same. With
// IMPACT_RECORD_FIXTURES=1 the real node is written to the fixture.
func TestFidelityDevicePins(t *testing.T) {
	fixture := filepath.Join("..", "internal", "nomadfake", "testdata", "node-gpus.json")
	var realObs []string
	real := func() {
		agent := startGPUAgent(t) // skips without nomad
		rc, err := NewClient(Config{Address: agent.addr}, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		if os.Getenv("IMPACT_RECORD_FIXTURES") == "1" {
			recordGPUNode(t, rc, fixture)
		}
		realObs = runDeviceScenario(t, rc)
	}
	if os.Getenv("IMPACT_RECORD_FIXTURES") == "1" {
		real()
	}
	f := nomadfake.New(nomadfake.Options{HeartbeatInterval: 100 * time.Millisecond})
	t.Cleanup(f.Close)
	var n api.Node
	b, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &n); err != nil {
		t.Fatal(err)
	}
	f.UpsertNode(&n)
	fc, err := NewClient(Config{Address: f.URL()}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	fakeObs := runDeviceScenario(t, fc)
	for _, o := range fakeObs {
		t.Logf("fake: %s", o)
	}
	if realObs == nil {
		if _, err := exec.LookPath("nomad"); err != nil {
			t.Skip("no nomad binary on PATH: fake scenario ran, real-agent comparison skipped")
		}
		real()
	}
	compareObservations(t, fakeObs, realObs)
}

// recordGPUNode writes the agent's one node, once its devices are
// fingerprinted, to path.
func recordGPUNode(t *testing.T, c *Client, path string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		ns, _, _ := c.api.Nodes().List(nil)
		if len(ns) == 1 {
			node, _, _ := c.api.Nodes().Info(ns[0].ID, nil)
			if node != nil && node.NodeResources != nil && len(node.NodeResources.Devices) > 0 {
				out, _ := json.MarshalIndent(node, "", "  ")
				if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
				t.Logf("recorded %s", path)
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no node with devices to record")
		}
	}
}

// runDeviceScenario: with one node of 8 GPUs in one device group, an
// admission pinning two GPUs that are not neighbours gets exactly those;
// a job with the user's own ${device.ids} constraint (LTarget form) gets
// exactly its four; a pin that leaves fewer free instances than the count
// does not place (blocked), nor does a count larger than the device group;
// parking the admitted job removes exactly the admission's pins. GPUs are
// named by their NVML index, so the observations do not depend on the
// node's ID.
func runDeviceScenario(t *testing.T, c *Client) []string {
	ctx := context.Background()
	var obs []string
	add := func(format string, a ...any) { obs = append(obs, fmt.Sprintf(format, a...)) }
	poll := func(what string, limit time.Duration, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(limit); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out: %s", what)
			}
		}
	}
	if err := c.EnsureNodePool(ctx, parking, "parking"); err != nil {
		t.Fatal(err)
	}
	w := NewWatcher(c, WatcherConfig{ParkingPool: parking, MinBackoff: 20 * time.Millisecond}, testLogger(t))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = w.Run(wctx) }()
	<-w.Ready()
	var node *cluster.Node
	poll("a node with 8 GPUs in the model", 60*time.Second, func() bool {
		ns := w.Snapshot().Nodes()
		if len(ns) == 1 && len(ns[0].GPUs) == 8 {
			node = ns[0]
			return true
		}
		return false
	})
	groups := map[string]bool{}
	byIndex := map[int]string{}
	index := map[string]int{}
	for _, g := range node.GPUs {
		groups[g.Group] = true
		byIndex[g.Index], index[g.ID] = g.ID, g.Index
	}
	add("node: group_by %s, %d device group(s), islands %d..%d", node.GroupBy, len(groups), node.GPUs[0].Island, node.GPUs[7].Island)
	ids := func(is ...int) []string {
		var out []string
		for _, i := range is {
			out = append(out, byIndex[i])
		}
		sort.Strings(out)
		return out
	}
	indexes := func(gs []string) string {
		var out []int
		for _, g := range gs {
			out = append(out, index[g])
		}
		sort.Ints(out)
		return fmt.Sprint(out)
	}
	job := func(id string, gpus int, pool string) *api.Job {
		j := gpuJob(id, nil, [2]int{1, gpus})
		j.NodePool = &pool
		task := j.TaskGroups[0].Tasks[0]
		task.Config = map[string]any{"command": "/bin/sh", "args": []string{"-c", "trap 'exit 0' TERM; sleep 300 & wait"}}
		cpu, mem := 20, 32
		task.Resources.CPU, task.Resources.MemoryMB = &cpu, &mem
		j.TaskGroups[0].RestartPolicy = &api.RestartPolicy{Attempts: ptrTo(0), Mode: ptrTo("fail")}
		return j
	}
	allocated := func(id string) string {
		var got []string
		poll(id+" running with devices", 30*time.Second, func() bool {
			got = nil
			as, _, _ := c.api.Jobs().Allocations(id, false, nil)
			for _, a := range as {
				if a.ClientStatus != "running" {
					continue
				}
				full, _, err := c.api.Allocations().Info(a.ID, nil)
				if err == nil && full.AllocatedResources != nil {
					for _, d := range full.AllocatedResources.Tasks["trainer"].Devices {
						got = append(got, d.DeviceIDs...)
					}
				}
			}
			return len(got) > 0
		})
		return indexes(got)
	}
	blocked := func(id string) string {
		var why string
		poll(id+" blocked", 30*time.Second, func() bool {
			evs, _, _ := c.api.Jobs().Evaluations(id, nil)
			for _, e := range evs {
				if e.Status == "blocked" {
					why = "blocked"
					return true
				}
			}
			return false
		})
		as, _, _ := c.api.Jobs().Allocations(id, false, nil)
		return fmt.Sprintf("%s, %d allocation(s)", why, len(as))
	}

	// 1. An admission pins GPUs 0 and 3.
	x := NewExecutor(c, NewStateStore(c, StateConfig{}, nil), ExecutorConfig{ParkingPool: parking,
		PollInterval: 50 * time.Millisecond, Snapshot: w.Snapshot}, testLogger(t))
	if _, _, err := c.api.Jobs().Register(job("pin-a", 2, parking), nil); err != nil {
		t.Fatal(err)
	}
	key := cluster.JobKey("default", "pin-a")
	var cj *cluster.Job
	poll("pin-a queued", 20*time.Second, func() bool {
		var ok bool
		cj, ok = w.Snapshot().Job(key)
		return ok && cj.State == cluster.JobQueued
	})
	res := x.Apply(ctx, &engine.Plan{Admissions: []engine.Admission{{JobID: key, ModifyIndex: cj.ModifyIndex, Pool: "default",
		Groups: []engine.GroupPlacement{{Group: "g0", Allocs: []engine.AllocPlacement{{NodeID: node.ID, GPUs: ids(0, 3),
			Blocks: []engine.BlockPlacement{{Task: "trainer", Index: 0, GPUs: ids(0, 3)}}}}}}}}})
	add("admit pin-a: admitted %d", len(res.Admitted))
	add("pin-a (pinned [0 3]): allocated %s", allocated("pin-a"))

	// 2. The user's own ${device.ids} constraint, no scheduler involved.
	b := job("own-ids", 4, "default")
	b.TaskGroups[0].Tasks[0].Resources.Devices[0].Constraints = []*api.Constraint{
		{LTarget: DeviceIDsTarget, Operand: "set_contains_any", RTarget: strings.Join(ids(4, 5, 6, 7), ",")}}
	if _, _, err := c.api.Jobs().Register(b, nil); err != nil {
		t.Fatal(err)
	}
	add("own-ids (own constraint [4 5 6 7]): allocated %s", allocated("own-ids"))

	// 3. A pin naming two free GPUs for a count of 3 cannot place; neither
	// can 9 GPUs from a device group of 8.
	short := job("short", 3, "default")
	short.TaskGroups[0].Tasks[0].Resources.Devices[0].Constraints = []*api.Constraint{ownDevicePin(ids(1, 2))}
	if _, _, err := c.api.Jobs().Register(short, nil); err != nil {
		t.Fatal(err)
	}
	add("short (3 GPUs pinned to [1 2]): %s", blocked("short"))
	if _, _, err := c.api.Jobs().Register(job("nine", 9, "default"), nil); err != nil {
		t.Fatal(err)
	}
	add("nine (9 GPUs, group of 8): %s", blocked("nine"))

	// 4. Parking the admitted job removes exactly the admission's pins.
	if err := x.park(ctx, key, "a test parks it", 0); err != nil {
		t.Fatal(err)
	}
	pj, _, err := c.api.Jobs().Info("pin-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	add("pin-a parked: pool %s, group constraints %d, device constraints %d",
		deref(pj.NodePool), len(pj.TaskGroups[0].Constraints), len(pj.TaskGroups[0].Tasks[0].Resources.Devices[0].Constraints))
	for _, id := range []string{"pin-a", "own-ids", "short", "nine"} {
		_, _, _ = c.api.Jobs().Deregister(id, true, nil)
	}
	return obs
}
