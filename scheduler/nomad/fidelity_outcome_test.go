package nomad

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// outcomeJob is one raw_exec allocation in pool (an unmanaged job: the executor's outcome reading and the watcher's purge
// handling do not depend on admission) whose task runs onSignal on
// SIGUSR1 and restarts at most restarts times, 1s apart, after a non-zero
// exit (mode "fail"); it is never rescheduled (`reschedule { attempts = 0 }`).
func outcomeJob(id, pool, onSignal string, restarts int) *api.Job {
	j := api.NewBatchJob(id, id, "global", 50)
	j.NodePool = &pool
	tg := api.NewTaskGroup("g", 1)
	task := api.NewTask("t", "raw_exec")
	task.Config = map[string]any{"command": "/bin/sh", "args": []string{"-c",
		fmt.Sprintf("trap '%s' USR1; trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done", onSignal)}}
	kill := 2 * time.Second
	task.KillTimeout = &kill
	cpu, mem := 20, 32
	task.Resources = &api.Resources{CPU: &cpu, MemoryMB: &mem}
	tg.AddTask(task)
	delay := time.Second
	tg.RestartPolicy = &api.RestartPolicy{Attempts: ptrTo(restarts), Delay: &delay, Mode: ptrTo("fail"), Interval: ptrTo(time.Hour)}
	tg.ReschedulePolicy = &api.ReschedulePolicy{Attempts: ptrTo(0), Unlimited: ptrTo(false)}
	j.AddTaskGroup(tg)
	return j
}

// runOutcomeScenario signals a task that exits 0 and one that exits 75,
// reads them back the way the executor does (victimOutcome), then purges
// a running job and watches the model drop it. It returns what it saw.
func runOutcomeScenario(t *testing.T, c *Client, pool string, signalExit func(alloc string, code int)) []string {
	ctx := context.Background()
	var obs []string
	poll := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out: %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	running := func(id string) string {
		var out string
		poll(id+" running", func() bool {
			as, _, _ := c.api.Jobs().Allocations(id, true, nil)
			for _, a := range as {
				if a.ClientStatus == "running" {
					out = a.ID
					return true
				}
			}
			return false
		})
		return out
	}
	w := NewWatcher(c, WatcherConfig{ParkingPool: parking, MinBackoff: 20 * time.Millisecond}, testLogger(t))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = w.Run(wctx) }()
	<-w.Ready()
	x := NewExecutor(c, NewStateStore(c, StateConfig{}, testLogger(t)), ExecutorConfig{}, testLogger(t))

	for _, tc := range []struct {
		id, onSignal string
		code         int
		restarts     int
	}{
		{"out-zero", "exit 0", 0, 2}, {"out-requeue", "exit 75", 75, 2},
		// The example's `restart { attempts = 0 mode = "fail" }` and
		// `reschedule { attempts = 0 }`: exit 75 fails the allocation,
		// nothing restarts or replaces it, and the job is dead.
		{"out-requeue-norestart", "exit 75", 75, 0},
		{"out-fail-norestart", "exit 3", 3, 0},
	} {
		if _, _, err := c.api.Jobs().Register(outcomeJob(tc.id, pool, tc.onSignal, tc.restarts), nil); err != nil {
			t.Fatal(err)
		}
		alloc := running(tc.id)
		in := &Intent{JobID: cluster.JobKey("default", tc.id), Allocs: []string{alloc}, Created: time.Now().Add(-time.Second)}
		if signalExit != nil {
			signalExit(alloc, tc.code)
		} else if err := c.api.Allocations().Signal(&api.Allocation{ID: alloc}, nil, "", "SIGUSR1"); err != nil {
			t.Fatal(err)
		}
		var out outcome
		poll(tc.id+" ended", func() bool {
			var err error
			out, err = x.victimOutcome(ctx, in)
			return err == nil && out.ended
		})
		obs = append(obs, fmt.Sprintf("%s: ended=%v done=%v requeued=%v", tc.id, out.ended, out.done, out.requeued))
		if tc.restarts == 0 {
			obs = append(obs, lifeAfterExit(t, c, tc.id, poll))
		}
	}

	// Purge a running job: the model drops its allocation at once. The
	// job carries an admission's pin (to every node) so that the model
	// holds it as a managed job, GPUs or not.
	nodes, _, err := c.api.Nodes().List(nil)
	if err != nil || len(nodes) == 0 {
		t.Fatalf("nodes: %v %v", nodes, err)
	}
	var ids []string
	for _, n := range nodes {
		ids = append(ids, n.ID)
	}
	pj := outcomeJob("out-purge", pool, "true", 2)
	pj.TaskGroups[0].Constraints = append(pj.TaskGroups[0].Constraints,
		&api.Constraint{LTarget: PinTarget, Operand: "set_contains_any", RTarget: strings.Join(ids, ",")})
	if _, _, err := c.api.Jobs().Register(pj, nil); err != nil {
		t.Fatal(err)
	}
	running("out-purge")
	key := cluster.JobKey("default", "out-purge")
	poll("purge job's allocation in the model", func() bool { return len(w.Snapshot().JobAllocs(key)) == 1 })
	if _, _, err := c.api.Jobs().Deregister("out-purge", true, nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	poll("purged job's allocation out of the model", func() bool { return len(w.Snapshot().JobAllocs(key)) == 0 })
	listed := 0
	as, _, err := c.api.Allocations().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if a.JobID == "out-purge" {
			listed++
		}
	}
	obs = append(obs, fmt.Sprintf("purge: model dropped the allocation within 30s (took under %ds), allocation list has %d of it",
		int(time.Since(start).Seconds())+1, listed))
	return obs
}

// lifeAfterExit waits for a job whose only allocation's task exited
// without restarts left to be dead, and says what Nomad reports: each
// allocation's client and desired status. Dead proves no replacement is
// coming: a reschedule Nomad has planned (even delayed) is a pending
// evaluation, which keeps the job pending.
func lifeAfterExit(t *testing.T, c *Client, id string, poll func(string, func() bool)) string {
	t.Helper()
	poll(id+" dead", func() bool {
		j, _, err := c.api.Jobs().Info(id, nil)
		return err == nil && j.Status != nil && *j.Status == "dead"
	})
	as, _, err := c.api.Jobs().Allocations(id, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	var st []string
	for _, a := range as {
		failed := false
		for _, ts := range a.TaskStates {
			failed = failed || ts.Failed
		}
		st = append(st, fmt.Sprintf("%s/%s task failed=%v", a.ClientStatus, a.DesiredStatus, failed))
	}
	return fmt.Sprintf("%s: job dead, allocations %v", id, st)
}

// TestFidelityOutcomesAndPurge: the preemption outcome contract and the
// purge handling read what Nomad really reports (a Terminated task event
// with Details["exit_code"], a complete allocation for exit 0, a purge
// that deletes allocations with no allocation event); the fake must
// report the same.
func TestFidelityOutcomesAndPurge(t *testing.T) {
	e := newEnv(t, 1)
	fc := e.c
	fakeObs := runOutcomeScenario(t, fc, "gpu", func(alloc string, code int) {
		if err := e.fake.ExitTasks(alloc, code); err != nil {
			t.Fatal(err)
		}
	})
	bin, err := exec.LookPath("nomad")
	if err != nil {
		for _, o := range fakeObs {
			t.Logf("fake: %s", o)
		}
		t.Skip("no nomad binary on PATH: fake scenario ran, real-agent comparison skipped")
	}
	addr := startDevAgent(t, bin)
	rc, err := NewClient(Config{Address: addr}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	realObs := runOutcomeScenario(t, rc, "default", nil)
	compareObservations(t, fakeObs, realObs)
}
