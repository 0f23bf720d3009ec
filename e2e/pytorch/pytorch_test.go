// Package pytorch is the end-to-end suite of a real PyTorch job's life on
// impact: example/jobs/train.py (a deterministic DDP trainer, gloo on CPU)
// as a 2-member impact-exec gang of 4 fake GPUs each, parked in
// impact-queue and admitted by the impact agent, on a real Nomad cluster of
// one server and two clients (fake GPUs, distinct UUIDs, a shared host
// volume "checkpoints" for the checkpoints).
//
// It is skipped, saying why, unless a `nomad` binary is on PATH and a
// Python with torch (and gloo) is found: $IMPACT_E2E_PYTHON, else
// /usr/bin/python3 (Debian's python3-torch), else python3 on PATH. The
// trainer runs that Python by its absolute path: a task inherits the
// client's PATH, whose python3 may be another one.
//
// TestPyTorch runs, on one cluster and in order:
//
//	a. reference: an uninterrupted run; its final weights' sha256 is the
//	   reference of b and c.
//	b. preempted: a critical 2 x 8 job preempts the trainer (SIGUSR1 to the
//	   whole group, the default); the trainer finishes the step in flight,
//	   saves, exits 75, is requeued, resumes when the critical job has gone
//	   and ends with the reference's weights, bit for bit, 0 steps redone.
//	c. member killed: SIGKILL of rank 0's python; the survivor exits 75, the
//	   gang is requeued whole, resumes from the last checkpoint and ends
//	   with the reference's weights (some steps redone: those since the
//	   checkpoint). This needs the adapter to requeue a gang whose member
//	   died although the job's restart and reschedule attempts are 0.
//	d. torchrun: one torchrun per allocation with 2 workers each (world 4),
//	   checkpoint_signal_to = "children", preempted like b: no step redone
//	   beyond the one in flight, and the task's exit reported as 75 (the
//	   requeue file) although torchrun itself exits 1.
//	e. the same with impact_checkpoint_signal = "SIGTERM" and
//	   checkpoint_signal_to = "main": torchrun forwards SIGTERM to its
//	   workers, with the same outcome.
//
// Each case logs the steps redone and the times: checkpoint signal (Nomad's
// Signaling task event) to the trainer's last member's exit (Terminated),
// that exit to the preemptor's task Started, requeue (the job seen parked
// in impact-queue again) to the trainer's resumed start (train.py's start
// event), and for a preemption the preemptor's end (its last task ended) to
// that resumed start.
package pytorch

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/e2e/internal/nomadagent"
)

var eventually = nomadagent.Eventually

const (
	steps     = 300
	every     = 50
	stepTime  = "0.03"
	trainTask = "trainer"
)

// torchPython finds a Python that imports torch with gloo, or skips.
func torchPython(t *testing.T) string {
	t.Helper()
	var tried []string
	cands := []string{os.Getenv("IMPACT_E2E_PYTHON"), "/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil {
		cands = append(cands, p)
	}
	for _, c := range cands {
		if c == "" {
			continue
		}
		out, err := exec.Command(c, "-c", "import torch, torch.distributed as d; print(torch.__version__, d.is_gloo_available())").CombinedOutput()
		if err == nil && strings.HasSuffix(strings.TrimSpace(string(out)), "True") {
			t.Logf("python with torch: %s (torch %s)", c, strings.Fields(string(out))[0])
			return c
		}
		msg := strings.TrimSpace(string(out))
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		tried = append(tried, fmt.Sprintf("%s: %v %s", c, err, msg))
	}
	t.Skipf("no Python with torch and gloo (apt-get install python3-torch, or set IMPACT_E2E_PYTHON); tried %s", strings.Join(tried, "; "))
	return ""
}

type world struct {
	t      *testing.T
	c      *nomadagent.Cluster
	dir    string // job files
	ckpt   string // the shared checkpoint root (host volume "checkpoints")
	apiURL string // impact agent
	python string
	train  string // example/jobs/train.py
}

func setup(t *testing.T) *world {
	nomadagent.Binary(t)
	python := torchPython(t)
	root := nomadagent.RepoRoot()
	bins := t.TempDir()
	gpu := nomadagent.ImpactBinary(t, bins, "plugins/impact-gpu", "github.com/impact-sched/nomad-impact/cmd/impact-gpu")
	exe := nomadagent.ImpactBinary(t, bins, "plugins/impact-exec", "github.com/impact-sched/nomad-impact/cmd/impact-exec")
	impact := nomadagent.ImpactBinary(t, bins, "impact", "github.com/impact-sched/nomad-impact/cmd/impact")
	apiURL := fmt.Sprintf("http://127.0.0.1:%d", nomadagent.FreePorts(t, 1)[0])
	ckpt := nomadagent.Dir(t, "impact-e2e-pytorch-ckpt-")
	if err := os.Chmod(ckpt, 0o777); err != nil {
		t.Fatal(err)
	}
	topo := filepath.Join(root, "example", "topologies", "two-islands-8x-a100.hcl")
	c := nomadagent.StartCluster(t, nomadagent.ClusterConfig{
		Prefix:   "impact-e2e-pytorch-",
		Clients:  2,
		LogLevel: "INFO",
		Plugins:  map[string]string{"impact-gpu": gpu, "impact-exec": exe},
		ClientExtra: func(i int, cl *nomadagent.Client) string {
			return fmt.Sprintf(`
client {
  host_volume "checkpoints" {
    path      = %q
    read_only = false
  }
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
    fingerprint_period = "2s"
  }
}
plugin "impact-exec" {
  config {
    rendezvous_addr    = %q
    heartbeat_interval = "1s"
  }
}
`, ckpt, nomadagent.NodeTopology(t, topo, cl.Dir, i), apiURL)
		},
	})
	c.WaitNodes(90*time.Second, 2, "2 nodes with 8 GPUs and impact-exec", func(ns []nomadagent.Node) (bool, string) {
		var info []string
		ok := true
		for _, n := range ns {
			d := n.Drivers["impact-exec"]
			info = append(info, fmt.Sprintf("%s: %d GPUs, impact-exec healthy %t", n.Name, n.Devices("gpu"), d.Healthy))
			ok = ok && n.Devices("gpu") == 8 && d.Healthy
		}
		return ok, strings.Join(info, "; ")
	})
	w := &world{t: t, c: c, dir: c.Dir, ckpt: ckpt, apiURL: apiURL, python: python,
		train: filepath.Join(root, "example", "jobs", "train.py")}
	w.startImpact(impact)
	return w
}

func (w *world) startImpact(impact string) {
	t := w.t
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
gangs {
  missing_member_grace = "5s"
}
`
	if err := os.WriteFile(filepath.Join(w.dir, "policy.hcl"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	path := nomadagent.WriteImpactConfig(t, w.dir, nomadagent.ImpactConfig{
		Name: "e2e-pytorch", Policy: "policy.hcl", NomadAddr: w.c.Addr, Listen: strings.TrimPrefix(w.apiURL, "http://"),
	})
	nomadagent.StartProcess(t, "impact agent", nil, impact, "agent", "-config", path)
	eventually(t, 60*time.Second, "impact agent leading", func() (bool, string) {
		var h struct{ Leader bool }
		err := w.getAPI("/v1/health", &h)
		return err == nil && h.Leader, fmt.Sprintf("%+v %v", h, err)
	})
}

func (w *world) getAPI(path string, out any) error {
	return (&nomadagent.Agent{Addr: w.apiURL}).Get(path, out)
}

func (w *world) explain(job string) string {
	var ex struct{ State, Decision, Reason string }
	if err := w.getAPI("/v1/explain/"+job, &ex); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%s/%s: %s", ex.State, ex.Decision, ex.Reason)
}

// trainerJob is the jobspec of the trainer: the meta of
// example/jobs/distributed-training.nomad.hcl (short grace and min
// runtime), 2 allocations x 4 GPUs on distinct hosts, train.py shipped
// with file() as in the example, checkpoints in the host volume.
// torchrun > 0 runs one torchrun per allocation with that many workers.
func (w *world) trainerJob(name string, torchrun int, checkpointTo string) string {
	return w.trainerJobSignal(name, torchrun, checkpointTo, "SIGUSR1")
}

// trainerJobSignal is trainerJob with another impact_checkpoint_signal.
func (w *world) trainerJobSignal(name string, torchrun int, checkpointTo, signal string) string {
	trainArgs := fmt.Sprintf(`local/train.py --checkpoint-dir %s --steps %d --checkpoint-every %d --step-time %s`,
		filepath.Join(w.ckpt, name), steps, every, stepTime)
	cmd := fmt.Sprintf(`exec %s %s`, w.python, trainArgs)
	if torchrun > 0 {
		cmd = fmt.Sprintf(`exec %s -m torch.distributed.run --nnodes="$WORLD_SIZE" --node_rank="$RANK" --nproc_per_node=%d `+
			`--master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" --max_restarts=0 --monitor_interval=1 `+
			`--redirects=1 --tee=1 --log_dir="$NOMAD_TASK_DIR/torchrun" %s`, w.python, torchrun, trainArgs)
	}
	to := ""
	if checkpointTo != "" {
		to = fmt.Sprintf("checkpoint_signal_to = %q", checkpointTo)
	}
	return fmt.Sprintf(`job %q {
  type      = "batch"
  node_pool = "impact-queue"
  meta {
    impact_tier                = "high"
    impact_project             = "olmo"
    impact_preemptible         = "true"
    impact_checkpoint_signal   = %q
    impact_grace               = "30s"
    impact_requeue_exit_code   = "75"
    impact_min_runtime         = "1s"
    impact_checkpoint_interval = "1m"
    impact_topology            = "nvlink"
  }
  group "workers" {
    count = 2
    constraint {
      distinct_hosts = true
    }
    network {
      port "rdzv" {}
    }
    volume "checkpoints" {
      type      = "host"
      source    = "checkpoints"
      read_only = false
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task %q {
      driver       = "impact-exec"
      kill_signal  = "SIGTERM"
      kill_timeout = "20s"
      config {
        command = "/bin/sh"
        args    = ["-c", %q]
        gang {
          size       = 2
          timeout    = "2m"
          port_label = "rdzv"
          %s
        }
      }
      env {
        GLOO_SOCKET_IFNAME = "lo"
        OMP_NUM_THREADS    = "1"
      }
      identity {
        name = "impact"
        aud  = ["impact"]
        file = true
        ttl  = "1h"
      }
      template {
        data            = file(%q)
        destination     = "local/train.py"
        left_delimiter  = "[[impact-template:"
        right_delimiter = ":impact-template]]"
        change_mode     = "noop"
      }
      resources {
        cpu    = 500
        memory = 3000
        device "nvidia/gpu" {
          count = 4
        }
      }
    }
  }
}
`, name, signal, trainTask, cmd, to, w.train)
}

// criticalJob takes both nodes whole (2 x 8 GPUs) until stopped.
func criticalJob(name string) string {
	return fmt.Sprintf(`job %q {
  type      = "batch"
  node_pool = "impact-queue"
  meta {
    impact_tier = "critical"
  }
  group "g" {
    count = 2
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
      kill_timeout = "2s"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' TERM INT; while true; do sleep 1 & wait $!; done"]
      }
      resources {
        cpu    = 20
        memory = 32
        device "nvidia/gpu" {
          count = 8
        }
      }
    }
  }
}
`, name)
}

func (w *world) run(name, hcl string) {
	w.t.Helper()
	path := filepath.Join(w.dir, name+".nomad.hcl")
	if err := os.WriteFile(path, []byte(hcl), 0o644); err != nil {
		w.t.Fatal(err)
	}
	if out, err := w.c.CLI("job", "run", "-detach", path); err != nil {
		w.t.Fatalf("nomad job run %s: %v\n%s", name, err, out)
	}
}

func (w *world) purge(names ...string) {
	for _, n := range names {
		_, _ = w.c.CLI("job", "stop", "-purge", "-detach", n)
	}
	eventually(w.t, 60*time.Second, "every GPU free in the model", func() (bool, string) {
		var q struct {
			Cluster struct {
				AllocatedGPUs int `json:"allocated_gpus"`
			}
		}
		err := w.getAPI("/v1/queue", &q)
		return err == nil && q.Cluster.AllocatedGPUs == 0, fmt.Sprintf("%+v %v", q.Cluster, err)
	})
}

type taskEvent struct {
	Type           string
	Time           int64
	ExitCode       int
	Signal         int
	DisplayMessage string
}

type alloc struct {
	ID, NodeID, ClientStatus, DesiredStatus string
	CreateIndex                             uint64
	CreateTime                              int64
	TaskStates                              map[string]struct {
		State  string
		Events []taskEvent
	}
}

func (w *world) allocs(job string) []alloc {
	var out []alloc
	_ = w.c.Get("/v1/job/"+job+"/allocations?all=true", &out)
	return out
}

func (w *world) running(job string) int {
	n := 0
	for _, a := range w.allocs(job) {
		if a.ClientStatus == "running" && a.DesiredStatus == "run" {
			n++
		}
	}
	return n
}

func (w *world) jobPool(job string) (pool, status string) {
	var j struct{ NodePool, Status string }
	_ = w.c.Get("/v1/job/"+job, &j)
	return j.NodePool, j.Status
}

// trainEvent is one line of train.py's events.jsonl.
type trainEvent struct {
	Event   string
	Rank    int
	Step    int
	Resumed bool
	Pid     int
	Code    int
	Signal  string
	Sha256  string
	Alloc   string
	T       float64
}

func (w *world) events(job string) []trainEvent {
	f, err := os.Open(filepath.Join(w.ckpt, job, "events.jsonl"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []trainEvent
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e trainEvent
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// lastStep is rank 0's last completed step so far.
func lastStep(evs []trainEvent) int {
	s := -1
	for _, e := range evs {
		if e.Rank == 0 && (e.Event == "step" || e.Event == "start") && e.Step > s {
			s = e.Step
		}
	}
	return s
}

func (w *world) waitStep(job string, step int, d time.Duration) {
	w.t.Helper()
	eventually(w.t, d, fmt.Sprintf("%s: rank 0 past step %d", job, step), func() (bool, string) {
		s := lastStep(w.events(job))
		pool, status := w.jobPool(job)
		return s >= step, fmt.Sprintf("last step %d; job %s in %s; explain %s", s, status, pool, w.explain(job))
	})
}

// waitDone waits for rank 0's "done" event and returns its sha256.
func (w *world) waitDone(job string, d time.Duration, why string) (string, trainEvent) {
	w.t.Helper()
	var done trainEvent
	eventually(w.t, d, job+": finished "+why, func() (bool, string) {
		evs := w.events(job)
		for _, e := range evs {
			if e.Event == "done" && e.Rank == 0 {
				done = e
				return true, ""
			}
		}
		pool, status := w.jobPool(job)
		return false, fmt.Sprintf("last step %d; job %s in %s; explain %s; allocs %s", lastStep(evs), status, pool, w.explain(job), w.allocSummary(job))
	})
	return done.Sha256, done
}

func (w *world) allocSummary(job string) string {
	var parts []string
	for _, a := range w.allocs(job) {
		var last string
		if ts, ok := a.TaskStates[trainTask]; ok && len(ts.Events) > 0 {
			e := ts.Events[len(ts.Events)-1]
			last = fmt.Sprintf("%s(%d) %s", e.Type, e.ExitCode, e.DisplayMessage)
		}
		parts = append(parts, fmt.Sprintf("%s %s/%s [%s]", a.ID[:8], a.ClientStatus, a.DesiredStatus, last))
	}
	return strings.Join(parts, "; ")
}

// redone is the number of steps done twice: for every resumed start, rank
// 0's last step before it minus the step it resumed at.
func redone(evs []trainEvent) (total int, resumes []int) {
	last := 0
	for _, e := range evs {
		if e.Rank != 0 {
			continue
		}
		switch {
		case e.Event == "start" && e.Resumed:
			resumes = append(resumes, e.Step)
			if last > e.Step {
				total += last - e.Step
			}
			last = e.Step
		case e.Event == "step" || e.Event == "signal" || e.Event == "checkpoint":
			last = max(last, e.Step)
		}
	}
	return total, resumes
}

// resumedAt is the time of rank 0's first resumed start.
func resumedAt(evs []trainEvent) (time.Time, int, bool) {
	for _, e := range evs {
		if e.Event == "start" && e.Resumed && e.Rank == 0 {
			return unixFloat(e.T), e.Step, true
		}
	}
	return time.Time{}, 0, false
}

func unixFloat(f float64) time.Time { return time.Unix(0, int64(f*1e9)) }

// firstEvent is the earliest event of type typ of the task in allocs.
func firstEvent(as []alloc, task, typ string) (taskEvent, bool) {
	var best taskEvent
	found := false
	for _, a := range as {
		for _, e := range a.TaskStates[task].Events {
			if e.Type == typ && (!found || e.Time < best.Time) {
				best, found = e, true
			}
		}
	}
	return best, found
}

// terminated lists the trainer's Terminated events before t (the first
// run's members).
func terminated(as []alloc, before time.Time) []taskEvent {
	var out []taskEvent
	for _, a := range as {
		for _, e := range a.TaskStates[trainTask].Events {
			if e.Type == "Terminated" && time.Unix(0, e.Time).Before(before) {
				out = append(out, e)
			}
		}
	}
	return out
}

// waitParked records when the job is back in the parking pool (requeued)
// after since, polling until d; zero if never seen.
// waitParked waits until the job has been parked again (re-registered in
// the parking pool) and returns when: the submit time of its first
// version in impact-queue after its first admitted one. Read from the
// job's versions, not by watching its current pool: the agent may park
// and admit it again between two polls.
func (w *world) waitParked(job string, d time.Duration) time.Time {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if at := w.parkedAt(job); !at.IsZero() {
			return at
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Time{}
}

// parkedAt is the submit time of the job's first version in the parking
// pool that follows an admitted version (zero: none yet).
func (w *world) parkedAt(job string) time.Time {
	var vs struct {
		Versions []struct {
			Version    uint64
			NodePool   string
			SubmitTime int64
		}
	}
	if err := w.c.Get("/v1/job/"+job+"/versions", &vs); err != nil {
		return time.Time{}
	}
	sort.Slice(vs.Versions, func(i, j int) bool { return vs.Versions[i].Version < vs.Versions[j].Version })
	admitted := false
	for _, v := range vs.Versions {
		switch {
		case v.NodePool != "impact-queue":
			admitted = true
		case admitted:
			return time.Unix(0, v.SubmitTime)
		}
	}
	return time.Time{}
}

type result struct {
	name                                  string
	redone                                int
	signalToExit, exitToPreemptor, resume time.Duration
	// roomToResume: from the end of the preemptor (its GPUs free again)
	// to the resumed start; parked and roomBack feed it.
	roomToResume     time.Duration
	parked, roomBack time.Time
	note             string
}

func (r result) String() string {
	f := func(d time.Duration) string {
		if d == 0 {
			return "-"
		}
		return d.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("%-18s steps redone %3d | signal->exit %7s | exit->preemptor running %7s | requeue->resume %7s | preemptor ended->resume %7s | %s",
		r.name, r.redone, f(r.signalToExit), f(r.exitToPreemptor), f(r.resume), f(r.roomToResume), r.note)
}

func TestPyTorch(t *testing.T) {
	w := setup(t)
	var results []result
	t.Cleanup(func() {
		t.Logf("PyTorch on impact, per case:")
		for _, r := range results {
			t.Logf("  %s", r)
		}
	})

	var reference string
	t.Run("a_reference", func(t *testing.T) {
		w.t = t
		start := time.Now()
		w.run("ref", w.trainerJob("ref", 0, ""))
		sha, _ := w.waitDone("ref", 5*time.Minute, "uninterrupted")
		if sha == "" {
			t.Fatalf("no sha256 in the done event")
		}
		evs := w.events("ref")
		if n, rs := redone(evs); n != 0 || len(rs) != 0 {
			t.Fatalf("the reference resumed %v (%d steps redone)", rs, n)
		}
		reference = sha
		results = append(results, result{name: "a reference", note: fmt.Sprintf("%d steps in %s, sha256 %s", steps, time.Since(start).Round(time.Second), sha[:16])})
		w.purge("ref")
	})

	// preempt runs job until past step 100, then a critical job that needs
	// both nodes whole; it returns the timings once the critical job runs
	// and has been stopped again.
	preempt := func(t *testing.T, job, critical string) result {
		w.waitStep(job, 100, 3*time.Minute)
		w.run(critical, criticalJob(critical))
		eventually(t, 2*time.Minute, critical+" running whole", func() (bool, string) {
			return w.running(critical) == 2, fmt.Sprintf("explain %s: %s; %s: %s", critical, w.explain(critical), job, w.allocSummary(job))
		})
		parked := w.waitParked(job, 30*time.Second)
		as := w.allocs(job)
		sig, ok := firstEvent(as, trainTask, "Signaling")
		if !ok {
			t.Fatalf("%s: no Signaling task event (the checkpoint signal): %s", job, w.allocSummary(job))
		}
		exits := terminated(as, time.Now())
		if len(exits) != 2 {
			t.Fatalf("%s: %d members terminated, want 2: %s", job, len(exits), w.allocSummary(job))
		}
		var lastExit time.Time
		for _, e := range exits {
			if e.ExitCode != 75 {
				t.Errorf("%s: a member ended with %d, want 75 (checkpoint saved, requeue): %s", job, e.ExitCode, e.DisplayMessage)
			}
			if ts := time.Unix(0, e.Time); ts.After(lastExit) {
				lastExit = ts
			}
		}
		started, ok := firstEvent(w.allocs(critical), "t", "Started")
		if !ok {
			t.Fatalf("%s: no Started event", critical)
		}
		r := result{signalToExit: lastExit.Sub(time.Unix(0, sig.Time)), exitToPreemptor: time.Unix(0, started.Time).Sub(lastExit)}
		// The trainer waits, parked, while the critical job runs.
		if n := w.running(job); n != 0 {
			t.Errorf("%s: %d members running beside the critical job", job, n)
		}
		if parked.IsZero() {
			t.Fatalf("%s: never seen parked in impact-queue after its preemption: %s", job, w.explain(job))
		}
		// Parking wrote the work the trainer saved as its impact_progress:
		// its members exited with the requeue code (saved at the signal),
		// so its run up to the preemption's decision, which came before
		// the signal.
		var cur struct{ Meta map[string]string }
		if err := w.c.Get("/v1/job/"+job, &cur); err != nil {
			t.Fatalf("%s: reading the job: %v", job, err)
		}
		first := time.Unix(0, as[0].CreateTime)
		for _, a := range as {
			if ct := time.Unix(0, a.CreateTime); ct.Before(first) {
				first = ct
			}
		}
		ran := time.Unix(0, sig.Time).Sub(first)
		saved, err := time.ParseDuration(cur.Meta["impact_progress"])
		if err != nil || saved <= 0 || saved > ran {
			t.Errorf("%s: impact_progress %q (%v), want the run saved at the signal, above 0 and at most the %v from its first allocation to the signal",
				job, cur.Meta["impact_progress"], err, ran)
		}
		// The critical job ends (stopped, not purged: its task events stay
		// readable); the room is back when its last task has ended.
		if out, err := w.c.CLI("job", "stop", "-detach", critical); err != nil {
			t.Fatalf("stopping %s: %v\n%s", critical, err, out)
		}
		var ended time.Time
		eventually(t, time.Minute, critical+" ended", func() (bool, string) {
			ended = time.Time{}
			as := w.allocs(critical)
			for _, a := range as {
				if a.ClientStatus == "running" || a.ClientStatus == "pending" {
					return false, w.allocSummary(critical)
				}
				for _, e := range a.TaskStates["t"].Events {
					if (e.Type == "Terminated" || e.Type == "Killed") && time.Unix(0, e.Time).After(ended) {
						ended = time.Unix(0, e.Time)
					}
				}
			}
			return len(as) == 2 && !ended.IsZero(), fmt.Sprintf("%d allocations", len(as))
		})
		r.parked, r.roomBack = parked, ended
		r.note = fmt.Sprintf("parked %s after its last exit with impact_progress %s (%s from its first allocation to the signal), the critical job ran %s",
			parked.Sub(lastExit).Round(time.Millisecond), saved, ran.Round(time.Millisecond), ended.Sub(time.Unix(0, started.Time)).Round(time.Millisecond))
		return r
	}

	t.Run("b_preempted", func(t *testing.T) {
		w.t = t
		if reference == "" {
			t.Fatal("no reference weights: case a did not run or failed")
		}
		w.run("pre", w.trainerJob("pre", 0, ""))
		r := preempt(t, "pre", "urgent-b")
		sha, _ := w.waitDone("pre", 5*time.Minute, "after its preemption")
		evs := w.events("pre")
		n, resumes := redone(evs)
		at, step, ok := resumedAt(evs)
		if !ok {
			t.Fatalf("pre never resumed from a checkpoint (starts: %v)", resumes)
		}
		r.name, r.redone, r.resume, r.roomToResume = "b preempted", n, at.Sub(r.parked), at.Sub(r.roomBack)
		r.note = fmt.Sprintf("resumed at step %d; %s", step, r.note)
		results = append(results, r)
		if sha != reference {
			t.Errorf("final weights differ from the reference: %s, want %s", sha, reference)
		}
		if n != 0 {
			t.Errorf("%d steps redone after the preemption, want 0 (the step in flight finishes and is saved)", n)
		}
		w.purge("pre", "urgent-b")
	})

	t.Run("c_member_killed", func(t *testing.T) {
		w.t = t
		if reference == "" {
			t.Fatal("no reference weights: case a did not run or failed")
		}
		w.run("kill", w.trainerJob("kill", 0, ""))
		w.waitStep("kill", 120, 3*time.Minute)
		var victim trainEvent
		for _, e := range w.events("kill") {
			if e.Event == "start" && e.Rank == 0 {
				victim = e
			}
		}
		if err := syscall.Kill(victim.Pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill -9 of rank 0's python (pid %d): %v", victim.Pid, err)
		}
		killed := time.Now()
		parked := w.waitParked("kill", 90*time.Second)
		if parked.IsZero() {
			pool, status := w.jobPool("kill")
			t.Fatalf("the gang was not requeued within 90s of its member's death (job %s in pool %s; explain: %s; allocs: %s). "+
				"This needs the scheduler adapter to requeue a gang whose member died even with restart and reschedule attempts 0 "+
				"(issue 35 item 1, branch gang-life)", status, pool, w.explain("kill"), w.allocSummary("kill"))
		}
		sha, _ := w.waitDone("kill", 5*time.Minute, "after a member was killed")
		evs := w.events("kill")
		n, _ := redone(evs)
		at, step, _ := resumedAt(evs)
		results = append(results, result{name: "c member killed", redone: n, resume: at.Sub(parked),
			note: fmt.Sprintf("requeued %s after the kill, resumed at step %d", parked.Sub(killed).Round(time.Millisecond), step)})
		if sha != reference {
			t.Errorf("final weights differ from the reference: %s, want %s", sha, reference)
		}
		if n >= every {
			t.Errorf("%d steps redone, want fewer than the checkpoint interval %d", n, every)
		}
		w.purge("kill")
	})

	// torchrun with 2 workers per allocation (world 4), preempted: the
	// launcher survives the checkpoint signal (its main process's end is an
	// exit code, reported as the requeue code through the requeue file).
	torchrunCase := func(t *testing.T, job, critical, label, signal, hcl string) {
		w.run(job, hcl)
		r := preempt(t, job, critical)
		// How the first run's members ended, as their task events tell.
		var mapped int
		for _, a := range w.allocs(job) {
			var lines []string
			for _, e := range a.TaskStates[trainTask].Events {
				lines = append(lines, fmt.Sprintf("%s %s: %s", time.Unix(0, e.Time).Format("15:04:05.000"), e.Type, e.DisplayMessage))
				if strings.Contains(e.DisplayMessage, "after writing its requeue file") {
					mapped++
				}
				if strings.Contains(e.DisplayMessage, "Task ended with signal "+signal) {
					t.Errorf("%s: the launcher died of the checkpoint signal %s: %s", job, signal, e.DisplayMessage)
				}
			}
			if len(lines) > 0 {
				t.Logf("%s alloc %s task events:\n  %s", job, a.ID[:8], strings.Join(lines, "\n  "))
			}
		}
		if mapped != 2 {
			t.Errorf("%s: %d members' ends reported as the requeue code through the requeue file, want 2: %s", job, mapped, w.allocSummary(job))
		}
		_, done := w.waitDone(job, 5*time.Minute, "after its preemption")
		evs := w.events(job)
		n, _ := redone(evs)
		at, step, ok := resumedAt(evs)
		if !ok {
			t.Fatalf("%s never resumed from a checkpoint", job)
		}
		worlds := map[int]bool{}
		for _, e := range evs {
			if e.Event == "start" {
				worlds[e.Rank] = true
			}
		}
		r.name, r.redone, r.resume, r.roomToResume = label, n, at.Sub(r.parked), at.Sub(r.roomBack)
		r.note = fmt.Sprintf("resumed at step %d, %d ranks, done at step %d; %s", step, len(worlds), done.Step, r.note)
		results = append(results, r)
		if len(worlds) != 4 {
			t.Errorf("ranks seen %v, want 4 (2 allocations x 2 workers)", worlds)
		}
		if n != 0 {
			t.Errorf("%d steps redone after the preemption, want 0", n)
		}
		w.purge(job, critical)
	}
	t.Run("d_torchrun_preempted", func(t *testing.T) {
		w.t = t
		torchrunCase(t, "trun", "urgent-d", "d torchrun children", "SIGUSR1", w.trainerJob("trun", 2, "children"))
	})
	// The alternative the docs give: SIGTERM, which torchrun forwards to
	// its workers, to the main process only.
	t.Run("e_torchrun_sigterm_main", func(t *testing.T) {
		w.t = t
		torchrunCase(t, "trterm", "urgent-e", "e torchrun main/TERM", "SIGTERM", w.trainerJobSignal("trterm", 2, "main", "SIGTERM"))
	})
}
