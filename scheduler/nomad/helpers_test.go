package nomad

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/internal/nomadfake"
)

const parking = "impact-queue"

type env struct {
	t    testing.TB
	fake *nomadfake.Server
	c    *Client
	w    *Watcher
	log  hclog.Logger

	mu      sync.Mutex
	applied []appliedEvent
	cancel  context.CancelFunc
	done    chan struct{}
}

func testLogger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Warn, Output: testWriter{t}})
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

// newEnv starts a fake Nomad with a parking pool and nodes of 2 islands x
// 4 GPUs in pool "gpu".
func newEnv(t testing.TB, nodes int) *env {
	t.Helper()
	f := nomadfake.New(nomadfake.Options{HeartbeatInterval: 50 * time.Millisecond})
	t.Cleanup(f.Close)
	for i := 0; i < nodes; i++ {
		n, err := nomadfake.TopologyNode(fmt.Sprintf("node-%d", i), fmt.Sprintf("gpu%d", i), "gpu", 2, 4)
		if err != nil {
			t.Fatal(err)
		}
		f.UpsertNode(n)
	}
	c, err := NewClient(Config{Address: f.URL()}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.EnsureNodePool(context.Background(), parking, "parking"); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, fake: f, c: c, log: testLogger(t)}
}

func (e *env) startWatcher(cfg WatcherConfig) {
	e.t.Helper()
	cfg.ParkingPool = parking
	cfg.MinBackoff = 5 * time.Millisecond
	cfg.MaxBackoff = 50 * time.Millisecond
	cfg.IdleTimeout = 2 * time.Second
	cfg.onBatch = func(_ uint64, evs []appliedEvent) {
		e.mu.Lock()
		e.applied = append(e.applied, evs...)
		e.mu.Unlock()
	}
	e.w = NewWatcher(e.c, cfg, e.log)
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.done = make(chan struct{})
	go func() {
		defer close(e.done)
		_ = e.w.Run(ctx)
	}()
	e.t.Cleanup(func() {
		cancel()
		<-e.done
	})
	select {
	case <-e.w.Ready():
	case <-time.After(5 * time.Second):
		e.t.Fatal("watcher not ready")
	}
}

// waitFor polls cond on the model until it holds or 5s pass.
func (e *env) waitFor(what string, cond func(s *cluster.Snapshot) bool) *cluster.Snapshot {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := e.w.Snapshot()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		select {
		case <-e.w.Changes():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitIndex waits until the watcher applied the fake's current index.
func (e *env) waitIndex() {
	e.t.Helper()
	want := e.fake.Index()
	deadline := time.Now().Add(5 * time.Second)
	for e.w.Stats().LastIndex < want {
		// The last writes may not have emitted events (e.g. variables);
		// accept when every buffered event index is applied.
		evs := e.fake.Events()
		if len(evs) > 0 && e.w.Stats().LastIndex >= evs[len(evs)-1].Index {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("watcher at index %d, fake at %d", e.w.Stats().LastIndex, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// gpuJob builds a batch job in the parking pool: groups of count
// allocations with gpus GPUs each.
func gpuJob(id string, meta map[string]string, groups ...[2]int) *api.Job {
	j := api.NewBatchJob(id, id, "global", 50)
	pool := parking
	j.NodePool = &pool
	j.Meta = meta
	for i, g := range groups {
		tg := api.NewTaskGroup(fmt.Sprintf("g%d", i), g[0])
		task := api.NewTask("trainer", "raw_exec")
		cnt := uint64(g[1])
		task.Resources = &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: &cnt}}}
		tg.AddTask(task)
		j.AddTaskGroup(tg)
	}
	return j
}

func (e *env) register(j *api.Job) uint64 {
	e.t.Helper()
	resp, _, err := e.c.api.Jobs().Register(j, nil)
	if err != nil {
		e.t.Fatalf("register %s: %v", *j.ID, err)
	}
	return resp.JobModifyIndex
}

// ping checks that Nomad answers through c and has a leader: the tests'
// connectivity check (the agent itself learns the same from its watcher's
// first resync, so production has no use for it).
func ping(ctx context.Context, c *Client) error {
	var leader string
	if _, err := c.api.Raw().Query("/v1/status/leader", &leader, c.q(ctx)); err != nil {
		return fmt.Errorf("nomad at %s: %w", c.api.Address(), err)
	}
	if leader == "" {
		return fmt.Errorf("nomad at %s: no cluster leader", c.api.Address())
	}
	return nil
}
