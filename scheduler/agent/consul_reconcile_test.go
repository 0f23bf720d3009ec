package agent

import (
	"context"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// consulAgent runs an agent named name against n, registered in the fake
// Consul with a check (and so reconciliation) interval of 50ms.
func consulAgent(t *testing.T, n *fakeNomad, srv *httptest.Server, name string) *runningAgent {
	t.Helper()
	r, err := NewRegistrar(ConsulConfig{Address: strings.TrimPrefix(srv.URL, "http://"), ServiceName: "impact-scheduler",
		ServiceID: "impact-scheduler-" + name, Advertise: "127.0.0.1:4680", CheckInterval: "50ms"},
		hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	ex := &fakeExec{n: n, agent: name}
	opts := fakeOptions(t, n, ex, time.Now)
	opts.Registrar = r
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ra := &runningAgent{a: a, exec: ex, cancel: cancel, done: make(chan error, 1)}
	go func() { ra.done <- a.Run(ctx) }()
	t.Cleanup(ra.stop)
	return ra
}

func consulProblem(a *Agent) string {
	for _, p := range a.Health().Problems {
		if strings.Contains(p, "consul") {
			return p
		}
	}
	return ""
}

// Issue 39's first failure: Consul is down while the leadership changes.
// The new leader's tag change fails; once Consul is back the reconciler
// retags it (the old leader's entry, critical and still tagged leader, is
// removed), and health reports the stale tag meanwhile.
func TestConsulTagRepairedAfterOutage(t *testing.T) {
	fc := newFakeConsul()
	srv := httptest.NewServer(fc)
	defer srv.Close()
	n := newFakeNomad(time.Now)
	a1 := consulAgent(t, n, srv, "a1")
	waitFor(t, "a1 leads", a1.a.IsLeader)
	a2 := consulAgent(t, n, srv, "a2")
	waitFor(t, "both registered", func() bool {
		return slices.Equal(fc.tags("impact-scheduler-a1"), []string{"leader"}) &&
			slices.Equal(fc.tags("impact-scheduler-a2"), []string{"standby"})
	})

	fc.setDown(true)
	a1.stop() // its deregistration fails: its entry stays, tagged leader
	waitFor(t, "a2 leads", a2.a.IsLeader)
	waitFor(t, "health reports the stale tag", func() bool {
		return strings.Contains(consulProblem(a2.a), "tag leader not yet in consul")
	})
	waitFor(t, "in-sync gauge 0 while Consul is down", func() bool {
		v, ok := metricValue(scrape(t, a2.a), "impact_consul_registration_in_sync")
		return ok && v == 0
	})

	fc.mu.Lock()
	fc.down = false
	fc.status["impact-scheduler-a1"] = "critical" // nothing answers its check
	fc.mu.Unlock()
	waitFor(t, "a2 retagged leader", func() bool {
		return slices.Equal(fc.tags("impact-scheduler-a2"), []string{"leader"})
	})
	waitFor(t, "the dead leader's entry removed", func() bool { return fc.tags("impact-scheduler-a1") == nil })
	waitFor(t, "health clear", func() bool { return consulProblem(a2.a) == "" })
	waitFor(t, "the repair counted, in sync", func() bool {
		out := scrape(t, a2.a)
		rep, _ := metricValue(out, `impact_consul_registration_repairs_total{reason="tag"}`)
		in, _ := metricValue(out, "impact_consul_registration_in_sync")
		return rep >= 1 && in == 1
	})
}

// Issue 39's second failure: a dev Consul restarts empty. Both agents
// register again, with their tags, within a few check intervals; the
// registration says passing at once when the agent is healthy, so gang
// members find the leader without waiting for Consul's first probe.
func TestConsulReregistersAfterRestart(t *testing.T) {
	fc := newFakeConsul()
	srv := httptest.NewServer(fc)
	defer srv.Close()
	n := newFakeNomad(time.Now)
	a1 := consulAgent(t, n, srv, "a1")
	waitFor(t, "a1 leads", a1.a.IsLeader)
	a2 := consulAgent(t, n, srv, "a2")
	// Registered as wanted, a1's leader tag included: a1 registers
	// (tagged standby) before its new term's tag update, and that update,
	// sent after the restart below, restored the service with no repair
	// to count.
	waitFor(t, "both registered with their tags", func() bool {
		return slices.Equal(fc.tags("impact-scheduler-a1"), []string{"leader"}) &&
			slices.Equal(fc.tags("impact-scheduler-a2"), []string{"standby"})
	})
	waitFor(t, "both healthy", func() bool {
		return a1.a.Health().Status == "ok" && a2.a.Health().Status == "ok"
	})

	fc.restartEmpty()
	waitFor(t, "registered again with their tags", func() bool {
		return slices.Equal(fc.tags("impact-scheduler-a1"), []string{"leader"}) &&
			slices.Equal(fc.tags("impact-scheduler-a2"), []string{"standby"})
	})
	fc.mu.Lock()
	st := fc.status["impact-scheduler-a1"]
	fc.mu.Unlock()
	if st != "passing" {
		t.Errorf("re-registered leader's check %q, want passing at once", st)
	}
	// A pass that read the service before the restart and its checks
	// after finds the check missing rather than the service: either
	// counts the repair.
	waitFor(t, "the repair counted", func() bool {
		out := scrape(t, a1.a)
		missing, _ := metricValue(out, `impact_consul_registration_repairs_total{reason="missing"}`)
		check, _ := metricValue(out, `impact_consul_registration_repairs_total{reason="check"}`)
		return missing+check >= 1
	})
}
