package scheduler

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/e2e/internal/nomadagent"
	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
)

// devRun is scripts/dev.sh running as `make dev` runs it, on ports of its
// own: a Nomad dev agent, its further client nodes and the impact agent.
type devRun struct {
	t          *testing.T
	proc       *nomadagent.Process
	env        []string // NOMAD_ADDR and IMPACT_ADDR of this run
	data       string
	nomadAddr  string
	impactAddr string
}

// startDev runs scripts/dev.sh with clients GPU nodes and waits until it
// prints its "In another shell" hints (every node ready, the impact agent
// answering). The binaries it runs are the repository's bin/, built here
// as `make dev` builds them.
func startDev(t *testing.T, clients int, minRuntime string) *devRun {
	t.Helper()
	nomadagent.Binary(t)
	root := nomadagent.RepoRoot()
	if out, err := exec.Command("make", "-C", root, "build").CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	port := consecutivePorts(t, 3*clients)
	listen := fmt.Sprintf("127.0.0.1:%d", nomadagent.FreePorts(t, 1)[0])
	d := &devRun{t: t, data: nomadagent.Dir(t, "impact-e2e-dev-"),
		nomadAddr: fmt.Sprintf("http://127.0.0.1:%d", port), impactAddr: "http://" + listen}
	d.env = []string{"NOMAD_ADDR=" + d.nomadAddr, "IMPACT_ADDR=" + d.impactAddr}
	d.proc = nomadagent.StartProcess(t, "dev.sh", append([]string{
		fmt.Sprintf("NOMAD_PORT=%d", port), "IMPACT_LISTEN=" + listen, "DEV_DATA_DIR=" + d.data,
		fmt.Sprintf("DEV_CLIENTS=%d", clients), "DEV_MIN_RUNTIME=" + minRuntime,
	}, d.env...), filepath.Join(root, "scripts", "dev.sh"))
	t.Cleanup(func() {
		d.proc.Stop()
		left := processesUnder(d.data)
		if n := nomadagent.KillUnder(d.data); n > 0 {
			t.Errorf("dev.sh left %d process(es) of its run behind after Ctrl-C: %s", n, strings.Join(left, "; "))
		}
		if t.Failed() {
			for _, log := range []string{"impact.log", "nomad.log"} {
				b, err := os.ReadFile(filepath.Join(d.data, log))
				if err != nil {
					t.Logf("%s: %v", log, err)
				}
				t.Logf("%s (tail):\n%s", log, tail(string(b), 6000))
			}
		}
	})
	nomadagent.Eventually(t, 4*time.Minute, "dev.sh up", func() (bool, string) {
		select {
		case <-d.proc.Exited():
			t.Fatalf("dev.sh exited:\n%s", d.proc.Output())
		default:
		}
		return strings.Contains(d.proc.Output(), "In another shell"), tail(d.proc.Output(), 300)
	})
	return d
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// consecutivePorts finds n consecutive free ports on 127.0.0.1 (dev.sh
// takes NOMAD_PORT and the ports after it).
func consecutivePorts(t *testing.T, n int) int {
	t.Helper()
	for range 50 {
		base := nomadagent.FreePorts(t, 1)[0]
		if base+n > 65535 {
			continue
		}
		ok := true
		for p := base; p < base+n && ok; p++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				ok = false
				continue
			}
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}

// run runs a command of the walkthrough (nomad, bin/impact) against this
// dev run.
func (d *devRun) run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = nomadagent.RepoRoot()
	cmd.Env = append(os.Environ(), d.env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// submit runs `nomad job run -detach` on a job file as written.
func (d *devRun) submit(file string) {
	d.t.Helper()
	out, err := d.run("nomad", "job", "run", "-detach", file)
	if err != nil {
		d.t.Fatalf("nomad job run %s: %v\n%s", file, err, out)
	}
	d.t.Logf("nomad job run -detach %s:\n%s", filepath.Base(file), out)
}

func (d *devRun) explain(job string) (agentapi.Explanation, error) {
	var e agentapi.Explanation
	err := getAPI(d.impactAddr, "/v1/explain/"+job, &e)
	return e, err
}

// allocStatuses counts a job's allocations by client status, from
// `nomad job status`.
func (d *devRun) allocStatuses(job string) map[string]int {
	var allocs []struct {
		ClientStatus  string
		DesiredStatus string
		TaskGroup     string
	}
	if err := getAPI(d.nomadAddr, "/v1/job/"+job+"/allocations", &allocs); err != nil {
		return nil
	}
	out := map[string]int{}
	for _, a := range allocs {
		if a.DesiredStatus == "run" {
			out[a.ClientStatus]++
		}
	}
	return out
}

// waitState waits until the agent explains the job in state (and, when
// not empty, with a reason containing reason).
func (d *devRun) waitState(job, state, reason string, within time.Duration) agentapi.Explanation {
	d.t.Helper()
	var last agentapi.Explanation
	nomadagent.Eventually(d.t, within, job+" "+state, func() (bool, string) {
		e, err := d.explain(job)
		if err != nil {
			return false, err.Error()
		}
		last = e
		return e.State == state && strings.Contains(e.Reason, reason), fmt.Sprintf("%s: %s (%s)", e.State, e.Summary, e.Reason)
	})
	return last
}

// TestExamplesAsWritten is example/README.md's walkthrough on scripts/dev.sh
// as `make dev` starts it (two GPU nodes of 8 A100s in two NVLink islands,
// group_by "model"; one node without torchrun), every job of example/jobs
// run as written (but docker-gang.nomad.hcl: make dev runs no Docker
// engine; TestDockerGang validates it and runs its shape), each checked
// against the state the walkthrough documents:
//
//   - llm-pretrain (distributed-training.nomad.hcl, one member per node,
//     4 NVLink GPUs each) is admitted whole and both members run (needs
//     python3 with torch; skipped, and said so, without it);
//   - sweep (two 4-GPU scavenger allocations) is admitted and runs;
//   - urgent (one critical 4-GPU allocation), submitted once the sweep
//     runs, preempts it after the dev min_runtime: the sweep's tasks get
//     SIGUSR1 (the task prints "checkpoint"), the sweep is parked again
//     (explain: waiting, preempted by default/urgent), urgent runs.
func TestExamplesAsWritten(t *testing.T) {
	root := nomadagent.RepoRoot()
	// The flagship runs torchrun (Debian's python3-torch); without it the
	// walkthrough runs on one node, where the sweep alone fills the GPUs
	// that the urgent job then preempts.
	torch := exec.Command("torchrun", "--help").Run() == nil
	clients := 2
	if !torch {
		clients = 1
		t.Log("llm-pretrain: not run: no torchrun on PATH (apt-get install python3-torch); the walkthrough runs on one node (DEV_CLIENTS=1)")
	}
	d := startDev(t, clients, "15s")
	if torch {
		d.submit(filepath.Join(root, "example/jobs/distributed-training.nomad.hcl"))
		d.waitState("llm-pretrain", agentapi.StateRunning, "", 2*time.Minute)
		nomadagent.Eventually(t, 2*time.Minute, "both llm-pretrain members running", func() (bool, string) {
			st := d.allocStatuses("llm-pretrain")
			return st["running"] == 2, fmt.Sprint(st)
		})
	}

	d.submit(filepath.Join(root, "example/jobs/sweep.nomad.hcl"))
	d.waitState("sweep", agentapi.StateRunning, "", 2*time.Minute)
	nomadagent.Eventually(t, 2*time.Minute, "both sweep allocations running", func() (bool, string) {
		st := d.allocStatuses("sweep")
		return st["running"] == 2, fmt.Sprint(st)
	})
	sweepAllocs := d.runningAllocIDs("sweep")

	d.submit(filepath.Join(root, "example/jobs/urgent.nomad.hcl"))
	e := d.waitState("sweep", agentapi.StateWaiting, "", 3*time.Minute)
	if e.PreemptedBy != "default/urgent" {
		t.Errorf("sweep waits again, but explain says preempted by %q, want default/urgent (%s)", e.PreemptedBy, e.Reason)
	}
	d.waitState("urgent", agentapi.StateRunning, "", 2*time.Minute)
	for _, id := range sweepAllocs {
		out, err := d.run("nomad", "alloc", "logs", id, "t")
		if err != nil || !strings.Contains(out, "checkpoint") {
			t.Errorf("sweep allocation %s: no \"checkpoint\" in its log (the SIGUSR1 handler): %v %q", id, err, out)
		}
	}
	out, err := d.run("nomad", "job", "status", "sweep")
	if err != nil || !strings.Contains(out, "impact-queue") {
		t.Errorf("nomad job status sweep: want it back in node pool impact-queue: %v\n%s", err, out)
	}
	// What the operator reads on the job's page in Nomad (issue 41): back in
	// the queue, not complete, and for whom; the urgent job's: admitted.
	for job, want := range map[string]string{
		"sweep":  "**impact scheduler:** back in the queue (not complete): preempted for default/urgent",
		"urgent": "**impact scheduler:** admitted: started whole on 1 node(s) with 4 GPU(s)",
	} {
		var spec struct{ UI *struct{ Description string } }
		if err := getAPI(d.nomadAddr, "/v1/job/"+job, &spec); err != nil || spec.UI == nil || !strings.HasPrefix(spec.UI.Description, want) {
			t.Errorf("%s's ui.description in Nomad: %v %+v, want it to start %q", job, err, spec.UI, want)
		}
	}
}

// runningAllocIDs lists a job's running allocations.
func (d *devRun) runningAllocIDs(job string) []string {
	var allocs []struct {
		ID           string
		ClientStatus string
	}
	if err := getAPI(d.nomadAddr, "/v1/job/"+job+"/allocations", &allocs); err != nil {
		d.t.Fatalf("allocations of %s: %v", job, err)
	}
	var ids []string
	for _, a := range allocs {
		if a.ClientStatus == "running" {
			ids = append(ids, a.ID)
		}
	}
	return ids
}

// TestNoJobHoldsThePool is issue 36's hostage on a real Nomad set up as
// `make dev` does: the flagship example with distinct_hosts and the
// island constraint removed (a 2 x 4-GPU NVLink gang) and a 1-GPU
// critical job.
//
//   - On one node (DEV_CLIENTS=1, group_by "model") the gang cannot keep
//     each member in one island (its two allocations would share the
//     node's one device group, and Nomad splits the pinned GPUs as it
//     likes): it is parked with the reason and how to lift it, holds no
//     GPU, and the critical job runs at once.
//   - On two nodes (the make dev default) the gang runs, one member per
//     node, ranks 0 and 1.
func TestNoJobHoldsThePool(t *testing.T) {
	job := filepath.Join("testdata", "hostage.nomad.hcl")
	crit := filepath.Join("testdata", "critical-1gpu.nomad.hcl")
	abs := func(p string) string { a, _ := filepath.Abs(p); return a }
	t.Run("one node", func(t *testing.T) {
		d := startDev(t, 1, "1m")
		d.submit(abs(job))
		e := d.waitState("gs-nocons", agentapi.StateInvalid, "cannot be placed", time.Minute)
		for _, want := range []string{"one island", `group_by = "island"`, "distinct_hosts"} {
			if !strings.Contains(e.Reason, want) {
				t.Errorf("reason lacks %q: %s", want, e.Reason)
			}
		}
		d.submit(abs(crit))
		d.waitState("critical-1gpu", agentapi.StateRunning, "", time.Minute)
		if st := d.allocStatuses("gs-nocons"); len(st) != 0 {
			t.Errorf("the parked gang has allocations: %v", st)
		}
	})
	t.Run("two nodes", func(t *testing.T) {
		d := startDev(t, 2, "1m")
		d.submit(abs(job))
		d.waitState("gs-nocons", agentapi.StateRunning, "", 2*time.Minute)
		nomadagent.Eventually(t, time.Minute, "both members report their rank", func() (bool, string) {
			var ranks []string
			for _, id := range d.allocIDs("gs-nocons") {
				out, _ := d.run("nomad", "alloc", "logs", id, "trainer")
				ranks = append(ranks, strings.TrimSpace(out))
			}
			got := strings.Join(ranks, " | ")
			return strings.Contains(got, "rank=0 world=2") && strings.Contains(got, "rank=1 world=2"), got
		})
	})
}

// allocIDs lists all of a job's allocations.
func (d *devRun) allocIDs(job string) []string {
	var allocs []struct{ ID string }
	if err := getAPI(d.nomadAddr, "/v1/job/"+job+"/allocations", &allocs); err != nil {
		d.t.Fatalf("allocations of %s: %v", job, err)
	}
	var ids []string
	for _, a := range allocs {
		ids = append(ids, a.ID)
	}
	return ids
}

// processesUnder describes the processes whose working directory or
// command line is under dir (what nomadagent.KillUnder would kill).
func processesUnder(dir string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cwd, _ := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.HasPrefix(cwd, dir+"/") || strings.Contains(string(cmd), dir+"/") {
			out = append(out, fmt.Sprintf("%s cwd=%s cmd=%q", e.Name(), cwd, strings.ReplaceAll(string(cmd), "\x00", " ")))
		}
	}
	return out
}
