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
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/internal/nomadfake"
)

// scenarioJob is job.hcl of the recorded fixtures: two raw_exec
// allocations that trap SIGUSR1 (checkpoint) and SIGTERM.
func scenarioJob(id string) *api.Job {
	j := api.NewBatchJob(id, id, "global", 50)
	pool := parking
	j.NodePool = &pool
	j.Meta = map[string]string{"impact_tier": "high", "impact_project": "olmo", "impact_grace": "2s", "impact_walltime": "6h"}
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
		onBatch: func(_ uint64, evs []appliedEvent) {
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
	res = x.Apply(ctx, &engine.Plan{Preemptions: []engine.Preemption{{Stop: engine.Stop{JobID: key, Allocs: ids, GPUs: 0, Grace: 2 * time.Second, CheckpointSignal: "SIGUSR1",
		Progress: 4 * time.Hour, ProgressOnSignal: 270 * time.Minute}, Preemptor: "default/urgent", Reason: "test"}}})
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
	// Parking re-registers the job and Nomad stamps a new SubmitTime:
	// the engine queues it by then, behind what waited before (the
	// simulator models a preemption's requeue so).
	j, _ = w.Snapshot().Job(key)
	o.add("preempt: queued again with a submit time after the preemption began %v", j.Submit.After(start))
	// ... with the walltime it was submitted with, and the work the plan
	// said it saved: its tasks ran on through the grace (no requeue exit
	// code), so its checkpoints' 4h, not the 4h30m it would have saved at
	// the signal. The engine expects it to need the 2h left (the
	// simulator's requeue, sim.spec).
	o.add("preempt: queued again with the walltime it was submitted with %v, progress %v, left %v",
		j.Spec.Walltime == 6*time.Hour, j.Spec.Progress, j.Spec.Left())
	if j.Spec.Walltime != 6*time.Hour || j.Spec.Progress != 4*time.Hour || j.Spec.Left() != 2*time.Hour {
		t.Errorf("the parked job's walltime is %v and progress %v (left %v), want the 6h it was submitted with, 4h saved and 2h left",
			j.Spec.Walltime, j.Spec.Progress, j.Spec.Left())
	}
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
	compareObservations(t, fakeObs, realObs)
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

// compareObservations fails for every step where the fake's observation
// differs from the real Nomad's (a missing step counts as ""), and logs
// the steps they agree on.
func compareObservations(t *testing.T, fakeObs, realObs []string) {
	t.Helper()
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
