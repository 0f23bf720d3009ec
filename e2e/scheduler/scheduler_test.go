// Package scheduler is the end-to-end suite of `impact agent` on a real
// Nomad agent. It is skipped unless a `nomad` binary is on PATH.
//
// One Nomad agent (server + client on 127.0.0.1, its own ports and data
// dir) loads impact-gpu with a fake topology: one node with 8 A100s in two
// NVLink islands of 4, grouped per island. A job outside the parking pool
// holds one island for the whole suite, so exactly one 4-GPU job fits at a
// time. Then, in order:
//
//  1. three 4-GPU jobs parked before the scheduler starts (scavenger,
//     normal, high, in that submission order) are admitted in impact order:
//     high, normal, scavenger;
//  2. a gang of 2 allocations x 2 GPUs is admitted whole: both allocations
//     come from the same evaluation;
//  3. a critical job preempts a running scavenger job: the scavenger's task
//     receives SIGUSR1 (its checkpoint signal), its allocation is stopped,
//     the job is pending again, and the critical job runs;
//  4. the explanation Variable nomad/jobs/<job>/impact exists for the
//     preempted job.
package scheduler

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var out []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}

// binary returns a built binary: $IMPACT_BIN/<rel> (as `make e2e` builds
// them) or a fresh go build into dir.
func binary(t *testing.T, dir, rel, pkg string) string {
	t.Helper()
	dst := filepath.Join(dir, filepath.Base(rel))
	if bin := os.Getenv("IMPACT_BIN"); bin != "" {
		if b, err := os.ReadFile(filepath.Join(bin, rel)); err == nil {
			if err := os.WriteFile(dst, b, 0o755); err != nil {
				t.Fatal(err)
			}
			return dst
		}
	}
	cmd := exec.Command("go", "build", "-o", dst, pkg)
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, out)
	}
	return dst
}

// proc is a child process with its output kept for failure reports.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	buf  bytes.Buffer
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buf.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.buf.String()
	if len(s) > 12000 {
		s = s[len(s)-12000:]
	}
	return s
}

func start(t *testing.T, name string, env []string, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s output (tail):\n%s", name, p.output())
		}
	})
	return p
}

type env struct {
	t        *testing.T
	dir      string
	nomadURL string
	impact   string // impact binary
	apiURL   string // impact agent API
	// mgmtToken is the bootstrap token when ACLs are on; the test acts as
	// an operator with it, the impact agent gets its own limited token.
	mgmtToken string
}

func (e *env) nomad(args ...string) (string, error) {
	cmd := exec.Command("nomad", args...)
	cmd.Env = append(os.Environ(), "NOMAD_ADDR="+e.nomadURL, "NOMAD_TOKEN="+e.mgmtToken)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (e *env) get(base, path string, out any) error {
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		return err
	}
	if e.mgmtToken != "" && base == e.nomadURL {
		req.Header.Set("X-Nomad-Token", e.mgmtToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, bytes.TrimSpace(b))
	}
	return json.Unmarshal(b, out)
}

func eventually(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
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
		time.Sleep(250 * time.Millisecond)
	}
}

// job is a batch job of one group: count allocations of gpus GPUs each,
// running a shell that appends "checkpoint" to marker on SIGUSR1 and exits
// on SIGTERM, for seconds seconds.
type job struct {
	name, pool, tier string
	count, gpus      int
	seconds          int
	marker           string
}

func (j job) hcl() string {
	meta := ""
	if j.tier != "" {
		meta = fmt.Sprintf(`meta {
    impact_tier              = %q
    impact_checkpoint_signal = "SIGUSR1"
    impact_grace             = "3s"
  }`, j.tier)
	}
	script := fmt.Sprintf(`trap 'echo checkpoint >> %s' USR1; trap 'echo stopping; exit 0' TERM; echo started; i=0; while [ $i -lt %d ]; do sleep 1; i=$((i+1)); done`,
		j.marker, j.seconds)
	return fmt.Sprintf(`job %q {
  type      = "batch"
  node_pool = %q
  %s
  group "g" {
    count = %d
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "t" {
      driver       = "raw_exec"
      kill_timeout = "5s"
      config {
        command = "/bin/sh"
        args    = ["-c", %q]
      }
      resources {
        cpu    = 20
        memory = 32
        device "nvidia/gpu" {
          count = %d
        }
      }
    }
  }
}
`, j.name, j.pool, meta, j.count, script, j.gpus)
}

func (e *env) run(j job) {
	e.t.Helper()
	path := filepath.Join(e.dir, j.name+".nomad.hcl")
	if err := os.WriteFile(path, []byte(j.hcl()), 0o644); err != nil {
		e.t.Fatal(err)
	}
	if out, err := e.nomad("job", "run", "-detach", path); err != nil {
		e.t.Fatalf("nomad job run %s: %v\n%s", j.name, err, out)
	}
}

type allocStub struct {
	ID            string
	EvalID        string
	ClientStatus  string
	DesiredStatus string
	CreateTime    int64
	JobVersion    uint64
}

func (e *env) allocs(jobID string) []allocStub {
	var out []allocStub
	if err := e.get(e.nomadURL, "/v1/job/"+jobID+"/allocations?all=true", &out); err != nil {
		e.t.Logf("allocations of %s: %v", jobID, err)
	}
	return out
}

type jobStub struct {
	Status   string
	NodePool string
}

func (e *env) job(jobID string) jobStub {
	var j jobStub
	_ = e.get(e.nomadURL, "/v1/job/"+jobID, &j)
	return j
}

// firstStart is when the job's first allocation was created (0: none).
func (e *env) firstStart(jobID string) int64 {
	var first int64
	for _, a := range e.allocs(jobID) {
		if first == 0 || a.CreateTime < first {
			first = a.CreateTime
		}
	}
	return first
}

func setup(t *testing.T, acl bool) *env {
	if _, err := exec.LookPath("nomad"); err != nil {
		t.Skip("no nomad binary on PATH")
	}
	root := repoRoot(t)
	// Not t.TempDir: a Nomad client leaves task secrets mounted, which
	// would fail the test's cleanup; removal here is best effort.
	dir, err := os.MkdirTemp("", "impact-e2e-scheduler-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	plugins := filepath.Join(dir, "plugins")
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	binary(t, plugins, "plugins/impact-gpu", "github.com/impact-sched/nomad-impact/cmd/impact-gpu")
	impact := binary(t, dir, "impact", "github.com/impact-sched/nomad-impact/cmd/impact")

	topo, err := os.ReadFile(filepath.Join(root, "example", "topologies", "two-islands-8x-a100.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	topoPath := filepath.Join(dir, "two-islands.hcl")
	if err := os.WriteFile(topoPath, topo, 0o644); err != nil {
		t.Fatal(err)
	}

	ports := freePorts(t, 4)
	nomadCfg := fmt.Sprintf(`
data_dir   = %q
bind_addr  = "127.0.0.1"
log_level  = "DEBUG"
plugin_dir = %q
ports {
  http = %d
  rpc  = %d
  serf = %d
}
advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
server {
  enabled          = true
  bootstrap_expect = 1
}
client {
  enabled = true
  servers = ["127.0.0.1:%d"]
  options = {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}
acl {
  enabled = %t
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
plugin "impact-gpu" {
  config {
    backend            = "fake"
    fake_topology      = %q
    group_by           = "island"
    fingerprint_period = "2s"
  }
}
`, filepath.Join(dir, "nomad-data"), plugins, ports[0], ports[1], ports[2], ports[1], acl, topoPath)
	nomadCfgPath := filepath.Join(dir, "nomad.hcl")
	if err := os.WriteFile(nomadCfgPath, []byte(nomadCfg), 0o644); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir, nomadURL: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), impact: impact,
		apiURL: fmt.Sprintf("http://127.0.0.1:%d", ports[3])}
	start(t, "nomad", nil, "nomad", "agent", "-config", nomadCfgPath)
	// Runs before Nomad is stopped (cleanups run last-in first-out): stop
	// every job so no task process outlives the suite.
	t.Cleanup(e.stopAllJobs)
	if acl {
		eventually(t, 60*time.Second, "acl bootstrap", func() (bool, string) {
			out, err := e.nomad("acl", "bootstrap", "-json")
			if err != nil {
				return false, out
			}
			var tok struct{ SecretID string }
			if err := json.Unmarshal([]byte(out), &tok); err != nil || tok.SecretID == "" {
				return false, out
			}
			e.mgmtToken = tok.SecretID
			return true, ""
		})
	}

	// The node is ready with its 8 fake GPUs fingerprinted.
	eventually(t, 90*time.Second, "nomad node with 8 GPUs", func() (bool, string) {
		var nodes []struct {
			ID     string
			Status string
		}
		if err := e.get(e.nomadURL, "/v1/nodes", &nodes); err != nil || len(nodes) == 0 {
			return false, fmt.Sprint("nodes: ", err)
		}
		var node struct {
			NodeResources struct {
				Devices []struct {
					Name      string
					Instances []struct{ ID string }
				}
			}
		}
		if err := e.get(e.nomadURL, "/v1/node/"+nodes[0].ID, &node); err != nil {
			return false, err.Error()
		}
		n := 0
		for _, d := range node.NodeResources.Devices {
			n += len(d.Instances)
		}
		return nodes[0].Status == "ready" && n == 8, fmt.Sprintf("status %s, %d GPUs", nodes[0].Status, n)
	})
	return e
}

// startImpact writes the policy and config and starts `impact agent`.
func (e *env) startImpact(t *testing.T, env ...string) *proc {
	t.Helper()
	p := e.launchImpact(t, "e2e", e.apiURL, env...)
	eventually(t, 30*time.Second, "impact agent leading", func() (bool, string) {
		var h struct {
			Status string
			Leader bool
		}
		err := e.get(e.apiURL, "/v1/health", &h)
		return err == nil && h.Leader, fmt.Sprintf("%+v %v", h, err)
	})
	return p
}

// launchImpact writes the policy and a config named name listening at
// apiURL, and starts `impact agent` without waiting for anything.
func (e *env) launchImpact(t *testing.T, name, apiURL string, env ...string) *proc {
	t.Helper()
	policy := `
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
`
	if err := os.WriteFile(filepath.Join(e.dir, "policy.hcl"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`
name         = %q
policy       = "policy.hcl"
parking_pool = "impact-queue"
default_pool = "default"
log_level    = "debug"
nomad {
  address = %q
}
cycle {
  interval           = "1s"
  debounce           = "100ms"
  admission_deadline = "1m"
}
http {
  listen = %q
}
ha {
  lock_ttl     = "10s"
  state_prefix = "impact"
}
`, name, e.nomadURL, strings.TrimPrefix(apiURL, "http://"))
	cfgPath := filepath.Join(e.dir, name+".hcl")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return start(e.t, "impact agent "+name, env, e.impact, "agent", "-config", cfgPath)
}

type health struct {
	Status     string
	Leader     bool
	LeaderName string `json:"leader_name"`
}

// TestSchedulerFailover runs two agents: one leads; when it is killed
// (SIGKILL: no lock release) the other takes over once the lock's TTL and
// delay pass, and keeps admitting, with no job admitted twice.
func TestSchedulerFailover(t *testing.T) {
	e := setup(t, false)
	ports := freePorts(t, 2)
	urls := []string{fmt.Sprintf("http://127.0.0.1:%d", ports[0]), fmt.Sprintf("http://127.0.0.1:%d", ports[1])}
	procs := []*proc{e.launchImpact(t, "ha-a", urls[0]), e.launchImpact(t, "ha-b", urls[1])}
	leader := -1
	eventually(t, 60*time.Second, "exactly one leader", func() (bool, string) {
		var hs [2]health
		for i, u := range urls {
			if err := e.get(u, "/v1/health", &hs[i]); err != nil {
				return false, err.Error()
			}
		}
		if hs[0].Leader == hs[1].Leader {
			return false, fmt.Sprintf("%+v", hs)
		}
		leader = 0
		if hs[1].Leader {
			leader = 1
		}
		standby := 1 - leader
		return hs[standby].LeaderName == []string{"ha-a", "ha-b"}[leader], fmt.Sprintf("%+v", hs)
	})
	standby := 1 - leader
	e.run(job{name: "before", tier: "high", pool: "impact-queue", count: 1, gpus: 4, seconds: 600, marker: filepath.Join(e.dir, "before.mark")})
	eventually(t, 60*time.Second, "admitted by the first leader", func() (bool, string) {
		return e.runningAllocs("before") == 1, fmt.Sprintf("%+v", e.allocs("before"))
	})

	killed := time.Now()
	if err := procs[leader].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "standby takes over", func() (bool, string) {
		var h health
		err := e.get(urls[standby], "/v1/health", &h)
		return err == nil && h.Leader, fmt.Sprintf("%+v %v", h, err)
	})
	t.Logf("standby led %s after the leader was killed", time.Since(killed).Round(100*time.Millisecond))
	e.run(job{name: "after", tier: "normal", pool: "impact-queue", count: 1, gpus: 4, seconds: 600, marker: filepath.Join(e.dir, "after.mark")})
	eventually(t, 60*time.Second, "admitted by the new leader", func() (bool, string) {
		return e.runningAllocs("after") == 1, fmt.Sprintf("%+v", e.allocs("after"))
	})
	time.Sleep(3 * time.Second) // a few cycles of the new leader
	for _, id := range []string{"before", "after"} {
		var j struct{ Version uint64 }
		if err := e.get(e.nomadURL, "/v1/job/"+id, &j); err != nil {
			t.Fatal(err)
		}
		if j.Version != 1 || len(e.allocs(id)) != 1 {
			t.Errorf("%s: version %d with %d allocations, want exactly one admission (version 1, one allocation)", id, j.Version, len(e.allocs(id)))
		}
	}
}

func (e *env) runningAllocs(jobID string) int {
	n := 0
	for _, a := range e.allocs(jobID) {
		if a.ClientStatus == "running" {
			n++
		}
	}
	return n
}

func TestScheduler(t *testing.T) {
	e := setup(t, false)

	// The parking pool must exist before jobs are submitted to it; the
	// impact agent creates it, but here jobs are parked before it starts.
	if out, err := e.nomad("node", "pool", "apply", writeFile(t, e.dir, "pool.hcl", `node_pool "impact-queue" {
  description = "impact scheduler parking pool"
}`)); err != nil {
		t.Fatalf("creating parking pool: %v\n%s", err, out)
	}

	// Hold one island for the whole suite, outside the scheduler.
	e.run(job{name: "blocker", pool: "default", count: 1, gpus: 4, seconds: 600, marker: filepath.Join(e.dir, "blocker.mark")})
	eventually(t, 60*time.Second, "blocker running", func() (bool, string) {
		for _, a := range e.allocs("blocker") {
			if a.ClientStatus == "running" {
				return true, ""
			}
		}
		return false, fmt.Sprint(e.allocs("blocker"))
	})

	t.Run("impact order", func(t *testing.T) {
		for _, j := range []job{
			{name: "sweep", tier: "scavenger"},
			{name: "finetune", tier: "normal"},
			{name: "paper", tier: "high"},
		} {
			j.pool, j.count, j.gpus, j.seconds = "impact-queue", 1, 4, 3
			j.marker = filepath.Join(e.dir, j.name+".mark")
			e.run(j)
		}
		for _, id := range []string{"sweep", "finetune", "paper"} {
			if st := e.job(id); st.Status != "pending" {
				t.Fatalf("%s is %q before the scheduler runs, want pending (parked)", id, st.Status)
			}
		}
		e.startImpact(t)
		eventually(t, 120*time.Second, "all three ran", func() (bool, string) {
			var info []string
			for _, id := range []string{"sweep", "finetune", "paper"} {
				st := e.job(id)
				info = append(info, id+"="+st.Status)
				if st.Status != "dead" {
					return false, strings.Join(info, " ")
				}
			}
			return true, ""
		})
		type started struct {
			id string
			at int64
		}
		var order []started
		for _, id := range []string{"sweep", "finetune", "paper"} {
			order = append(order, started{id, e.firstStart(id)})
		}
		sort.Slice(order, func(i, k int) bool { return order[i].at < order[k].at })
		got := []string{order[0].id, order[1].id, order[2].id}
		if strings.Join(got, ",") != "paper,finetune,sweep" {
			t.Errorf("admission order %v, want paper (high), finetune (normal), sweep (scavenger)", got)
		}
		t.Logf("admitted in order: %v", got)
	})
	if t.Failed() {
		return
	}

	t.Run("gang admitted whole", func(t *testing.T) {
		e.run(job{name: "gang", tier: "high", pool: "impact-queue", count: 2, gpus: 2, seconds: 5,
			marker: filepath.Join(e.dir, "gang.mark")})
		eventually(t, 60*time.Second, "both gang members running", func() (bool, string) {
			as := e.allocs("gang")
			running := 0
			for _, a := range as {
				if a.ClientStatus == "running" || a.ClientStatus == "complete" {
					running++
				}
			}
			return running == 2, fmt.Sprintf("%+v", as)
		})
		as := e.allocs("gang")
		if len(as) != 2 || as[0].EvalID != as[1].EvalID {
			t.Errorf("gang allocations not placed by one evaluation: %+v", as)
		}
		eventually(t, 60*time.Second, "gang done", func() (bool, string) {
			st := e.job("gang")
			return st.Status == "dead", st.Status
		})
	})

	t.Run("critical preempts scavenger", func(t *testing.T) {
		marker := filepath.Join(e.dir, "victim.mark")
		e.run(job{name: "victim", tier: "scavenger", pool: "impact-queue", count: 1, gpus: 4, seconds: 600, marker: marker})
		eventually(t, 60*time.Second, "scavenger running", func() (bool, string) {
			for _, a := range e.allocs("victim") {
				if a.ClientStatus == "running" {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%+v", e.allocs("victim"))
		})
		time.Sleep(2 * time.Second) // past the policy's 1s min runtime
		e.run(job{name: "incident", tier: "critical", pool: "impact-queue", count: 1, gpus: 4, seconds: 600,
			marker: filepath.Join(e.dir, "incident.mark")})

		eventually(t, 90*time.Second, "critical job running", func() (bool, string) {
			for _, a := range e.allocs("incident") {
				if a.ClientStatus == "running" {
					return true, ""
				}
			}
			return false, fmt.Sprintf("incident %+v victim %+v", e.allocs("incident"), e.allocs("victim"))
		})
		b, err := os.ReadFile(marker)
		if err != nil || !strings.Contains(string(b), "checkpoint") {
			t.Errorf("scavenger did not receive its checkpoint signal (marker %q: %v)", b, err)
		}
		eventually(t, 30*time.Second, "scavenger back to pending", func() (bool, string) {
			st := e.job("victim")
			stopped := true
			for _, a := range e.allocs("victim") {
				if a.DesiredStatus != "stop" && a.ClientStatus == "running" {
					stopped = false
				}
			}
			return st.Status == "pending" && st.NodePool == "impact-queue" && stopped,
				fmt.Sprintf("status %s pool %s allocs %+v", st.Status, st.NodePool, e.allocs("victim"))
		})
	})

	t.Run("explain variable", func(t *testing.T) {
		var v struct {
			Path  string
			Items map[string]string
		}
		eventually(t, 30*time.Second, "nomad/jobs/victim/impact written", func() (bool, string) {
			err := e.get(e.nomadURL, "/v1/var/nomad/jobs/victim/impact", &v)
			return err == nil && len(v.Items) > 0, fmt.Sprint(err)
		})
		t.Logf("explain Variable of the preempted job: %v", v.Items)
		// The CLI reads the same through the agent's API.
		cmd := exec.Command(e.impact, "explain", "-address", e.apiURL, "victim")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "victim") {
			t.Errorf("impact explain victim: %v\n%s", err, out)
		}
		t.Logf("impact explain victim:\n%s", out)
		cmd = exec.Command(e.impact, "queue", "-address", e.apiURL)
		out, err = cmd.CombinedOutput()
		if err != nil {
			t.Errorf("impact queue: %v\n%s", err, out)
		}
		t.Logf("impact queue:\n%s", out)
	})
}

// TestSchedulerWithACL runs the agent with a token of
// example/acl/impact-scheduler.policy.hcl only: it must create the parking
// pool, take the leader lock, admit, preempt (signal and stop) and write
// explanations with no more than that policy grants.
func TestSchedulerWithACL(t *testing.T) {
	e := setup(t, true)
	policy := filepath.Join(repoRoot(t), "example", "acl", "impact-scheduler.policy.hcl")
	if out, err := e.nomad("acl", "policy", "apply", "-description", "impact scheduler", "impact-scheduler", policy); err != nil {
		t.Fatalf("applying the example ACL policy: %v\n%s", err, out)
	}
	out, err := e.nomad("acl", "token", "create", "-name", "impact-scheduler", "-policy", "impact-scheduler", "-json")
	if err != nil {
		t.Fatalf("creating the token: %v\n%s", err, out)
	}
	var tok struct{ SecretID string }
	if err := json.Unmarshal([]byte(out), &tok); err != nil || tok.SecretID == "" {
		t.Fatalf("token: %v %s", err, out)
	}
	// The agent creates the parking pool itself (node_pool write).
	e.startImpact(t, "NOMAD_TOKEN="+tok.SecretID)
	e.run(job{name: "blocker", pool: "default", count: 1, gpus: 4, seconds: 600, marker: filepath.Join(e.dir, "blocker.mark")})
	e.run(job{name: "victim", tier: "scavenger", pool: "impact-queue", count: 1, gpus: 4, seconds: 600,
		marker: filepath.Join(e.dir, "victim.mark")})
	eventually(t, 60*time.Second, "scavenger admitted and running", func() (bool, string) {
		for _, a := range e.allocs("victim") {
			if a.ClientStatus == "running" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", e.allocs("victim"))
	})
	time.Sleep(2 * time.Second)
	e.run(job{name: "incident", tier: "critical", pool: "impact-queue", count: 1, gpus: 4, seconds: 600,
		marker: filepath.Join(e.dir, "incident.mark")})
	eventually(t, 90*time.Second, "critical running after preempting with the limited token", func() (bool, string) {
		for _, a := range e.allocs("incident") {
			if a.ClientStatus == "running" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("incident %+v victim %+v", e.allocs("incident"), e.allocs("victim"))
	})
	if b, err := os.ReadFile(filepath.Join(e.dir, "victim.mark")); err != nil || !strings.Contains(string(b), "checkpoint") {
		t.Errorf("checkpoint signal not delivered with the limited token: %q %v", b, err)
	}
	var v struct{ Items map[string]string }
	eventually(t, 30*time.Second, "explanation written with the limited token", func() (bool, string) {
		err := e.get(e.nomadURL, "/v1/var/nomad/jobs/victim/impact", &v)
		return err == nil && len(v.Items) > 0, fmt.Sprint(err)
	})
}

func (e *env) stopAllJobs() {
	var jobs []struct{ ID string }
	if err := e.get(e.nomadURL, "/v1/jobs", &jobs); err != nil {
		return
	}
	for _, j := range jobs {
		_, _ = e.nomad("job", "stop", "-detach", j.ID)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var allocs []allocStub
		if err := e.get(e.nomadURL, "/v1/allocations", &allocs); err != nil {
			return
		}
		live := 0
		for _, a := range allocs {
			if a.ClientStatus == "running" || a.ClientStatus == "pending" {
				live++
			}
		}
		if live == 0 {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
