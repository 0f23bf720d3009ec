package scheduler

// Whole gangs for their whole life, on a real multi-node Nomad cluster:
// one server and three client processes (each its own data dir, ports and
// fake topology of 8 GPUs with distinct UUIDs), the impact agent from the
// repository. TestLifecycle runs, in order and on one cluster:
//
//   - purge: a running job stopped with -purge gives its GPUs back at once
//     (a waiting job is admitted within a few cycles, not at the 10-minute
//     resync);
//   - grace: a preempted job that exits 0 on its checkpoint signal is done:
//     it completes once and is never run again;
//   - minimal: a 2x8 critical gang where the greedy victim search would take
//     a 2x8 and a 2x4 scavenger gang preempts the 2x8 alone;
//   - update: re-submitting a running job stops the old version and runs
//     the new one alone (destructive update through the queue);
//   - node loss: SIGKILL of a client under a 2-node gang requeues the gang
//     whole; it runs again whole on the nodes that are up.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/e2e/internal/nomadagent"
)

// lcJob is a batch job of one group "g" for the lifecycle suite: count
// allocations of gpus GPUs each; on SIGUSR1 the task runs onSignal (a
// shell command: "exit 0", "exit 75", "true"), on SIGTERM it exits 0.
type lcJob struct {
	name, tier  string
	count, gpus int
	onSignal    string
	meta        map[string]string
}

func (j lcJob) hcl() string {
	meta := map[string]string{"impact_tier": j.tier, "impact_checkpoint_signal": "SIGUSR1", "impact_grace": "5s"}
	for k, v := range j.meta {
		meta[k] = v
	}
	onSignal := j.onSignal
	if onSignal == "" {
		onSignal = "true"
	}
	script := fmt.Sprintf(`trap '%s' USR1; trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done`, onSignal)
	return parkedGPUJob(j.name, meta, j.count, j.gpus, script)
}

type lcAlloc struct {
	ID, NodeID, ClientStatus, DesiredStatus string
	JobVersion                              uint64
}

type lcEnv struct {
	*env
	c *nomadagent.Cluster
	// impactProc is the impact agent setupCluster started.
	impactProc *nomadagent.Process
}

func (e *lcEnv) runJob(j lcJob) { runHCL(e.t, e.a, e.dir, j.name, j.hcl()) }

func (e *lcEnv) allocsOf(name string) []lcAlloc {
	var out []lcAlloc
	_ = e.a.Get("/v1/job/"+name+"/allocations?all=true", &out)
	return out
}

// running lists the job's running allocations (desired run).
func (e *lcEnv) running(name string) []lcAlloc {
	var out []lcAlloc
	for _, a := range e.allocsOf(name) {
		if a.ClientStatus == "running" && a.DesiredStatus == "run" {
			out = append(out, a)
		}
	}
	return out
}

func (e *lcEnv) waitRunningN(name string, n int, d time.Duration) []lcAlloc {
	e.t.Helper()
	var rs []lcAlloc
	eventually(e.t, d, fmt.Sprintf("%s: %d allocations running", name, n), func() (bool, string) {
		rs = e.running(name)
		return len(rs) == n, fmt.Sprintf("%+v; explain %s", e.allocsOf(name), e.explain(name))
	})
	return rs
}

// engineExplain is the part of /v1/explain/<job> that tests reading the
// engine's own explanation (status, reason, gathered allocations) use.
type engineExplain struct {
	State, Decision, Summary, Reason string
	Engine                           *struct {
		Status   string
		Reason   string
		Gathered int
	}
}

func (g engineExplain) String() string {
	if g.Engine == nil {
		return fmt.Sprintf("%s/%s: %s (no engine explanation)", g.State, g.Decision, g.Reason)
	}
	return fmt.Sprintf("%s/%s engine %s gathered %d: %s [%s]", g.State, g.Decision, g.Engine.Status, g.Engine.Gathered, g.Reason, g.Summary)
}

// explainEngine reads the job's /v1/explain (a failed read leaves its
// error as the reason).
func (e *lcEnv) explainEngine(name string) engineExplain {
	var ex engineExplain
	if err := getAPI(e.apiURL, "/v1/explain/"+name, &ex); err != nil {
		ex.Reason = err.Error()
	}
	return ex
}

func (e *lcEnv) explain(name string) string {
	var ex struct {
		State, Decision, Reason string
	}
	if err := getAPI(e.apiURL, "/v1/explain/"+name, &ex); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%s/%s: %s", ex.State, ex.Decision, ex.Reason)
}

// purgeAll purges the jobs and waits until the impact agent's model
// holds no GPU.
func (e *lcEnv) purgeAll(names ...string) {
	e.t.Helper()
	for _, n := range names {
		_, _ = e.nomad("job", "stop", "-purge", "-detach", n)
	}
	eventually(e.t, 60*time.Second, "every GPU free in the model", func() (bool, string) {
		var q struct {
			Cluster struct {
				AllocatedGPUs int `json:"allocated_gpus"`
			}
		}
		err := getAPI(e.apiURL, "/v1/queue", &q)
		return err == nil && q.Cluster.AllocatedGPUs == 0, fmt.Sprintf("%+v %v", q.Cluster, err)
	})
}

func (e *lcEnv) metric(name string) string {
	var text string
	if err := getAPI(e.apiURL, "/metrics", &text); err != nil {
		return err.Error()
	}
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

func nodesOfAllocs(as []lcAlloc) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.NodeID)
	}
	sort.Strings(out)
	return out
}

func setupCluster(t *testing.T, prefix, policyExtra string) *lcEnv {
	return setupClusterWith(t, prefix, policyExtra, "")
}

// setupClusterWith is setupCluster with serverExtra appended to the Nomad
// server's config (a shorter heartbeat TTL...).
func setupClusterWith(t *testing.T, prefix, policyExtra, serverExtra string) *lcEnv {
	return setupGPUCluster(t, prefix, 3, policyExtra, serverExtra)
}

// setupGPUCluster is setupClusterWith on n client nodes; opts change the
// impact agent's env before it starts.
func setupGPUCluster(t *testing.T, prefix string, n int, policyExtra, serverExtra string, opts ...func(*env)) *lcEnv {
	c, impact := startGPUClusterWith(t, prefix, n, serverExtra)
	e := &lcEnv{c: c, env: &env{t: t, a: c.Agent, dir: c.Dir, impact: impact, policyExtra: policyExtra,
		apiURL: fmt.Sprintf("http://127.0.0.1:%d", nomadagent.FreePorts(t, 1)[0])}}
	for _, o := range opts {
		o(e.env)
	}
	e.impactProc = e.startImpact(t)
	return e
}

// twoNodes is setupGPUCluster on two client nodes (8 fake GPUs each)
// with policyExtra (and opts): it waits for both nodes and returns the
// cluster, the folder the jobs write their environment to, and the nodes
// sorted by name (client-0, client-1).
func twoNodes(t *testing.T, prefix, policyExtra string, opts ...func(*env)) (*lcEnv, string, []nomadagent.Node) {
	t.Helper()
	w := setupGPUCluster(t, prefix, 2, policyExtra, "", opts...)
	envDir := filepath.Join(w.dir, "env")
	if err := os.MkdirAll(envDir, 0o777); err != nil {
		t.Fatal(err)
	}
	return w, envDir, w.c.WaitNodes(30*time.Second, 2, "both nodes", nil)
}

// startGPUCluster starts one Nomad server and n client processes, each
// with raw_exec and impact-gpu's fake backend on its own copy of the
// two-island 8-GPU topology (distinct GPU UUIDs), and waits until every
// node shows its 8 GPUs. It returns the cluster and the built impact
// binary.
func startGPUCluster(t *testing.T, prefix string, n int) (*nomadagent.Cluster, string) {
	t.Helper()
	return startGPUClusterWith(t, prefix, n, "")
}

// startGPUClusterWith is startGPUCluster with serverExtra appended to the
// server's config.
func startGPUClusterWith(t *testing.T, prefix string, n int, serverExtra string) (*nomadagent.Cluster, string) {
	t.Helper()
	nomadagent.Binary(t)
	root := nomadagent.RepoRoot()
	bins := t.TempDir()
	gpu := nomadagent.ImpactBinary(t, bins, "plugins/impact-gpu", "github.com/impact-sched/nomad-impact/cmd/impact-gpu")
	impact := nomadagent.ImpactBinary(t, bins, "impact", "github.com/impact-sched/nomad-impact/cmd/impact")
	src := filepath.Join(root, "example", "topologies", "two-islands-8x-a100.hcl")
	c := nomadagent.StartCluster(t, nomadagent.ClusterConfig{
		Prefix:      prefix,
		Clients:     n,
		Plugins:     map[string]string{"impact-gpu": gpu},
		ServerExtra: serverExtra,
		ClientExtra: func(i int, cl *nomadagent.Client) string {
			return fmt.Sprintf(`
plugin "raw_exec" {
  config {
    enabled = true
  }
}
plugin "impact-gpu" {
  config {
    backend            = "fake"
    fake_topology      = %q
    fingerprint_period = "2s"
  }
}
`, nomadagent.NodeTopology(t, src, cl.Dir, i))
		},
	})
	c.WaitNodes(90*time.Second, n, fmt.Sprintf("%d nodes with 8 GPUs each", n), func(ns []nomadagent.Node) (bool, string) {
		var counts []int
		ok := true
		for _, nd := range ns {
			counts = append(counts, nd.Devices("gpu"))
			ok = ok && nd.Devices("gpu") == 8
		}
		return ok, fmt.Sprint(counts)
	})
	return c, impact
}

func TestLifecycle(t *testing.T) {
	e := setupCluster(t, "impact-e2e-lifecycle-", `
gangs {
  missing_member_grace = "10s"
}
`)

	t.Run("purge of a running job frees its GPUs at once", func(t *testing.T) {
		e.t = t
		e.runJob(lcJob{name: "p1", tier: "high", count: 3, gpus: 8})
		e.waitRunningN("p1", 3, 120*time.Second)
		e.runJob(lcJob{name: "p2", tier: "high", count: 1, gpus: 8})
		waitCycles(t, e.apiURL, 3)
		if n := len(e.running("p2")); n != 0 {
			t.Fatalf("p2 runs on a full cluster")
		}
		start := time.Now()
		if out, err := e.nomad("job", "stop", "-purge", "-detach", "p1"); err != nil {
			t.Fatalf("purge: %v\n%s", err, out)
		}
		e.waitRunningN("p2", 1, 60*time.Second)
		took := time.Since(start)
		t.Logf("p2 running %v after p1 was purged", took.Round(100*time.Millisecond))
		if took > 30*time.Second {
			t.Errorf("p2 started %v after the purge; the purged job's GPUs were held", took)
		}
		e.purgeAll("p2")
	})

	t.Run("a job finishing inside its grace completes once", func(t *testing.T) {
		e.t = t
		// done: the cheapest victim (it declares a checkpoint every
		// minute), exits 0 on its checkpoint signal.
		e.runJob(lcJob{name: "done", tier: "scavenger", count: 1, gpus: 8, onSignal: "exit 0",
			meta: map[string]string{"impact_checkpoint_interval": "1m"}})
		e.runJob(lcJob{name: "rest", tier: "scavenger", count: 2, gpus: 8})
		e.waitRunningN("done", 1, 120*time.Second)
		e.waitRunningN("rest", 2, 120*time.Second)
		time.Sleep(2 * time.Second) // past the policy's 1s min runtime
		e.runJob(lcJob{name: "urgent", tier: "critical", count: 1, gpus: 8})
		e.waitRunningN("urgent", 1, 90*time.Second)
		eventually(t, 30*time.Second, "done complete", func() (bool, string) {
			j := e.job("done")
			return j.Status == "dead", fmt.Sprintf("%+v %+v", j, e.allocsOf("done"))
		})
		waitCycles(t, e.apiURL, 5)
		as := e.allocsOf("done")
		if len(as) != 1 || as[0].ClientStatus != "complete" || as[0].DesiredStatus != "run" {
			t.Errorf("done: allocations %+v, want exactly one, completed on its own (never re-run)", as)
		}
		if j := e.job("done"); j.Status != "dead" || j.NodePool == "impact-queue" {
			t.Errorf("done: %+v, want dead in its pool (not requeued)", j)
		}
		if n := len(e.running("rest")); n != 2 {
			t.Errorf("rest: %d running, want 2 (one victim was enough)", n)
		}
		t.Logf("impact_preemption_outcomes_total{outcome=\"completed\"} = %s", e.metric(`impact_preemption_outcomes_total{outcome="completed"}`))
		if v := e.metric(`impact_preemption_outcomes_total{outcome="completed"}`); v != "1" {
			t.Errorf("completed outcomes = %q, want 1", v)
		}
		e.purgeAll("done", "rest", "urgent")
	})

	t.Run("a preemption takes the one victim that is enough", func(t *testing.T) {
		e.t = t
		e.runJob(lcJob{name: "big", tier: "scavenger", count: 2, gpus: 8})
		big := e.waitRunningN("big", 2, 120*time.Second)
		e.runJob(lcJob{name: "small", tier: "scavenger", count: 2, gpus: 4})
		small := e.waitRunningN("small", 2, 120*time.Second)
		if s := nodesOfAllocs(small); s[0] != s[1] {
			t.Fatalf("small spans nodes %v; the scenario needs it on the third node", s)
		}
		time.Sleep(2 * time.Second)
		e.runJob(lcJob{name: "urgent", tier: "critical", count: 2, gpus: 8})
		urgent := e.waitRunningN("urgent", 2, 90*time.Second)
		if got, want := nodesOfAllocs(urgent), nodesOfAllocs(big); !slices.Equal(got, want) {
			t.Errorf("urgent on %v, want the nodes big freed %v", got, want)
		}
		now := e.running("small")
		if len(now) != 2 || now[0].ID != small[0].ID && now[0].ID != small[1].ID {
			t.Errorf("small: running %+v, want its two original allocations untouched (was %+v)", now, small)
		}
		for _, a := range e.allocsOf("small") {
			if a.DesiredStatus != "run" {
				t.Errorf("small's allocation %s was told to %s: it was preempted needlessly", a.ID, a.DesiredStatus)
			}
		}
		e.purgeAll("big", "small", "urgent")
	})

	t.Run("an update of a running job replaces it through the queue", func(t *testing.T) {
		e.t = t
		e.runJob(lcJob{name: "u", tier: "normal", count: 1, gpus: 8, meta: map[string]string{"impact_project": "a"}})
		old := e.waitRunningN("u", 1, 120*time.Second)
		e.runJob(lcJob{name: "u", tier: "normal", count: 1, gpus: 8, meta: map[string]string{"impact_project": "b"}})
		eventually(t, 90*time.Second, "the new version running alone", func() (bool, string) {
			rs := e.running("u")
			return len(rs) == 1 && rs[0].ID != old[0].ID && rs[0].JobVersion > old[0].JobVersion,
				fmt.Sprintf("%+v; explain %s", e.allocsOf("u"), e.explain("u"))
		})
		for _, a := range e.allocsOf("u") {
			if a.ID == old[0].ID && a.ClientStatus == "running" {
				t.Errorf("the old version still runs: %+v", a)
			}
		}
		e.purgeAll("u")
	})

	t.Run("a client killed under a 2-node gang requeues it whole", func(t *testing.T) {
		e.t = t
		e.runJob(lcJob{name: "gang", tier: "high", count: 2, gpus: 8})
		first := e.waitRunningN("gang", 2, 120*time.Second)
		// Which client runs the first member?
		var nodes []struct{ ID, Name string }
		if err := e.a.Get("/v1/nodes", &nodes); err != nil {
			t.Fatal(err)
		}
		var victim *nomadagent.Client
		for _, n := range nodes {
			if n.ID == first[0].NodeID {
				for _, cl := range e.c.Clients {
					if cl.Name == n.Name {
						victim = cl
					}
				}
			}
		}
		if victim == nil {
			t.Fatalf("no client for node %s", first[0].NodeID)
		}
		killed := time.Now()
		victim.Kill()
		// The client's device plugin notices its parent is gone and exits
		// on its own (plugin/orphan.go), rather than outliving it.
		eventually(t, 15*time.Second, "impact-gpu of the killed client exited", func() (bool, string) {
			pids := pluginPIDs(filepath.Join(victim.PluginDir, "impact-gpu"))
			return len(pids) == 0, fmt.Sprint("running: ", pids)
		})
		t.Logf("impact-gpu of %s exited %v after the client's SIGKILL", victim.Name, time.Since(killed).Round(100*time.Millisecond))
		t.Logf("killed %s (node %s): %d task process(es)", victim.Name, first[0].NodeID, victim.KillTasks())
		// Nomad marks the node down after its heartbeat TTL, the member is
		// lost, and after the gang watch's grace the whole gang is stopped
		// and requeued; it then runs as a new gang of two.
		var again []lcAlloc
		eventually(t, 180*time.Second, "the gang running again as a new pair", func() (bool, string) {
			again = e.running("gang")
			fresh := 0
			for _, a := range again {
				if a.ID != first[0].ID && a.ID != first[1].ID {
					fresh++
				}
			}
			return len(again) == 2 && fresh == 2, fmt.Sprintf("%+v; explain %s", e.allocsOf("gang"), e.explain("gang"))
		})
		t.Logf("gang running whole again %v after the kill, on %v", time.Since(killed).Round(time.Second), nodesOfAllocs(again))
		for _, a := range again {
			if a.NodeID == first[0].NodeID {
				t.Errorf("member %s on the killed node", a.ID)
			}
			if a.ID == first[1].ID {
				t.Errorf("the surviving member %s of the old gang runs beside the new one", a.ID)
			}
		}
		if v := e.metric("impact_gangs_requeued_total"); v != "1" {
			t.Errorf("impact_gangs_requeued_total = %q, want 1", v)
		}
		victim.Start()
		e.c.WaitNodes(90*time.Second, 3, "the killed client back", nil)
		e.purgeAll("gang")
	})
}

// pluginPIDs lists the live processes running the executable at path.
func pluginPIDs(path string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, en := range entries {
		pid, err := strconv.Atoi(en.Name())
		if err != nil {
			continue
		}
		exe, _ := os.Readlink(filepath.Join("/proc", en.Name(), "exe"))
		if exe != path {
			continue
		}
		st, _ := os.ReadFile(filepath.Join("/proc", en.Name(), "stat"))
		if f := strings.Fields(string(st)); len(f) > 2 && f[2] == "Z" {
			continue // a zombie is dead
		}
		out = append(out, pid)
	}
	return out
}
