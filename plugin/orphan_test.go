package plugin

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestOrphanWatch(t *testing.T) {
	for _, tc := range []struct {
		name     string
		grace    time.Duration
		reattach bool
		wantExit bool
	}{
		{name: "device plugin exits once its parent is gone", grace: 0, wantExit: true},
		{name: "driver plugin exits after the grace without a client", grace: time.Minute, wantExit: true},
		{name: "driver plugin stays when a restarted client reattaches", grace: time.Minute, reattach: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ppid atomic.Int64
			ppid.Store(100)
			clk := &fakeClock{t: time.Unix(1000, 0)}
			exited := make(chan struct{})
			noticed := make(chan struct{})
			w := &orphanWatch{ppid: func() int { return int(ppid.Load()) }, interval: time.Millisecond, grace: tc.grace,
				exit: func() { close(exited) }, log: hclog.NewNullLogger(), now: clk.now, noticed: func() { close(noticed) }}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan struct{})
			go func() { defer close(done); w.run(ctx) }()

			// Parent alive: no exit however long.
			clk.add(time.Hour)
			select {
			case <-exited:
				t.Fatal("exited while its parent lives")
			case <-time.After(50 * time.Millisecond):
			}
			ppid.Store(1) // re-parented to init: the client is gone
			if tc.grace > 0 {
				<-noticed
				if tc.reattach {
					clk.add(time.Second)
					w.touch()
				}
				clk.add(2 * tc.grace)
			}
			select {
			case <-exited:
				if !tc.wantExit {
					t.Fatal("exited although a client reattached")
				}
			case <-time.After(500 * time.Millisecond):
				if tc.wantExit {
					t.Fatal("still running, orphaned")
				}
			}
		})
	}
}
