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
//     preempted job;
//  5. GPU utilisation injected through the fake backend's control file
//     reaches the impact agent's /metrics (device stats through Nomad);
//  6. explanation Variables are deleted when their job is stopped, purged
//     or completes, and at start for a job that no longer exists (never a
//     user's Variable).
//
// TestSchedulerWithACL repeats the preemption and the utilisation check
// with a token of example/acl/impact-scheduler.policy.hcl only, and
// TestSchedulerFailover kills the leader of two agents. The Nomad agent
// comes from e2e/internal/nomadagent (shared with the other suites).
//
// The other suites of the package, each on its own agent or cluster:
// TestExactGPUs and TestExactGPUsTwoNodes (gpus_test.go: tasks get exactly
// the planned GPUs), TestLifecycle (lifecycle_test.go: purge, grace,
// minimal victims, updates, node loss on three clients), TestDefragment
// (defrag_test.go: a defragmenting preemption on two clients: small jobs
// moved with their checkpoint signal to the GPUs named in the plan, the
// waiting job whole on the node they cleared; TestDefragmentFailover kills
// the agent during the move and a second one finishes it;
// TestDefragmentGang clears two nodes for a 2 x 8 gang), TestGather
// (gather_test.go: with backfill gather, a blocked 2 x 8 gang holds the
// free node, a small job behind it waits, and the gang starts whole once
// the other node frees; without gather the small job takes the node),
// TestTopTierWeighsNaturalEnds and TestPreemptionWithdrawn (ends_test.go:
// a critical job waits for work ending on its own rather than preempt; a
// preemption whose preemptor started on GPUs freed meanwhile is withdrawn
// and its victim runs on), TestNativePlacement and TestNativeQueueOrder
// (native_test.go: plain Nomad's own placement of GPU jobs, and the order
// it starts waiting ones in, against the simulator's nomad-native
// baseline), TestChaos, TestIdle,
// TestParkingCandidates and TestOperatorUI in their files.
package scheduler

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/e2e/internal/nomadagent"
)

type env struct {
	t *testing.T
	// a is the Nomad agent; the test acts as an operator with its
	// management token when ACLs are on, the impact agent gets its own.
	a *nomadagent.Agent
	// dir holds job files, markers and the impact agent's configs.
	dir    string
	impact string // impact binary
	apiURL string // impact agent API
	// ctl is the fake GPU backend's control file (stats, XIDs).
	ctl string
	// policyExtra is appended to the impact agent's policy file, and
	// preemptionExtra to its preemption block.
	policyExtra, preemptionExtra string
	// extra is added to the impact agent's config.
	extra string
	// logLevel of the impact agent (default "debug").
	logLevel string
	// cycle, when set, replaces the impact agent's cycle block (default:
	// interval 1s, debounce 100ms, admission_deadline 1m).
	cycle string
}

func (e *env) nomad(args ...string) (string, error) { return e.a.CLI(args...) }

// getAPI decodes GET path of an impact agent's API (base is its URL).
func getAPI(base, path string, out any) error {
	resp, err := http.Get(base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 && !(path == "/v1/health" && resp.StatusCode == 503) {
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, bytes.TrimSpace(b))
	}
	if s, ok := out.(*string); ok {
		*s = string(b)
		return nil
	}
	return json.Unmarshal(b, out)
}

var eventually = nomadagent.Eventually

// job is a batch job of one group: count allocations of gpus GPUs each,
// running a shell that appends "checkpoint" to marker on SIGUSR1 and exits
// on SIGTERM, for seconds seconds. With a tier it opts in, with
// checkpointEvery as its impact_checkpoint_interval if set.
type job struct {
	name, pool, tier string
	count, gpus      int
	seconds          int
	marker           string
	checkpointEvery  string
}

func (j job) hcl() string {
	meta := ""
	if j.tier != "" {
		interval := ""
		if j.checkpointEvery != "" {
			interval = fmt.Sprintf("\n    impact_checkpoint_interval = %q", j.checkpointEvery)
		}
		meta = fmt.Sprintf(`meta {
    impact_tier              = %q
    impact_checkpoint_signal = "SIGUSR1"
    impact_grace             = "3s"%s
  }`, j.tier, interval)
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
	if err := e.a.Get("/v1/job/"+jobID+"/allocations?all=true", &out); err != nil {
		e.t.Logf("allocations of %s: %v", jobID, err)
	}
	return out
}

type jobStub struct {
	Status   string
	NodePool string
	// SubmitTime is Nomad's stamp of the job's last registration (Unix
	// nanoseconds).
	SubmitTime int64
	Meta       map[string]string
}

func (e *env) job(jobID string) jobStub {
	var j jobStub
	_ = e.a.Get("/v1/job/"+jobID, &j)
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

func setup(t *testing.T, acl bool) *env { return setupWith(t, acl, `group_by = "island"`) }

// setupWith is setup with extra settings in the impact-gpu config block
// ("" keeps the plugin's shipped defaults).
func setupWith(t *testing.T, acl bool, gpuConfig string) *env {
	nomadagent.Binary(t) // skip before building anything
	root := nomadagent.RepoRoot()
	bins := t.TempDir()
	gpu := nomadagent.ImpactBinary(t, bins, "plugins/impact-gpu", "github.com/impact-sched/nomad-impact/cmd/impact-gpu")
	impact := nomadagent.ImpactBinary(t, bins, "impact", "github.com/impact-sched/nomad-impact/cmd/impact")

	topo, err := os.ReadFile(filepath.Join(root, "example", "topologies", "two-islands-8x-a100.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	topoPath := filepath.Join(bins, "two-islands.hcl")
	if err := os.WriteFile(topoPath, topo, 0o644); err != nil {
		t.Fatal(err)
	}
	a := nomadagent.Start(t, nomadagent.Config{
		Prefix:  "impact-e2e-scheduler-",
		ACL:     acl,
		Plugins: map[string]string{"impact-gpu": gpu},
		Extra: fmt.Sprintf(`
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
    %s
  }
}
`, topoPath, gpuConfig),
	})
	e := &env{t: t, a: a, dir: a.Dir, impact: impact,
		apiURL: fmt.Sprintf("http://127.0.0.1:%d", nomadagent.FreePorts(t, 1)[0]),
		ctl:    filepath.Join(bins, "two-islands.ctl")}
	// The node is ready with its 8 fake GPUs fingerprinted.
	a.WaitNode(90*time.Second, "nomad node with 8 GPUs", func(n nomadagent.Node) (bool, string) {
		return n.Devices("gpu") == 8, fmt.Sprintf("%d GPUs", n.Devices("gpu"))
	})
	return e
}

// startImpact writes the policy and config and starts `impact agent`.
func (e *env) startImpact(t *testing.T, env ...string) *nomadagent.Process {
	t.Helper()
	p := e.launchImpact(t, "e2e", e.apiURL, env...)
	eventually(t, 30*time.Second, "impact agent leading", func() (bool, string) {
		var h struct {
			Status string
			Leader bool
		}
		err := getAPI(e.apiURL, "/v1/health", &h)
		return err == nil && h.Leader, fmt.Sprintf("%+v %v", h, err)
	})
	return p
}

// launchImpact writes the policy and a config named name listening at
// apiURL, and starts `impact agent` without waiting for anything.
func (e *env) launchImpact(t *testing.T, name, apiURL string, env ...string) *nomadagent.Process {
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
` + e.preemptionExtra + `}
` + e.policyExtra
	if err := os.WriteFile(filepath.Join(e.dir, "policy.hcl"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgPath := nomadagent.WriteImpactConfig(t, e.dir, nomadagent.ImpactConfig{
		Name: name, Policy: "policy.hcl", NomadAddr: e.a.Addr, Listen: strings.TrimPrefix(apiURL, "http://"),
		LogLevel: e.logLevel, Cycle: e.cycle,
		Extra: `device_stats {
  interval     = "1s"
  node_timeout = "1s"
}
` + e.extra,
	})
	return nomadagent.StartProcess(e.t, "impact agent "+name, env, e.impact, "agent", "-config", cfgPath)
}

type health struct {
	Status     string
	Leader     bool
	LeaderName string `json:"leader_name"`
	Cycles     uint64
}

// waitCycles waits until the impact agent at url has run k more cycles, so
// a check that something did not happen covers real cycles.
func waitCycles(t *testing.T, url string, k uint64) {
	t.Helper()
	var h health
	if err := getAPI(url, "/v1/health", &h); err != nil {
		t.Fatal(err)
	}
	c0 := h.Cycles
	eventually(t, 30*time.Second, fmt.Sprintf("%d more cycles", k), func() (bool, string) {
		err := getAPI(url, "/v1/health", &h)
		return err == nil && h.Cycles >= c0+k, fmt.Sprintf("%+v %v", h, err)
	})
}

// gpuMetrics reads the impact agent's per-GPU utilisation series: GPU
// index -> value, and the number of allocated GPUs with stats.
func gpuMetrics(url string) (map[string]string, string, error) {
	var text string
	if err := getAPI(url, "/metrics", &text); err != nil {
		return nil, "", err
	}
	perGPU := map[string]string{}
	known := ""
	for _, line := range strings.Split(text, "\n") {
		if m := gpuUtilLine.FindStringSubmatch(line); m != nil {
			perGPU[m[1]] = m[2]
		}
		if v, ok := strings.CutPrefix(line, "impact_gpus_allocated_with_stats "); ok {
			known = v
		}
	}
	return perGPU, known, nil
}

var gpuUtilLine = regexp.MustCompile(`^impact_gpu_utilization_percent\{gpu="[^"]+",index="(\d+)",node="[^"]+"\} (\S+)$`)

// checkUtilization injects a utilisation for GPU 1 through the fake
// backend's control file and waits for it in the impact agent's metrics,
// next to the other 7 GPUs and the blocker's 4 allocated GPUs with stats:
// device stats flow impact-gpu -> Nomad client -> /v1/client/stats ->
// impact agent -> /metrics.
func (e *env) checkUtilization(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(e.ctl, []byte("stats 1 utilization=77 memory_used_mib=4096\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "GPU utilisation in the impact agent's metrics", func() (bool, string) {
		perGPU, known, err := gpuMetrics(e.apiURL)
		if err != nil {
			return false, err.Error()
		}
		return len(perGPU) == 8 && perGPU["1"] == "77" && known != "" && known != "0",
			fmt.Sprintf("per GPU %v, allocated with stats %q", perGPU, known)
	})
	perGPU, known, _ := gpuMetrics(e.apiURL)
	t.Logf("impact_gpu_utilization_percent by GPU index: %v; impact_gpus_allocated_with_stats %s", perGPU, known)
}

// TestSchedulerFailover runs two agents: one leads; when it is killed
// (SIGKILL: no lock release) the other takes over once the lock's TTL and
// delay pass, and keeps admitting, with no job admitted twice.
func TestSchedulerFailover(t *testing.T) {
	e := setup(t, false)
	ports := nomadagent.FreePorts(t, 2)
	urls := []string{fmt.Sprintf("http://127.0.0.1:%d", ports[0]), fmt.Sprintf("http://127.0.0.1:%d", ports[1])}
	procs := []*nomadagent.Process{e.launchImpact(t, "ha-a", urls[0]), e.launchImpact(t, "ha-b", urls[1])}
	leader := -1
	eventually(t, 60*time.Second, "exactly one leader", func() (bool, string) {
		var hs [2]health
		for i, u := range urls {
			if err := getAPI(u, "/v1/health", &hs[i]); err != nil {
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
	procs[leader].Kill()
	eventually(t, 90*time.Second, "standby takes over", func() (bool, string) {
		var h health
		err := getAPI(urls[standby], "/v1/health", &h)
		return err == nil && h.Leader, fmt.Sprintf("%+v %v", h, err)
	})
	t.Logf("standby led %s after the leader was killed", time.Since(killed).Round(100*time.Millisecond))
	e.run(job{name: "after", tier: "normal", pool: "impact-queue", count: 1, gpus: 4, seconds: 600, marker: filepath.Join(e.dir, "after.mark")})
	eventually(t, 60*time.Second, "admitted by the new leader", func() (bool, string) {
		return e.runningAllocs("after") == 1, fmt.Sprintf("%+v", e.allocs("after"))
	})
	waitCycles(t, urls[standby], 3)
	for _, id := range []string{"before", "after"} {
		var j struct{ Version uint64 }
		if err := e.a.Get("/v1/job/"+id, &j); err != nil {
			t.Fatal(err)
		}
		if j.Version != 1 || len(e.allocs(id)) != 1 {
			t.Errorf("%s: version %d with %d allocations, want exactly one admission (version 1, one allocation)", id, j.Version, len(e.allocs(id)))
		}
	}
}

// waitRunning waits until an allocation of the job runs.
func (e *env) waitRunning(t *testing.T, jobID string, d time.Duration) {
	t.Helper()
	eventually(t, d, jobID+" running", func() (bool, string) {
		return e.runningAllocs(jobID) > 0, fmt.Sprintf("%+v", e.allocs(jobID))
	})
}

// preemptScavenger runs a scavenger job "victim" (admitted by the impact
// agent), then a critical job "incident" that only fits by preempting it,
// and checks the victim received its checkpoint signal (SIGUSR1, written
// to victim.mark) before the critical job ran. It returns when the
// critical job was submitted.
func (e *env) preemptScavenger(t *testing.T) time.Time {
	t.Helper()
	marker := filepath.Join(e.dir, "victim.mark")
	e.run(job{name: "victim", tier: "scavenger", pool: "impact-queue", count: 1, gpus: 4, seconds: 600, marker: marker, checkpointEvery: "1s"})
	e.waitRunning(t, "victim", 60*time.Second)
	// Wall time must pass the policy's 1s min runtime of the victim.
	time.Sleep(2 * time.Second)
	submitted := time.Now()
	e.run(job{name: "incident", tier: "critical", pool: "impact-queue", count: 1, gpus: 4, seconds: 600,
		marker: filepath.Join(e.dir, "incident.mark")})
	eventually(t, 90*time.Second, "critical job running", func() (bool, string) {
		return e.runningAllocs("incident") > 0, fmt.Sprintf("incident %+v victim %+v", e.allocs("incident"), e.allocs("victim"))
	})
	if b, err := os.ReadFile(marker); err != nil || !strings.Contains(string(b), "checkpoint") {
		t.Errorf("scavenger did not receive its checkpoint signal (marker %q: %v)", b, err)
	}
	return submitted
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
	e.waitRunning(t, "blocker", 60*time.Second)

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
		// An explanation an earlier agent left for a job that no longer
		// exists (swept when the agent leads), and a user's Variable at
		// such a path (never touched); see "explanation variables removed".
		for _, kv := range [][]string{
			{"nomad/jobs/ghost/impact", "written_by=impact agent", "state=waiting"},
			{"nomad/jobs/mine/impact", "note=the user's own"},
		} {
			if out, err := e.nomad(append([]string{"var", "put", kv[0]}, kv[1:]...)...); err != nil {
				t.Fatalf("nomad var put %s: %v\n%s", kv[0], err, out)
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

	t.Run("utilisation metrics", func(t *testing.T) { e.checkUtilization(t) })

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
		incident := e.preemptScavenger(t)
		var parked jobStub
		eventually(t, 30*time.Second, "scavenger back to pending", func() (bool, string) {
			parked = e.job("victim")
			stopped := true
			for _, a := range e.allocs("victim") {
				if a.DesiredStatus != "stop" && a.ClientStatus == "running" {
					stopped = false
				}
			}
			return parked.Status == "pending" && parked.NodePool == "impact-queue" && stopped,
				fmt.Sprintf("status %s pool %s allocs %+v", parked.Status, parked.NodePool, e.allocs("victim"))
		})
		// Parking re-registers the victim, and Nomad stamps the
		// registration with a new submit time, which the engine orders
		// by: the victim queues behind work submitted before it was
		// preempted. The simulator models a requeue so (sim.Job.queued).
		if got := time.Unix(0, parked.SubmitTime); !got.After(incident) {
			t.Errorf("parked victim's SubmitTime %v is not after the critical job's submission %v", got, incident)
		}
		// Parking writes the work the victim saved: it checkpoints every
		// second (impact_checkpoint_interval) and ran at least 2s before
		// the critical job came, and its shell runs on through the grace
		// (no requeue exit code), so whole seconds up to the decision,
		// never more than it ran.
		ran := time.Since(time.Unix(0, e.firstStart("victim")))
		saved, err := time.ParseDuration(parked.Meta["impact_progress"])
		if err != nil || saved < 2*time.Second || saved > ran || saved%time.Second != 0 {
			t.Errorf("parked victim's impact_progress %q (%v): want whole seconds from 2s to the %v it ran", parked.Meta["impact_progress"], err, ran)
		}
		t.Logf("parked victim's impact_progress %s (ran %v in all)", saved, ran.Round(time.Second))
	})

	t.Run("explain variable", func(t *testing.T) {
		var v struct {
			Path  string
			Items map[string]string
		}
		// Once parked, the victim's run says the work it saved
		// (impact_progress, read back from the job Nomad holds).
		eventually(t, 30*time.Second, "nomad/jobs/victim/impact written with the work saved", func() (bool, string) {
			err := e.a.Get("/v1/var/nomad/jobs/victim/impact", &v)
			return err == nil && strings.Contains(v.Items["run"], "saved by earlier runs (impact_progress)"), fmt.Sprint(err, v.Items)
		})
		t.Logf("explain Variable of the preempted job: %v", v.Items)
		// The CLI reads the same through the agent's API.
		cmd := exec.Command(e.impact, "explain", "-address", e.apiURL, "victim")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "victim") || !strings.Contains(string(out), v.Items["run"]) {
			t.Errorf("impact explain victim: %v, want the Variable's run %q\n%s", err, v.Items["run"], out)
		}
		t.Logf("impact explain victim:\n%s", out)
		cmd = exec.Command(e.impact, "queue", "-address", e.apiURL)
		out, err = cmd.CombinedOutput()
		if err != nil {
			t.Errorf("impact queue: %v\n%s", err, out)
		}
		t.Logf("impact queue:\n%s", out)
	})

	t.Run("explanation variables removed", func(t *testing.T) { e.checkExplanationsRemoved(t) })
}

// checkExplanationsRemoved: the explanation Variable of a job goes when
// the job leaves the queue for good, whether it is stopped (victim,
// waiting), purged (incident, running) or completes (brief); the one an
// earlier agent left for a job that no longer exists was swept at start,
// and a user's Variable at such a path is left alone.
func (e *env) checkExplanationsRemoved(t *testing.T) {
	t.Helper()
	var v struct{ Items map[string]string }
	gone := func(job string) {
		t.Helper()
		eventually(t, 60*time.Second, job+"'s explanation Variable deleted", func() (bool, string) {
			err := e.a.Get("/v1/var/nomad/jobs/"+job+"/impact", &v)
			return err != nil && strings.Contains(err.Error(), "404"), fmt.Sprintf("%v %v", err, v.Items)
		})
	}
	written := func(job, state string) {
		t.Helper()
		eventually(t, 60*time.Second, job+"'s explanation Variable says "+state, func() (bool, string) {
			err := e.a.Get("/v1/var/nomad/jobs/"+job+"/impact", &v)
			return err == nil && v.Items["state"] == state, fmt.Sprintf("%v %v", err, v.Items)
		})
	}
	gone("ghost")
	if err := e.a.Get("/v1/var/nomad/jobs/mine/impact", &v); err != nil || v.Items["note"] != "the user's own" {
		t.Errorf("the user's Variable at nomad/jobs/mine/impact: %v %v, want it untouched", err, v.Items)
	}
	written("victim", "waiting")
	if out, err := e.nomad("job", "stop", "-detach", "victim"); err != nil {
		t.Fatalf("stop victim: %v\n%s", err, out)
	}
	gone("victim")
	written("incident", "running")
	if out, err := e.nomad("job", "stop", "-purge", "-detach", "incident"); err != nil {
		t.Fatalf("purge incident: %v\n%s", err, out)
	}
	gone("incident")
	e.run(job{name: "brief", tier: "normal", pool: "impact-queue", count: 1, gpus: 4, seconds: 30,
		marker: filepath.Join(e.dir, "brief.mark")})
	written("brief", "running")
	eventually(t, 90*time.Second, "brief completed", func() (bool, string) {
		st := e.job("brief")
		return st.Status == "dead", st.Status
	})
	gone("brief")
}

// TestSchedulerWithACL runs the agent with a token of
// example/acl/impact-scheduler.policy.hcl only: it must create the parking
// pool, take the leader lock, admit, preempt (signal and stop) and write
// explanations with no more than that policy grants.
func TestSchedulerWithACL(t *testing.T) {
	e := setup(t, true)
	policy := filepath.Join(nomadagent.RepoRoot(), "example", "acl", "impact-scheduler.policy.hcl")
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
	e.preemptScavenger(t)
	// node read is enough for the device stats poll.
	e.checkUtilization(t)
	var v struct{ Items map[string]string }
	eventually(t, 30*time.Second, "explanation written with the limited token", func() (bool, string) {
		err := e.a.Get("/v1/var/nomad/jobs/victim/impact", &v)
		return err == nil && len(v.Items) > 0, fmt.Sprint(err)
	})
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
