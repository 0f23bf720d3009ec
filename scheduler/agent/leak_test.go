package agent

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// ownGoroutines lists the goroutines running code of the agent, the Nomad
// adapter or the gang registry (not the Nomad fake, not this test).
func ownGoroutines(self string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, self) {
			continue
		}
		for _, pkg := range []string{"nomad-impact/scheduler/agent.", "nomad-impact/scheduler/nomad.", "nomad-impact/gang."} {
			if strings.Contains(g, pkg) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// A stopped service leaves no goroutine behind: watcher, elector, stats
// poll, background actions, HTTP server, all end with Run.
func TestServiceStopsAllGoroutines(t *testing.T) {
	// An earlier test's goroutine may still be exiting (it sent its
	// result, its test's cleanup went on): wait for it, briefly.
	eventuallyT(t, 2*time.Second, "no goroutines left by earlier tests", func() (bool, string) {
		left := ownGoroutines("agent.TestServiceStopsAllGoroutines")
		return len(left) == 0, strings.Join(left, "\n\n")
	})
	c := newFakeCluster(t, 1, 2, 4)
	s := c.startWith("leak", fmt.Sprintf("address = %q", c.fake.URL()), "device_stats {\n  interval = \"50ms\"\n  node_timeout = \"50ms\"\n}\n")
	eventuallyT(t, 10*time.Second, "leader", func() (bool, string) { return s.svc.Agent.IsLeader(), "" })
	c.submit("sweep", map[string]string{"impact_tier": "scavenger", "impact_checkpoint_signal": "SIGUSR1", "impact_grace": "30s"}, 1, 4)
	eventuallyT(t, 10*time.Second, "running", func() (bool, string) { return c.running("sweep") == 1, "" })
	if _, err := s.api.Queue(context.Background()); err != nil {
		t.Fatal(err)
	}
	if running := ownGoroutines("agent.TestServiceStopsAllGoroutines"); len(running) < 3 {
		t.Fatalf("the check sees only %d goroutines of a running service", len(running))
	}
	s.stop()
	var left []string
	eventuallyT(t, 5*time.Second, "no goroutines left after Run returned", func() (bool, string) {
		left = ownGoroutines("agent.TestServiceStopsAllGoroutines")
		return len(left) == 0, fmt.Sprintf("%d left:\n%s", len(left), strings.Join(left, "\n\n"))
	})
}

// A port clash fails Run at once, with the address in the error, and does
// not leave a caller waiting on Listening forever.
func TestServicePortClash(t *testing.T) {
	c := newFakeCluster(t, 1, 1, 4)
	first := c.start("first")
	cfg := *first.svc.Config
	cfg.Name = "second"
	cfg.HTTP.Listen = first.svc.Addr()
	svc, err := NewService(&cfg, "test", hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(context.Background()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "http listen "+cfg.HTTP.Listen) {
			t.Errorf("Run: %v, want the listen error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not fail on a port in use")
	}
	select {
	case <-svc.Listening():
	default:
		t.Fatal("Listening not closed after the listen failure")
	}
	if a := svc.Addr(); a != "" {
		t.Errorf("Addr %q after a failed listen", a)
	}
}
