package agent

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
)

// countingHolder is an election this agent never wins that counts how
// often it is asked who holds the lock.
type countingHolder struct {
	neverElected
	asks atomic.Int32
}

func (c *countingHolder) Holder(context.Context) (string, error) {
	c.asks.Add(1)
	return "impact-2", nil
}

// A standby asks who leads at most once per HolderCheckEvery of the
// agent's clock, however many cycles it runs.
func TestStandbyHolderCheckIsRateLimited(t *testing.T) {
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	n.addNode("node-1", 8, 1, "gpu")
	ex := &fakeExec{n: n, agent: "a1"}
	el := &countingHolder{neverElected: neverElected{ex}}
	opts := fakeOptions(t, n, ex, clk.Now)
	opts.Elector, opts.HolderCheckEvery = el, 5*time.Second
	a := runTestAgent(t, opts)

	waitFor(t, "leader named", func() bool { return a.Health().LeaderName == "impact-2" })
	waitCycles(t, 5, a)
	if got := el.asks.Load(); got != 1 {
		t.Fatalf("asked %d times in 5+ cycles within HolderCheckEvery, want 1", got)
	}
	clk.Advance(4 * time.Second)
	waitCycles(t, 3, a)
	if got := el.asks.Load(); got != 1 {
		t.Fatalf("asked %d times before HolderCheckEvery passed, want 1", got)
	}
	clk.Advance(time.Second)
	waitFor(t, "second check once HolderCheckEvery passed", func() bool { return el.asks.Load() == 2 })
	waitCycles(t, 3, a)
	if got := el.asks.Load(); got != 2 {
		t.Fatalf("asked %d times, want 2", got)
	}
}

// selfNamingHolder never elects this agent but reports its own name as the
// lock holder: the item an agent that lost the lock without releasing it
// leaves behind (Nomad restarted under it).
type selfNamingHolder struct {
	neverElected
	name string
}

func (s selfNamingHolder) Holder(context.Context) (string, error) { return s.name, nil }

// A standby that finds its own name in the lock's holder item knows it is
// stale: health reports that no agent leads once NoLeaderGrace passes,
// instead of naming itself the leader and staying ok.
func TestStaleSelfHolderIsNoLeader(t *testing.T) {
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	n.addNode("node-1", 8, 1, "gpu")
	ex := &fakeExec{n: n, agent: "a1"}
	opts := fakeOptions(t, n, ex, clk.Now)
	opts.Elector = selfNamingHolder{neverElected: neverElected{ex}, name: opts.Name}
	opts.NoLeaderGrace = 50 * time.Millisecond
	a := runTestAgent(t, opts)
	waitFor(t, "no-leader problem", func() bool {
		h := a.Health()
		return h.Status == agentapi.StatusDegraded && !h.Leader && h.LeaderName == "" && len(h.Problems) == 1 &&
			strings.Contains(h.Problems[0], "no agent has held the leader lock")
	})
}
