package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/agent/config"
	"github.com/impact-sched/nomad-impact/scheduler/internal/nomadfake"
)

// These tests run whole `impact agent` services (config -> NewService ->
// Run, the same wiring as the binary) against the in-process Nomad fake,
// over real HTTP, with the real engine and the real adapter.

const fakePolicy = `
default_tier    = "normal"
default_project = "default"
preemption {
  enabled                     = true
  min_runtime                 = "1s"
  restart_cost                = "1m"
  gain_horizon                = "1h"
  max_gpu_hours_lost_per_hour = 0
  max_per_cycle               = 4
}
gangs {
  missing_member_grace = "1s"
}
`

type fakeCluster struct {
	t    *testing.T
	fake *nomadfake.Server
	dir  string
}

// newFakeCluster starts a fake Nomad with nodes of islands x perIsland GPUs
// in pool "gpu".
func newFakeCluster(t *testing.T, nodes, islands, perIsland int) *fakeCluster {
	t.Helper()
	f := nomadfake.New(nomadfake.Options{HeartbeatInterval: 50 * time.Millisecond})
	t.Cleanup(f.Close)
	for i := 0; i < nodes; i++ {
		n, err := nomadfake.TopologyNode(fmt.Sprintf("node-%d", i), fmt.Sprintf("gpu%d", i), "gpu", islands, perIsland)
		if err != nil {
			t.Fatal(err)
		}
		f.UpsertNode(n)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.hcl"), []byte(fakePolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	return &fakeCluster{t: t, fake: f, dir: dir}
}

type service struct {
	svc    *Service
	api    *agentapi.Client
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func (s *service) stop() {
	s.once.Do(func() {
		s.cancel()
		select {
		case err := <-s.done:
			if err != nil {
				panic(fmt.Sprintf("service stopped with %v", err))
			}
		case <-time.After(20 * time.Second):
			panic("service did not stop")
		}
	})
}

// start runs one impact agent against the fake.
func (c *fakeCluster) start(name string) *service {
	c.t.Helper()
	return c.startWith(name, fmt.Sprintf("address = %q", c.fake.URL()), "")
}

// startWith runs an agent with nomadBody inside its nomad block and extra
// top-level config; more are config files merged over it (in order).
func (c *fakeCluster) startWith(name, nomadBody, extra string, more ...string) *service {
	c.t.Helper()
	src := fmt.Sprintf(`
name         = %q
policy       = "policy.hcl"
parking_pool = "impact-queue"
default_pool = "gpu"
nomad {
  %s
}
cycle {
  interval           = "200ms"
  debounce           = "10ms"
  admission_deadline = "20s"
}
http {
  listen = "127.0.0.1:0"
}
ha {
  lock_ttl = "10s"
}
`, name, nomadBody) + extra
	p := filepath.Join(c.dir, name+".hcl")
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		c.t.Fatal(err)
	}
	cfg, err := config.Load(append([]string{p}, more...), func(string) string { return "" }, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn, Output: testLogWriter{c.t}})
	svc, err := NewService(cfg, "test", logger)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &service{svc: svc, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- svc.Run(ctx) }()
	c.t.Cleanup(s.stop)
	select {
	case <-svc.Listening():
	case err := <-s.done:
		c.t.Fatalf("service exited: %v", err)
	case <-time.After(5 * time.Second):
		c.t.Fatal("service not listening")
	}
	if !cfg.HTTP.TLS() {
		s.api, err = agentapi.NewClient(svc.Addr(), nil)
		if err != nil {
			c.t.Fatal(err)
		}
	}
	return s
}

type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// submit registers a job in the parking pool the way `nomad job run` does,
// through the HTTP API (the agent's tests do not import nomad/api).
func (c *fakeCluster) submit(id string, meta map[string]string, count, gpus int) {
	c.t.Helper()
	job := map[string]any{
		"ID": id, "Name": id, "Type": "batch", "Namespace": "default", "Region": "global", "Priority": 50,
		"NodePool": "impact-queue", "Meta": meta,
		"TaskGroups": []any{map[string]any{
			"Name": "g", "Count": count,
			"Tasks": []any{map[string]any{
				"Name": "trainer", "Driver": "raw_exec",
				"Resources": map[string]any{"Devices": []any{map[string]any{"Name": "nvidia/gpu", "Count": gpus}}},
			}},
		}},
	}
	body, _ := json.Marshal(map[string]any{"Job": job})
	resp, err := http.Post(c.fake.URL()+"/v1/jobs", "application/json", bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		c.t.Fatalf("register %s: HTTP %d", id, resp.StatusCode)
	}
}

// ensurePool creates the parking pool (for jobs parked before any agent
// starts; the agent creates it too).
func (c *fakeCluster) ensurePool() {
	c.t.Helper()
	body := `{"Name":"impact-queue","Description":"parking"}`
	resp, err := http.Post(c.fake.URL()+"/v1/node/pools", "application/json", strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		c.t.Fatalf("creating pool: HTTP %d", resp.StatusCode)
	}
}

func (c *fakeCluster) pool(id string) string {
	j := c.fake.Job(id)
	if j == nil || j.NodePool == nil {
		return ""
	}
	return *j.NodePool
}

// running counts the job's running allocations.
func (c *fakeCluster) running(id string) int {
	n := 0
	for _, a := range c.fake.Allocations(id) {
		if a.ClientStatus == "running" && a.DesiredStatus == "run" {
			n++
		}
	}
	return n
}

// admissions counts the registrations of a job after the user's submit:
// every register bumps the job's Version (the submit makes version 0), so
// for a job never preempted this is the number of admissions.
func (c *fakeCluster) admissions(id string) int {
	j := c.fake.Job(id)
	if j == nil || j.Version == nil {
		return 0
	}
	return int(*j.Version)
}

func (c *fakeCluster) finish(id string) {
	c.t.Helper()
	for _, a := range c.fake.Allocations(id) {
		if a.ClientStatus == "running" {
			if err := c.fake.FinishAlloc(a.ID, false); err != nil {
				c.t.Fatal(err)
			}
		}
	}
}

func eventuallyT(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, info := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (last: %s)", what, d, info)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFakeNomadImpactOrder(t *testing.T) {
	c := newFakeCluster(t, 1, 1, 4)
	c.ensurePool()
	c.submit("sweep", map[string]string{"impact_tier": "scavenger"}, 1, 4)
	c.submit("finetune", map[string]string{"impact_tier": "normal"}, 1, 4)
	c.submit("paper", map[string]string{"impact_tier": "high"}, 1, 4)
	s := c.start("a1")
	for _, id := range []string{"paper", "finetune", "sweep"} {
		eventuallyT(t, 10*time.Second, id+" running in pool gpu", func() (bool, string) {
			return c.running(id) == 1 && c.pool(id) == "gpu",
				fmt.Sprintf("paper=%s finetune=%s sweep=%s", c.pool("paper"), c.pool("finetune"), c.pool("sweep"))
		})
		for _, other := range []string{"paper", "finetune", "sweep"} {
			if other != id && c.running(other) != 0 {
				t.Fatalf("%s runs beside %s on a 4-GPU cluster", other, id)
			}
		}
		c.finish(id)
	}
	for _, id := range []string{"paper", "finetune", "sweep"} {
		if n := c.admissions(id); n != 1 {
			t.Errorf("%s admitted %d times", id, n)
		}
	}
	q, err := s.api.Queue(context.Background())
	if err != nil || !q.Leader || q.Cluster.HealthyGPUs != 4 {
		t.Errorf("queue over HTTP: %+v %v", q, err)
	}
}

func TestFakeNomadGangAdmittedWhole(t *testing.T) {
	c := newFakeCluster(t, 2, 1, 4)
	s := c.start("a1")
	// Submitted after the agent created the pool.
	eventuallyT(t, 5*time.Second, "parking pool", func() (bool, string) {
		resp, err := http.Get(c.fake.URL() + "/v1/node/pool/impact-queue")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, fmt.Sprint(resp.StatusCode)
	})
	c.submit("gang", map[string]string{"impact_tier": "high"}, 2, 4)
	eventuallyT(t, 10*time.Second, "both members running", func() (bool, string) {
		return c.running("gang") == 2, fmt.Sprintf("%d running", c.running("gang"))
	})
	as := c.fake.Allocations("gang")
	nodes := map[string]bool{}
	for _, a := range as {
		nodes[a.NodeID] = true
	}
	if len(as) != 2 || len(nodes) != 2 || as[0].EvalID != as[1].EvalID {
		t.Errorf("gang not placed whole by one evaluation on two nodes: %d allocs on %v", len(as), nodes)
	}
	if n := c.admissions("gang"); n != 1 {
		t.Errorf("gang admitted %d times", n)
	}
	// The task driver's rendezvous is served under /v1/gang/, wants the
	// member's workload identity (signed by Nomad, checked against its
	// JWKS) and learns the gang's size (2 allocations) from the agent's
	// model.
	join := `{"size":0,"namespace":"default","job_id":"gang","alloc_id":"` + as[0].ID +
		`","task":"trainer","node_id":"` + as[0].NodeID + `","addr":"127.0.0.1","port":29500}`
	put := func(token string) *http.Response {
		req, _ := http.NewRequest(http.MethodPut, "http://"+s.svc.Addr()+"/v1/gang/default:gang/members/"+as[0].ID+".trainer", strings.NewReader(join))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	other, err := c.fake.SignIdentity(as[1].ID, "trainer", []string{"impact"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for tok, code := range map[string]int{"": http.StatusUnauthorized, other: http.StatusForbidden} {
		if resp := put(tok); resp.StatusCode != code {
			t.Errorf("join without the member's own identity: HTTP %d, want %d", resp.StatusCode, code)
		}
	}
	own, err := c.fake.SignIdentity(as[0].ID, "trainer", []string{"impact"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	resp := put(own)
	var st struct {
		Size    int    `json:"size"`
		Arrived int    `json:"arrived"`
		State   string `json:"state"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if resp.StatusCode != 200 || st.Size != 2 || st.Arrived != 1 || st.State != "forming" {
		t.Errorf("gang join through the agent: HTTP %d %+v, want size 2 resolved from the job", resp.StatusCode, st)
	}
}

func TestFakeNomadCriticalPreemptsScavenger(t *testing.T) {
	c := newFakeCluster(t, 1, 1, 4)
	s := c.start("a1")
	eventuallyT(t, 5*time.Second, "leader", func() (bool, string) { return s.svc.Agent.IsLeader(), "" })
	c.submit("sweep", map[string]string{"impact_tier": "scavenger", "impact_checkpoint_signal": "SIGUSR1", "impact_grace": "1s"}, 1, 4)
	eventuallyT(t, 10*time.Second, "scavenger running", func() (bool, string) { return c.running("sweep") == 1, "" })
	time.Sleep(1100 * time.Millisecond) // past the policy's min runtime
	c.submit("incident", map[string]string{"impact_tier": "critical"}, 1, 4)
	eventuallyT(t, 20*time.Second, "critical running", func() (bool, string) {
		return c.running("incident") == 1, fmt.Sprintf("incident=%d sweep=%d pool(sweep)=%s", c.running("incident"), c.running("sweep"), c.pool("sweep"))
	})
	var sig []string
	for _, r := range c.fake.Signals() {
		sig = append(sig, r.Signal)
	}
	if len(sig) == 0 || sig[0] != "SIGUSR1" {
		t.Errorf("signals delivered %v, want the scavenger's SIGUSR1 first", sig)
	}
	if p := c.pool("sweep"); p != "impact-queue" || c.running("sweep") != 0 {
		t.Errorf("scavenger in pool %q with %d running allocations, want parked again", p, c.running("sweep"))
	}
	eventuallyT(t, 10*time.Second, "explain variable of the requeued scavenger", func() (bool, string) {
		v := c.fake.Variable("nomad/jobs/sweep/impact")
		return v != nil && v["position"] == "1" && v["tier"] == "scavenger", fmt.Sprint(v)
	})
	e, err := s.api.Explain(context.Background(), "", "sweep")
	if err != nil || e.State != agentapi.StateWaiting || e.PreemptedBy != "default/incident" {
		t.Errorf("explain sweep: %+v %v", e, err)
	}
}

func TestFakeNomadBadMetaStaysParked(t *testing.T) {
	c := newFakeCluster(t, 1, 1, 4)
	s := c.start("a1")
	eventuallyT(t, 5*time.Second, "leader", func() (bool, string) { return s.svc.Agent.IsLeader(), "" })
	c.submit("typo", map[string]string{"impact_tier": "urgent", "impact_grace": "soon"}, 1, 1)
	eventuallyT(t, 10*time.Second, "typo explained as invalid", func() (bool, string) {
		e, err := s.api.Explain(context.Background(), "", "typo")
		return err == nil && e.State == agentapi.StateInvalid && len(e.Errors) > 0, fmt.Sprintf("%+v %v", e, err)
	})
	eventuallyT(t, 10*time.Second, "typo variable", func() (bool, string) {
		v := c.fake.Variable("nomad/jobs/typo/impact")
		return v != nil && v["state"] == agentapi.StateInvalid && strings.Contains(v["errors"], "impact_grace") && strings.HasPrefix(v["summary"], "Cannot be scheduled"), fmt.Sprint(v)
	})
	waitCycles(t, 3, s.svc.Agent)
	if c.admissions("typo") != 0 || c.pool("typo") != "impact-queue" {
		t.Error("a job with bad meta left the parking pool")
	}
}

func TestFakeNomadFailoverWithoutDoubleAdmission(t *testing.T) {
	c := newFakeCluster(t, 1, 2, 4)
	a1 := c.start("a1")
	a2 := c.start("a2")
	eventuallyT(t, 10*time.Second, "one leader", func() (bool, string) {
		l1, l2 := a1.svc.Agent.IsLeader(), a2.svc.Agent.IsLeader()
		return l1 != l2, fmt.Sprintf("a1=%v a2=%v", l1, l2)
	})
	leader, standby := a1, a2
	if a2.svc.Agent.IsLeader() {
		leader, standby = a2, a1
	}
	c.submit("first", map[string]string{"impact_tier": "high"}, 1, 4)
	eventuallyT(t, 10*time.Second, "first running", func() (bool, string) { return c.running("first") == 1, "" })
	// The standby serves the same view without acting.
	eventuallyT(t, 5*time.Second, "standby view", func() (bool, string) {
		e, err := standby.api.Explain(context.Background(), "", "first")
		return err == nil && e.State == agentapi.StateRunning && !e.Leader, fmt.Sprintf("%+v %v", e, err)
	})
	h, err := standby.api.Health(context.Background())
	if err != nil || h.Leader || h.Status != agentapi.StatusOK {
		t.Errorf("standby health: %+v %v", h, err)
	}

	leader.stop()
	eventuallyT(t, 15*time.Second, "standby takes over", func() (bool, string) { return standby.svc.Agent.IsLeader(), "" })
	c.submit("second", map[string]string{"impact_tier": "normal"}, 1, 4)
	eventuallyT(t, 10*time.Second, "second running", func() (bool, string) { return c.running("second") == 1, "" })
	waitCycles(t, 3, standby.svc.Agent)
	for _, id := range []string{"first", "second"} {
		if n := c.admissions(id); n != 1 {
			t.Errorf("%s admitted %d times", id, n)
		}
		if n := len(c.fake.Allocations(id)); n != 1 {
			t.Errorf("%s has %d allocations, want 1", id, n)
		}
	}
	usage := c.fake.Variable("impact/state/usage")
	if usage == nil || usage["at"] == "" {
		t.Errorf("durable usage not saved: %v", usage)
	}
	// The lock names the new leader.
	var holders []string
	for k, v := range c.fake.Variable("impact/leader") {
		holders = append(holders, k+"="+v)
	}
	sort.Strings(holders)
	if !strings.Contains(strings.Join(holders, ","), standby.svc.Agent.opts.Name) {
		t.Errorf("lock holder %v, want %s", holders, standby.svc.Agent.opts.Name)
	}
}

// TestFakeNomadStreamDrop: the event stream drops repeatedly; the agent
// reconnects and keeps scheduling, and nothing is admitted twice.
func TestFakeNomadStreamDrop(t *testing.T) {
	c := newFakeCluster(t, 1, 2, 4)
	s := c.start("a1")
	eventuallyT(t, 5*time.Second, "leader", func() (bool, string) { return s.svc.Agent.IsLeader(), "" })
	c.submit("one", map[string]string{"impact_tier": "high"}, 1, 4)
	eventuallyT(t, 10*time.Second, "one running", func() (bool, string) { return c.running("one") == 1, "" })
	// Three drops, each after the watcher has reconnected from the last.
	w := s.svc.Agent.opts.Model.(*watcherModel).w
	for i := 0; i < 3; i++ {
		eventuallyT(t, 10*time.Second, "stream connected", func() (bool, string) {
			st := w.Stats()
			return st.Connected, fmt.Sprintf("%+v", st)
		})
		r0 := w.Stats().Reconnects
		c.fake.DropStreams()
		eventuallyT(t, 10*time.Second, "the drop seen", func() (bool, string) {
			st := w.Stats()
			return st.Reconnects > r0, fmt.Sprintf("%+v", st)
		})
	}
	c.submit("two", map[string]string{"impact_tier": "normal"}, 1, 4)
	eventuallyT(t, 10*time.Second, "two running after the drops", func() (bool, string) { return c.running("two") == 1, "" })
	waitCycles(t, 3, s.svc.Agent)
	for _, id := range []string{"one", "two"} {
		if n := c.admissions(id); n != 1 {
			t.Errorf("%s admitted %d times", id, n)
		}
	}
	h, err := s.api.Health(context.Background())
	if err != nil || h.Status != agentapi.StatusOK {
		t.Errorf("health after reconnects: %+v %v", h, err)
	}
}

// A 2-node gang whose node goes down (its member lost, Nomad's
// replacement blocked by the admission's pins) is requeued whole once the
// policy's missing_member_grace passes, and admitted again whole on nodes
// that are up: never left half-placed, never a replacement beside peers
// of an older generation.
func TestFakeNomadGangLosingANodeIsRequeuedWhole(t *testing.T) {
	c := newFakeCluster(t, 3, 1, 4)
	c.ensurePool()
	c.submit("gang", map[string]string{"impact_tier": "high"}, 2, 4)
	s := c.start("a1")
	var first []string
	eventuallyT(t, 10*time.Second, "both members running", func() (bool, string) {
		first = first[:0]
		for _, a := range c.fake.Allocations("gang") {
			if a.ClientStatus == "running" {
				first = append(first, a.NodeID)
			}
		}
		return len(first) == 2, fmt.Sprintf("%d running", len(first))
	})
	// The admission is complete (its intent gone) before the node fails:
	// a member lost during admission is the admission deadline's to roll
	// back, not the gang watch's.
	eventuallyT(t, 5*time.Second, "admission intent settled", func() (bool, string) {
		v := c.fake.Variable("impact/state/intents/default/gang")
		return v == nil, fmt.Sprint(v)
	})
	lostNode := first[0]
	if err := c.fake.SetNodeStatus(lostNode, "down", false); err != nil {
		t.Fatal(err)
	}
	eventuallyT(t, 20*time.Second, "gang running whole again on nodes that are up", func() (bool, string) {
		var nodes []string
		for _, a := range c.fake.Allocations("gang") {
			if a.ClientStatus == "running" && a.DesiredStatus == "run" {
				nodes = append(nodes, a.NodeID)
			}
		}
		ok := len(nodes) == 2 && nodes[0] != lostNode && nodes[1] != lostNode && c.pool("gang") == "gpu"
		ex, _ := s.api.Explain(context.Background(), "default", "gang")
		return ok, fmt.Sprintf("running on %v (lost %s), pool %s; explain %s: %s", nodes, lostNode, c.pool("gang"), ex.State, ex.Reason)
	})
	// The new generation runs alone: every allocation of the first one
	// ended (the survivor was stopped, not left beside the new members).
	for _, a := range c.fake.Allocations("gang") {
		if a.PreviousAllocation != "" && a.ClientStatus == "running" {
			t.Errorf("Nomad's replacement %s runs beside the new gang", a.ID)
		}
	}
	if n := c.admissions("gang"); n < 2 {
		t.Errorf("job registered %d times after submit; want the admission, the requeue's park and a second admission", n)
	}
	body := scrape(t, s.svc.Agent)
	if !strings.Contains(body, "impact_gangs_requeued_total 1") {
		t.Errorf("metrics do not count one requeue:\n%s", body)
	}
}

// A user who re-submits a running managed job (`nomad job run` again, a
// new version in the parking pool) gets Nomad's destructive update through
// the queue: the old version's allocation is stopped, the new version
// waits its turn and is admitted; only the new version runs afterwards.
func TestFakeNomadUserUpdateOfRunningJob(t *testing.T) {
	c := newFakeCluster(t, 1, 1, 4)
	c.ensurePool()
	c.submit("u", map[string]string{"impact_tier": "normal", "impact_project": "a"}, 1, 4)
	s := c.start("a1")
	var old string
	eventuallyT(t, 10*time.Second, "v0 running", func() (bool, string) {
		for _, a := range c.fake.Allocations("u") {
			if a.ClientStatus == "running" {
				old = a.ID
			}
		}
		return old != "", fmt.Sprint(len(c.fake.Allocations("u")))
	})
	c.submit("u", map[string]string{"impact_tier": "normal", "impact_project": "b"}, 1, 4)
	eventuallyT(t, 15*time.Second, "the new version running alone", func() (bool, string) {
		j := c.fake.Job("u")
		var running []string
		for _, a := range c.fake.Allocations("u") {
			if a.ClientStatus == "running" && a.DesiredStatus == "run" {
				running = append(running, a.ID)
			}
		}
		ex, _ := s.api.Explain(context.Background(), "default", "u")
		ok := len(running) == 1 && running[0] != old && c.pool("u") == "gpu" && j.Meta["impact_project"] == "b"
		return ok, fmt.Sprintf("running %v (old %s), pool %s; explain %s: %s", running, old, c.pool("u"), ex.State, ex.Reason)
	})
	for _, a := range c.fake.Allocations("u") {
		if a.ID == old && a.ClientStatus == "running" {
			t.Errorf("old version's allocation %s still running", old)
		}
	}
	// A user's update is not an incomplete gang.
	if body := scrape(t, s.svc.Agent); !strings.Contains(body, "impact_gangs_requeued_total 0") {
		t.Errorf("an update counted as a gang requeue")
	}
}

// A gang whose member fails every time it runs is requeued whole each
// time, but from the second requeue in a row it is held back with a
// doubling back-off instead of being re-admitted in a loop.
func TestFakeNomadFailingGangBacksOff(t *testing.T) {
	c := newFakeCluster(t, 2, 1, 4)
	c.ensurePool()
	c.submit("crashy", map[string]string{"impact_tier": "high"}, 2, 4)
	s := c.start("a1")
	failOne := func(round int) {
		t.Helper()
		var ids []string
		eventuallyT(t, 15*time.Second, fmt.Sprintf("round %d: both members running, admission settled", round), func() (bool, string) {
			ids = ids[:0]
			for _, a := range c.fake.Allocations("crashy") {
				if a.ClientStatus == "running" && a.DesiredStatus == "run" {
					ids = append(ids, a.ID)
				}
			}
			v := c.fake.Variable("impact/state/intents/default/crashy")
			return len(ids) == 2 && v == nil, fmt.Sprintf("%d running, intent %v", len(ids), v)
		})
		if err := c.fake.FinishAlloc(ids[0], true); err != nil {
			t.Fatal(err)
		}
	}
	failOne(1)
	failOne(2)
	eventuallyT(t, 15*time.Second, "held back after the second requeue", func() (bool, string) {
		ex, _ := s.api.Explain(context.Background(), "default", "crashy")
		return ex.State == "waiting" && strings.Contains(ex.Reason, "requeued 2 times in a row"), ex.State + ": " + ex.Reason
	})
}
