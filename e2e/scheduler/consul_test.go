package scheduler

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/impact-sched/nomad-impact/e2e/internal/nomadagent"
	"github.com/impact-sched/nomad-impact/gang"
)

// The Consul suites of issue 39 against a real Consul agent: the impact
// agents' registration heals after Consul was down during a leader change
// (persistent Consul) and after a dev Consul restarted empty, and gang
// members find the leader through Consul after both. They need a `consul`
// binary on PATH besides `nomad` (Consul is not part of this repository:
// build it outside it and put it on PATH).

// consulBinary returns the consul binary on PATH, or skips saying why.
func consulBinary(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("consul")
	if err != nil {
		t.Skip("no consul binary on PATH: the Consul e2e tests need a real Consul agent (build Consul outside the repository and put it on PATH)")
	}
	return p
}

// consulAgent is a Consul agent the test starts, stops and restarts on the
// same ports (and, unless dev, the same data dir).
type consulAgent struct {
	t    *testing.T
	bin  string
	dir  string
	dev  bool
	http int
	args []string
	proc *nomadagent.Process
}

func startConsul(t *testing.T, dev bool) *consulAgent {
	t.Helper()
	bin := consulBinary(t)
	dir := nomadagent.Dir(t, "impact-e2e-consul-")
	p := nomadagent.FreePorts(t, 4)
	c := &consulAgent{t: t, bin: bin, dir: dir, dev: dev, http: p[0]}
	c.args = []string{"agent", "-node", "impact-e2e", "-bind", "127.0.0.1", "-advertise", "127.0.0.1",
		"-client", "127.0.0.1", "-http-port", fmt.Sprint(p[0]), "-dns-port", "-1",
		"-serf-lan-port", fmt.Sprint(p[1]), "-serf-wan-port", fmt.Sprint(p[2]), "-server-port", fmt.Sprint(p[3]),
		"-hcl", "ports { grpc = -1\n grpc_tls = -1 }", "-log-level", "warn"}
	if dev {
		c.args = append(c.args, "-dev")
	} else {
		c.args = append(c.args, "-server", "-bootstrap-expect", "1", "-data-dir", filepath.Join(dir, "data"))
	}
	c.start()
	return c
}

func (c *consulAgent) addr() string { return fmt.Sprintf("127.0.0.1:%d", c.http) }

func (c *consulAgent) start() {
	c.t.Helper()
	c.proc = nomadagent.StartProcess(c.t, "consul", nil, c.bin, c.args...)
	cl := c.client()
	eventually(c.t, 60*time.Second, "consul has a leader", func() (bool, string) {
		l, err := cl.Status().Leader()
		return err == nil && l != "", fmt.Sprintf("%q %v", l, err)
	})
}

func (c *consulAgent) client() *consul.Client {
	cfg := consul.DefaultConfig()
	cfg.Address = c.addr()
	cl, err := consul.NewClient(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	return cl
}

// entries lists the impact-scheduler instances with tag ("" any): their
// ports and whether they pass.
func (c *consulAgent) entries(tag string) (map[int]string, error) {
	es, _, err := c.client().Health().Service("impact-scheduler", tag, false, nil)
	if err != nil {
		return nil, err
	}
	out := map[int]string{}
	for _, e := range es {
		out[e.Service.Port] = e.Checks.AggregatedStatus()
	}
	return out, nil
}

func portOf(url string) int {
	var p int
	_, _ = fmt.Sscanf(url[strings.LastIndex(url, ":")+1:], "%d", &p)
	return p
}

// haWithConsul starts two impact agents registered in c: impact-1 leads,
// impact-2 stands by; it returns their processes and URLs once both are
// registered and passing with their tags.
func haWithConsul(t *testing.T, e *env, c *consulAgent) ([]*nomadagent.Process, []string) {
	t.Helper()
	e.extra = fmt.Sprintf("consul {\n  address        = %q\n  check_interval = \"2s\"\n}\n", c.addr())
	ports := nomadagent.FreePorts(t, 2)
	urls := []string{fmt.Sprintf("http://127.0.0.1:%d", ports[0]), fmt.Sprintf("http://127.0.0.1:%d", ports[1])}
	p1 := e.launchImpact(t, "impact-1", urls[0])
	eventually(t, 60*time.Second, "impact-1 leads", func() (bool, string) {
		var h health
		err := getAPI(urls[0], "/v1/health", &h)
		return err == nil && h.Leader, fmt.Sprintf("%+v %v", h, err)
	})
	p2 := e.launchImpact(t, "impact-2", urls[1])
	waitTagged(t, c, map[string]int{"leader": ports[0], "standby": ports[1]}, 60*time.Second)
	return []*nomadagent.Process{p1, p2}, urls
}

// waitTagged waits until each tag has exactly the one passing instance at
// the given port, and returns how long that took.
func waitTagged(t *testing.T, c *consulAgent, want map[string]int, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	eventually(t, within, fmt.Sprintf("consul holds %v, passing", want), func() (bool, string) {
		var seen []string
		ok := true
		for tag, port := range want {
			es, err := c.entries(tag)
			if err != nil {
				return false, err.Error()
			}
			seen = append(seen, fmt.Sprintf("%s=%v", tag, es))
			ok = ok && len(es) == 1 && es[port] == consul.HealthPassing
		}
		return ok, strings.Join(seen, " ")
	})
	return time.Since(start)
}

// resolveLeader is what a gang member (impact-exec with consul_service)
// does to find the rendezvous.
func resolveLeader(t *testing.T, c *consulAgent) string {
	t.Helper()
	resolve, err := gang.ConsulResolver(c.addr(), "", "impact-scheduler", "leader")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url, err := resolve(ctx)
	if err != nil {
		t.Fatalf("gang member resolving the rendezvous: %v", err)
	}
	return url
}

func noConsulProblem(t *testing.T, url string) {
	t.Helper()
	var h struct {
		Status   string
		Problems []string
	}
	eventually(t, 30*time.Second, "health without consul problems", func() (bool, string) {
		if err := getAPI(url, "/v1/health", &h); err != nil {
			return false, err.Error()
		}
		for _, p := range h.Problems {
			if strings.Contains(p, "consul") {
				return false, p
			}
		}
		return true, ""
	})
}

// Issue 39, first failure: persistent Consul stopped; the leader stops
// (SIGINT) and its deregistration fails; the standby takes over and its
// tag change fails; Consul starts again with the same data dir. The new
// leader is retagged, the old leader's entry (restored from Consul's data
// dir, critical) is gone, and a gang member finds the new leader.
func TestConsulHealsAfterLeaderChangeWhileDown(t *testing.T) {
	consulBinary(t)
	e := setup(t, false)
	c := startConsul(t, false)
	procs, urls := haWithConsul(t, e, c)

	c.proc.Stop()
	procs[0].Stop()
	eventually(t, 60*time.Second, "impact-2 leads", func() (bool, string) {
		var h health
		err := getAPI(urls[1], "/v1/health", &h)
		return err == nil && h.Leader, fmt.Sprintf("%+v %v", h, err)
	})
	eventually(t, 30*time.Second, "impact-2's health reports the stale registration", func() (bool, string) {
		var h struct{ Problems []string }
		_ = getAPI(urls[1], "/v1/health", &h)
		for _, p := range h.Problems {
			if strings.Contains(p, "consul") {
				return true, p
			}
		}
		return false, fmt.Sprint(h.Problems)
	})

	c.start()
	healed := waitTagged(t, c, map[string]int{"leader": portOf(urls[1])}, 90*time.Second)
	eventually(t, 90*time.Second, "no entry of impact-1 left", func() (bool, string) {
		es, err := c.entries("")
		if err != nil {
			return false, err.Error()
		}
		_, left := es[portOf(urls[0])]
		return !left, fmt.Sprint(es)
	})
	t.Logf("consul healed %s after it came back: impact-2 passing with tag leader", healed.Round(100*time.Millisecond))
	if got := resolveLeader(t, c); got != urls[1] {
		t.Errorf("gang member resolved %s, want the new leader %s", got, urls[1])
	}
	noConsulProblem(t, urls[1])
}

// Issue 39, second failure: a dev Consul restarts empty. Both agents are
// registered again with their tags within a few check intervals, and a
// gang member finds the leader.
func TestConsulHealsAfterDevRestart(t *testing.T) {
	consulBinary(t)
	e := setup(t, false)
	c := startConsul(t, true)
	_, urls := haWithConsul(t, e, c)

	c.proc.Stop()
	c.start()
	healed := waitTagged(t, c, map[string]int{"leader": portOf(urls[0]), "standby": portOf(urls[1])}, 90*time.Second)
	t.Logf("consul healed %s after the dev agent restarted empty", healed.Round(100*time.Millisecond))
	if got := resolveLeader(t, c); got != urls[0] {
		t.Errorf("gang member resolved %s, want the leader %s", got, urls[0])
	}
	noConsulProblem(t, urls[0])
	noConsulProblem(t, urls[1])
}
