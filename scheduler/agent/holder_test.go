package agent

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
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
