package nomad

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/internal/nomadfake"
)

// The fidelity test runs one park / admit / conflict / preempt / explain /
// lock scenario through the adapter against the in-process fake and, when
// a `nomad` binary is on PATH, against a real `nomad agent -dev`, and
// compares what the adapter observed on both. It is how the fake's
// behaviour is checked against the real agent.

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startDevAgent starts a Nomad dev agent on loopback ports of its own and
// returns its address.
func startDevAgent(t *testing.T, bin string) string {
	return startDevAgentWith(t, bin, agentDir(t), "").addr
}

// agentDir makes a directory for a dev agent. Nomad mounts a tmpfs for
// each task's secrets under its data dir and may leave them mounted at
// shutdown, so the cleanup unmounts what is left before removing it.
func agentDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "impact-nomad-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile("/proc/self/mounts"); err == nil {
			var mounts []string
			for _, line := range strings.Split(string(b), "\n") {
				if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
					mounts = append(mounts, f[1])
				}
			}
			sort.Sort(sort.Reverse(sort.StringSlice(mounts)))
			for _, m := range mounts {
				_ = syscall.Unmount(m, syscall.MNT_DETACH)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("leaving %s: %v", dir, err)
		}
	})
	return dir
}

type devAgent struct {
	addr  string
	ports [3]int
	stop  func()
	// token, when ACLs are on, lets stop clean up.
	token string
}

// startDevAgentWith starts a dev agent in dir with extra configuration,
// on fresh loopback ports.
func startDevAgentWith(t *testing.T, bin, dir, extra string) *devAgent {
	return startDevAgentOn(t, bin, dir, extra, [3]int{freePort(t), freePort(t), freePort(t)})
}

// startDevAgentOn starts a dev agent on the given http, rpc and serf ports.
// Its stop (also run at cleanup) stops every job, waits for the tasks to
// end (Nomad leaves tasks running when its agent stops, so that they
// survive a restart), then stops the agent.
func startDevAgentOn(t *testing.T, bin, dir, extra string, ports [3]int) *devAgent {
	t.Helper()
	cfg := fmt.Sprintf(`
bind_addr = "127.0.0.1"
data_dir  = %q
ports {
  http = %d
  rpc  = %d
  serf = %d
}
client {
  enabled = true
  options = {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
%s
`, filepath.Join(dir, "data"), ports[0], ports[1], ports[2], extra)
	cfgPath := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "agent", "-dev", "-config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nomad: %v", err)
	}
	addr := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	da := &devAgent{addr: addr, ports: ports}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			if c, err := api.NewClient(&api.Config{Address: addr, SecretID: da.token}); err == nil {
				jobs, _, _ := c.Jobs().List(&api.QueryOptions{Namespace: "*"})
				for _, j := range jobs {
					_, _, _ = c.Jobs().Deregister(j.ID, false, &api.WriteOptions{Namespace: j.Namespace})
				}
				for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
					as, _, err := c.Allocations().List(&api.QueryOptions{Namespace: "*"})
					live := 0
					for _, a := range as {
						if a.ClientStatus == "running" || a.ClientStatus == "pending" {
							live++
						}
					}
					if err != nil || live == 0 {
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
			}
			_ = cmd.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			logf.Close()
			if t.Failed() {
				b, _ := os.ReadFile(logf.Name())
				if len(b) > 4000 {
					b = b[len(b)-4000:]
				}
				t.Logf("nomad agent log (tail):\n%s", b)
			}
		})
	}
	da.stop = stop
	t.Cleanup(stop)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(addr + "/v1/nodes")
		if err == nil {
			var nodes []struct{ Status string }
			_ = json.NewDecoder(resp.Body).Decode(&nodes)
			resp.Body.Close()
			if len(nodes) == 1 && nodes[0].Status == "ready" {
				return da
			}
			if resp.StatusCode == http.StatusForbidden {
				// ACLs on: the node list needs a token; wait for the
				// leader instead.
				if r2, err := http.Get(addr + "/v1/status/leader"); err == nil {
					var leader string
					_ = json.NewDecoder(r2.Body).Decode(&leader)
					r2.Body.Close()
					if leader != "" {
						time.Sleep(3 * time.Second) // let the client register
						return da
					}
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("nomad dev agent not ready at %s", addr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// scenarioJob is job.hcl of the recorded fixtures: two raw_exec
// allocations that trap SIGUSR1 (checkpoint) and SIGTERM.
func scenarioJob(id string) *api.Job {
	j := api.NewBatchJob(id, id, "global", 50)
	pool := parking
	j.NodePool = &pool
	j.Meta = map[string]string{"impact_tier": "high", "impact_project": "olmo", "impact_grace": "2s"}
	tg := api.NewTaskGroup("workers", 2)
	task := api.NewTask("trainer", "raw_exec")
	task.Config = map[string]any{"command": "/bin/sh", "args": []string{"-c",
		"trap 'echo checkpoint on USR1' USR1; trap 'echo stopping; exit 0' TERM; echo started; while true; do sleep 1; done"}}
	kill := 5 * time.Second
	task.KillTimeout = &kill
	cpu, mem := 50, 32
	task.Resources = &api.Resources{CPU: &cpu, MemoryMB: &mem}
	tg.AddTask(task)
	tg.RestartPolicy = &api.RestartPolicy{Attempts: ptrTo(0), Mode: ptrTo("fail")}
	tg.ReschedulePolicy = &api.ReschedulePolicy{Attempts: ptrTo(0), Unlimited: ptrTo(false)}
	j.AddTaskGroup(tg)
	return j
}

func ptrTo[T any](v T) *T { return &v }

type observer struct {
	mu   sync.Mutex
	obs  []string
	seen map[string]bool
}

func (o *observer) add(format string, a ...any) {
	o.mu.Lock()
	o.obs = append(o.obs, fmt.Sprintf(format, a...))
	o.mu.Unlock()
}

// runScenario drives the adapter through the cycle and returns what it
// observed, in a form comparable between the fake and a real agent.
func runScenario(t *testing.T, c *Client) ([]string, []string) {
	ctx := context.Background()
	o := &observer{seen: map[string]bool{}}
	log := testLogger(t)
	poll := func(what string, limit time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out: %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := c.EnsureNodePool(ctx, parking, "parking pool: jobs wait here until admitted"); err != nil {
		t.Fatal(err)
	}
	if err := c.EnsureNodePool(ctx, parking, "again"); err != nil {
		t.Fatalf("EnsureNodePool not idempotent: %v", err)
	}
	w := NewWatcher(c, WatcherConfig{ParkingPool: parking, MinBackoff: 20 * time.Millisecond,
		OnBatch: func(_ uint64, evs []AppliedEvent) {
			o.mu.Lock()
			for _, e := range evs {
				o.seen[e.Topic+"/"+e.Type] = true
			}
			o.mu.Unlock()
		}}, log)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = w.Run(wctx) }()
	<-w.Ready()
	snap := w.Snapshot()
	if snap.NumNodes() != 1 {
		t.Fatalf("nodes = %d", snap.NumNodes())
	}
	nodeID := snap.Nodes()[0].ID
	key := cluster.JobKey("default", "train-a")

	// 1. Park.
	if _, _, err := c.api.Jobs().Register(scenarioJob("train-a"), nil); err != nil {
		t.Fatal(err)
	}
	poll("parked in model", 10*time.Second, func() bool {
		j, ok := w.Snapshot().Job(key)
		return ok && j.State == cluster.JobQueued
	})
	poll("blocked eval", 10*time.Second, func() bool {
		evs, _, _ := c.api.Jobs().Evaluations("train-a", nil)
		for _, e := range evs {
			if e.Status == "blocked" {
				return true
			}
		}
		return false
	})
	// Read the job and its summary once Nomad has processed the
	// evaluation: before that the summary shows nothing queued yet.
	job, _, _ := c.api.Jobs().Info("train-a", nil)
	sum, _, _ := c.api.Jobs().Summary("train-a", nil)
	evs, _, _ := c.api.Jobs().Evaluations("train-a", nil)
	var evStatus []string
	for _, e := range evs {
		evStatus = append(evStatus, e.Status)
		if e.Status == "blocked" {
			m := e.FailedTGAllocs["workers"]
			o.add("park: blocked eval nodes in pool %d, pool %s", m.NodesInPool, m.NodePool)
		}
	}
	sort.Strings(evStatus)
	o.add("park: job %s pool %s version %d queued %d evals %v", *job.Status, *job.NodePool, *job.Version, sum.Summary["workers"].Queued, evStatus)

	// 2. Admission through the executor.
	st := NewStateStore(c, StateConfig{}, log)
	x := NewExecutor(c, st, ExecutorConfig{ParkingPool: parking, PollInterval: 100 * time.Millisecond}, log)
	j, _ := w.Snapshot().Job(key)
	stale := j.ModifyIndex
	adm := engine.Admission{JobID: key, ModifyIndex: j.ModifyIndex, Pool: "default", Groups: []engine.GroupPlacement{{Group: "workers",
		Allocs: []engine.AllocPlacement{{NodeID: nodeID}, {NodeID: nodeID}}}}}
	res := x.Apply(ctx, &engine.Plan{Admissions: []engine.Admission{adm}})
	o.add("admit: admitted %d conflicts %d failed %v", len(res.Admitted), conflicts(res), res.Failed)
	poll("gang running", 30*time.Second, func() bool {
		x.CheckDeadlines(ctx)
		return !x.Busy(key)
	})
	job, _, _ = c.api.Jobs().Info("train-a", nil)
	var pins []string
	for _, cons := range job.TaskGroups[0].Constraints {
		pins = append(pins, cons.LTarget+" "+cons.Operand)
	}
	allocs, _, _ := c.api.Jobs().Allocations("train-a", true, nil)
	var st1 []string
	for _, a := range allocs {
		st1 = append(st1, a.ClientStatus+"/"+a.DesiredStatus)
	}
	sort.Strings(st1)
	o.add("admit: job %s pool %s version %d pins %v allocs %v", *job.Status, *job.NodePool, *job.Version, pins, st1)
	poll("model running", 10*time.Second, func() bool {
		j, ok := w.Snapshot().Job(key)
		return ok && j.State == cluster.JobRunning && len(w.Snapshot().JobAllocs(key)) == 2
	})

	// 3. A plan made on a stale index loses (the job moved on).
	adm.ModifyIndex = stale
	res = x.Apply(ctx, &engine.Plan{Admissions: []engine.Admission{adm}})
	o.add("stale admit: admitted %d conflicts %d", len(res.Admitted), conflicts(res))
	// And the raw EnforceIndex conflict answer.
	_, _, err := c.api.Jobs().EnforceRegister(job, stale, nil)
	o.add("enforce conflict: %v", err != nil && isEnforceConflict(err) && statusCode(err) == 500)

	// 4. Preemption: signal, grace, re-park, stop.
	var ids []string
	for _, a := range allocs {
		ids = append(ids, a.ID)
	}
	start := time.Now()
	res = x.Apply(ctx, &engine.Plan{Preemptions: []engine.Preemption{{JobID: key, Allocs: ids, GPUs: 0,
		Grace: 2 * time.Second, CheckpointSignal: "SIGUSR1", Preemptor: "default/urgent", Reason: "test"}}})
	o.add("preempt: started %d", len(res.Preempted))
	x.Wait()
	o.add("preempt: waited the grace %v", time.Since(start) >= 2*time.Second)
	poll("allocs stopped", 30*time.Second, func() bool {
		as, _, _ := c.api.Jobs().Allocations("train-a", true, nil)
		for _, a := range as {
			if a.ClientStatus == "running" || a.ClientStatus == "pending" {
				return false
			}
		}
		return true
	})
	job, _, _ = c.api.Jobs().Info("train-a", nil)
	sum, _, _ = c.api.Jobs().Summary("train-a", nil)
	allocs, _, _ = c.api.Jobs().Allocations("train-a", true, nil)
	var st2 []string
	signalled := 0
	for _, a := range allocs {
		st2 = append(st2, a.ClientStatus+"/"+a.DesiredStatus+"/"+a.DesiredDescription)
		full, _, err := c.api.Allocations().Info(a.ID, nil)
		if err == nil {
			for _, ts := range full.TaskStates {
				for _, ev := range ts.Events {
					if ev.Type == "Signaling" {
						signalled++
					}
				}
			}
		}
	}
	sort.Strings(st2)
	o.add("preempt: job %s pool %s pinned %v queued %d complete %d allocs %v signalled %d",
		*job.Status, *job.NodePool, pinnedAPI(job), sum.Summary["workers"].Queued, sum.Summary["workers"].Complete, st2, signalled)
	poll("model queued again", 10*time.Second, func() bool {
		j, ok := w.Snapshot().Job(key)
		return ok && j.State == cluster.JobQueued && len(w.Snapshot().JobAllocs(key)) == 0
	})
	recs, _ := st.Preemptions(ctx, time.Time{})
	o.add("preempt: records %d", len(recs))

	// 5. Explain Variable.
	ew := NewExplainWriter(c, log)
	err = ew.WriteItems(ctx, key, map[string]string{"position": "1", "state": "waiting",
		"reason": "waiting: needs 2 nodes with 8 free GPUs in one NVLink island"}, time.Now())
	items, rerr := ew.Read(ctx, key)
	o.add("explain: write %v read %v position %s", err, rerr, items["position"])
	_, _, err = c.api.Variables().Read("nomad/jobs/nope/impact", nil)
	o.add("missing variable: %v", err)

	// 6. Leader lock.
	short := NewElector(c, ElectorConfig{HolderID: "agent-0", TTL: 2 * time.Second}, log)
	_, err = short.acquire(ctx)
	o.add("lock: TTL 2s refused: %v", err != nil && statusCode(err) == 400 && strings.Contains(err.Error(), "TTL must be between 10 seconds and 24 hours"))
	el := NewElector(c, ElectorConfig{HolderID: "agent-1", TTL: 10 * time.Second}, log)
	el2 := NewElector(c, ElectorConfig{HolderID: "agent-2", TTL: 10 * time.Second}, log)
	id1, err1 := el.acquire(ctx)
	id2, err2 := el2.acquire(ctx)
	holder, _ := el2.Holder(ctx)
	o.add("lock: first %v/%v second %q/%v holder %s", id1 != "", err1, id2, err2, holder)
	el.release(ctx, id1)
	holder, herr := el2.Holder(ctx)
	o.add("lock: released, holder %q (%v)", holder, herr)
	id2, err2 = el2.acquire(ctx)
	holder, _ = el.Holder(ctx)
	o.add("lock: after release second %v/%v holder %s", id2 != "", err2, holder)
	el2.release(ctx, id2)

	o.mu.Lock()
	defer o.mu.Unlock()
	var types []string
	for k := range o.seen {
		types = append(types, k)
	}
	sort.Strings(types)
	return o.obs, types
}

// fakeClient starts a fake holding the recorded dev agent's node.
func fakeClient(t *testing.T) *Client {
	t.Helper()
	f := nomadfake.New(nomadfake.Options{HeartbeatInterval: 100 * time.Millisecond})
	t.Cleanup(f.Close)
	var n api.Node
	b, err := os.ReadFile(filepath.Join("..", "internal", "nomadfake", "testdata", "node.json"))
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
	return fc
}

func TestFidelityFakeVersusRealNomad(t *testing.T) {
	fakeObs, fakeTypes := runScenario(t, fakeClient(t))
	for _, o := range fakeObs {
		t.Logf("fake: %s", o)
	}
	bin, err := exec.LookPath("nomad")
	if err != nil {
		t.Skip("no nomad binary on PATH: fake scenario ran, real-agent comparison skipped")
	}
	addr := startDevAgent(t, bin)
	rc, err := NewClient(Config{Address: addr}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	realObs, realTypes := runScenario(t, rc)
	for i := range max(len(fakeObs), len(realObs)) {
		var fo, ro string
		if i < len(fakeObs) {
			fo = fakeObs[i]
		}
		if i < len(realObs) {
			ro = realObs[i]
		}
		if fo != ro {
			t.Errorf("fake and real Nomad differ:\n  fake: %s\n  real: %s", fo, ro)
		} else {
			t.Logf("same: %s", fo)
		}
	}
	missing := []string{}
	for _, typ := range realTypes {
		if !containsStr(fakeTypes, typ) {
			missing = append(missing, typ)
		}
	}
	t.Logf("event types, real: %v", realTypes)
	t.Logf("event types, fake: %v", fakeTypes)
	if len(missing) > 0 {
		t.Logf("event types the real agent sent that the fake did not: %v", missing)
	}
	if !strings.Contains(strings.Join(realTypes, " "), "Allocation/AllocationUpdated") {
		t.Errorf("real agent stream lacked allocation updates: %v", realTypes)
	}
}

func containsStr(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

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
	for i := range max(len(fakeObs), len(realObs)) {
		var fo, ro string
		if i < len(fakeObs) {
			fo = fakeObs[i]
		}
		if i < len(realObs) {
			ro = realObs[i]
		}
		if fo != ro {
			t.Errorf("fake and real Nomad differ:\n  fake: %s\n  real: %s", fo, ro)
		} else {
			t.Logf("same: %s", fo)
		}
	}
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
	if err := x.park(ctx, key); err != nil {
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
