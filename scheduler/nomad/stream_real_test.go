package nomad

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// cutProxy forwards TCP to a Nomad agent; cut drops every open connection
// at once, as a network failure does.
type cutProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l, target: target}
	t.Cleanup(func() { l.Close(); p.cut() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// directEvents reads a real agent's whole event buffer (from index 0).
func directEvents(t *testing.T, addr string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", addr+"/v1/event/stream?index=0&namespace=*&"+topics, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var b struct {
			Events []struct {
				Topic, Type, Key string
				Index            uint64
			}
		}
		if json.Unmarshal(sc.Bytes(), &b) != nil {
			continue
		}
		for _, e := range b.Events {
			out[fmt.Sprintf("%d/%s/%s/%s", e.Index, e.Topic, e.Type, e.Key)]++
		}
	}
	return out
}

// TestRealNomadStreamDropsAndRestart: against a real dev agent behind a
// proxy that cuts connections, the watcher applies every event of Nomad's
// stream exactly once; after the agent restarts with fresh state on the
// same address, the watcher resyncs to the new state. Skipped without a
// nomad binary on PATH.
func TestRealNomadStreamDropsAndRestart(t *testing.T) {
	bin, err := exec.LookPath("nomad")
	if err != nil {
		t.Skip("no nomad binary on PATH")
	}
	agent := startDevAgentWith(t, bin, agentDir(t), "")
	proxy := newCutProxy(t, fmt.Sprintf("127.0.0.1:%d", agent.ports[0]))
	viaProxy, err := NewClient(Config{Address: "http://" + proxy.l.Addr().String()}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	direct, err := NewClient(Config{Address: agent.addr}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := direct.EnsureNodePool(ctx, parking, "parking"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	applied := map[string]int{}
	w := NewWatcher(viaProxy, WatcherConfig{ParkingPool: parking, MinBackoff: 20 * time.Millisecond, MaxBackoff: 500 * time.Millisecond,
		onBatch: func(_ uint64, evs []appliedEvent) {
			mu.Lock()
			for _, e := range evs {
				applied[fmt.Sprintf("%d/%s/%s/%s", e.Index, e.Topic, e.Type, e.Key)]++
			}
			mu.Unlock()
		}}, testLogger(t))
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(wctx) }()
	defer func() { cancel(); <-done }()
	<-w.Ready()

	for i := 0; i < 6; i++ {
		job := scenarioJob(fmt.Sprintf("drop-%d", i))
		if _, _, err := direct.api.Jobs().Register(job, nil); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			proxy.cut()
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitModel := func(what string, cond func(*cluster.Snapshot) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond(w.Snapshot()) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out: %s (stats %+v)", what, w.Stats())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitModel("six parked jobs", func(s *cluster.Snapshot) bool { return s.NumJobs() == 6 })
	want := directEvents(t, agent.addr)
	var last uint64
	for k := range want {
		var idx uint64
		fmt.Sscanf(k, "%d/", &idx)
		last = max(last, idx)
	}
	for deadline := time.Now().Add(10 * time.Second); w.Stats().LastIndex < last; {
		if time.Now().After(deadline) {
			t.Fatalf("watcher at %d, Nomad's last event %d", w.Stats().LastIndex, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := w.Stats()
	if st.Reconnects < 3 {
		t.Errorf("reconnects = %d, want at least 3 (the proxy cut the stream 3 times)", st.Reconnects)
	}
	mu.Lock()
	for k, n := range want {
		if applied[k] != n {
			t.Errorf("event %s applied %d times, Nomad sent it %d times", k, applied[k], n)
		}
	}
	for k := range applied {
		if want[k] == 0 {
			t.Errorf("applied %s, which Nomad's buffer does not have", k)
		}
	}
	t.Logf("real agent: %d events, applied once each across %d reconnects, %d resyncs", len(want), st.Reconnects, st.Resyncs)
	mu.Unlock()

	// The agent restarts with fresh state on the same address.
	resyncs := w.Stats().Resyncs
	agent.stop()
	agent2 := startDevAgentOn(t, bin, agentDir(t), "", agent.ports)
	direct2, err := NewClient(Config{Address: agent2.addr}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := direct2.EnsureNodePool(ctx, parking, "parking"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := direct2.api.Jobs().Register(scenarioJob("after-restart"), nil); err != nil {
		t.Fatal(err)
	}
	waitModel("the restarted agent's state", func(s *cluster.Snapshot) bool {
		_, ok := s.Job(cluster.JobKey("default", "after-restart"))
		return ok && s.NumJobs() == 1
	})
	if w.Stats().Resyncs <= resyncs {
		t.Errorf("no resync after the restart")
	}
	t.Logf("after restart: model has only the new agent's job; resyncs %d -> %d", resyncs, w.Stats().Resyncs)
}
