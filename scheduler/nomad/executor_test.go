package nomad

import (
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/internal/nomadfake"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (e *env) executor(clk *fakeClock) *Executor {
	cfg := ExecutorConfig{ParkingPool: parking, AdmitDeadline: time.Minute, PollInterval: 5 * time.Millisecond}
	if clk != nil {
		cfg.Clock = clk.Now
	}
	if e.w != nil {
		cfg.Snapshot = e.w.Snapshot
	}
	return NewExecutor(e.c, NewStateStore(e.c, StateConfig{}, e.log), cfg, e.log)
}

// admission builds the plan of a two-node gang: one allocation of 4 GPUs
// on island 1 of node-0 and of node-1.
func admission(t *testing.T, s *cluster.Snapshot, job string) engine.Admission {
	t.Helper()
	j, ok := s.Job(cluster.JobKey("default", job))
	if !ok {
		t.Fatalf("job %s not in model", job)
	}
	var allocs []engine.AllocPlacement
	for _, nid := range []string{"node-0", "node-1"} {
		n, _ := s.Node(nid)
		var ids []string
		for _, g := range n.GPUs {
			if g.Island == 1 {
				ids = append(ids, g.ID)
			}
		}
		allocs = append(allocs, engine.AllocPlacement{NodeID: nid, GPUs: ids})
	}
	return engine.Admission{JobID: j.ID, ModifyIndex: j.ModifyIndex, Pool: "gpu",
		Groups: []engine.GroupPlacement{{Group: "g0", Allocs: allocs}}}
}

// countRegisters counts, from now on, the registrations of each job.
func countRegisters(f *nomadfake.Server) func(job string) int {
	var mu sync.Mutex
	n := map[string]int{}
	f.OnRegister(func(j *api.Job) {
		mu.Lock()
		n[*j.ID]++
		mu.Unlock()
	})
	return func(job string) int {
		mu.Lock()
		defer mu.Unlock()
		return n[job]
	}
}
