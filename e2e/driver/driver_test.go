// Package driver is the end-to-end suite of the impact-exec task driver on
// a real Nomad agent. It is skipped unless a `nomad` binary is on PATH.
//
// The scenario: a standalone rendezvous server runs in the test process; a
// Nomad agent (server + client, 127.0.0.1, its own ports and data dir)
// loads impact-exec from a plugin dir. A job whose group has count = 1
// but whose gang needs 2 members is run: its first member must wait at the
// barrier (a "1 of 2 members arrived" driver event, no output). The group
// is then scaled to 2; both members start, each printing its RANK and
// WORLD_SIZE, and the first one's start time is after the second one's
// placement.
package driver

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/e2e/internal/nomadagent"
	"github.com/impact-sched/nomad-impact/gang"
)

type agent struct{ *nomadagent.Agent }

// startAgent starts a server+client agent (nomadagent: 127.0.0.1, free
// ports, its own dirs) with impact-exec in its plugin dir, pointed at the
// rendezvous server; it is stopped at cleanup.
func startAgent(t *testing.T, rendezvous string) *agent {
	t.Helper()
	return startAgentWith(t, rendezvous, nil)
}

// startAgentWith also installs impact-gpu when gpu is not nil; gpu gets a
// directory for its files and returns the impact-gpu plugin block.
func startAgentWith(t *testing.T, rendezvous string, gpu func(dir string) string) *agent {
	t.Helper()
	nomadagent.Binary(t) // skip early, before building anything
	bin := t.TempDir()
	plugins := map[string]string{
		"impact-exec": nomadagent.ImpactBinary(t, bin, "plugins/impact-exec", "github.com/impact-sched/nomad-impact/cmd/impact-exec"),
	}
	extra := fmt.Sprintf(`
telemetry {
  publish_allocation_metrics = true
  collection_interval        = "1s"
}
plugin "impact-exec" {
  config {
    rendezvous_addr    = %q
    heartbeat_interval = "1s"
  }
}
`, rendezvous)
	if gpu != nil {
		plugins["impact-gpu"] = nomadagent.ImpactBinary(t, bin, "plugins/impact-gpu", "github.com/impact-sched/nomad-impact/cmd/impact-gpu")
		extra += gpu(bin)
	}
	// INFO: the plugin's "task recovered" lines must stay within the log
	// tail the helper keeps.
	a := &agent{nomadagent.Start(t, nomadagent.Config{Prefix: "impact-e2e-driver-", Plugins: plugins, LogLevel: "INFO", Extra: extra})}
	// Runs before the helper's own cleanup: stop the jobs, then kill any
	// task a failed test left behind (an agent shutdown leaves them running).
	t.Cleanup(func() {
		a.StopAllJobs()
		killSupervisors(a.Dir)
	})
	return a
}

// taskStatus is the part of impact-exec's supervisor status file used here.
type taskStatus struct {
	Phase         string `json:"phase"`
	SupervisorPID int    `json:"supervisor_pid"`
	ChildPID      int    `json:"child_pid"`
}

// taskStatuses reads the status files of every impact-exec task under dir.
func taskStatuses(dir string) map[string]taskStatus {
	out := map[string]taskStatus{}
	files, _ := filepath.Glob(filepath.Join(dir, "data", "alloc", "*", "*", ".impact-exec", "*", "status.json"))
	for _, f := range files {
		var st taskStatus
		if b, err := os.ReadFile(f); err == nil && json.Unmarshal(b, &st) == nil {
			out[f] = st
		}
	}
	return out
}

// killSupervisors ends the tasks this suite's agent left running (by pid,
// from their status files), so a failed test leaves nothing behind.
func killSupervisors(dir string) {
	for _, st := range taskStatuses(dir) {
		if st.Phase == "exited" {
			continue
		}
		if st.ChildPID > 0 {
			_ = syscall.Kill(-st.ChildPID, syscall.SIGKILL)
		}
		if st.SupervisorPID > 0 {
			_ = syscall.Kill(st.SupervisorPID, syscall.SIGKILL)
		}
	}
}

// waitDriver waits until the node is ready with impact-exec healthy.
func (a *agent) waitDriver(t *testing.T) {
	t.Helper()
	a.WaitNode(90*time.Second, "impact-exec healthy on the node", func(n nomadagent.Node) (bool, string) {
		d := n.Drivers["impact-exec"]
		return d.Healthy, fmt.Sprintf("driver %+v", d)
	})
}

func (a *agent) get(t *testing.T, path string, out any) error {
	t.Helper()
	return a.Get(path, out)
}

func (a *agent) nomad(t *testing.T, args ...string) string {
	t.Helper()
	out, err := a.CLI(args...)
	if err != nil {
		t.Fatalf("nomad %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func eventually(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	nomadagent.Eventually(t, d, what, cond)
}

type allocStub struct {
	ID           string
	ClientStatus string
	CreateTime   int64
	Name         string
	TaskStates   map[string]struct {
		State  string
		Events []struct {
			Type           string
			DisplayMessage string
			Time           int64
		}
	}
}

const jobHCL = `
job "gang-e2e" {
  type = "batch"
  group "workers" {
    count = 1
    task "trainer" {
      driver = "impact-exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"RANK=$RANK WORLD_SIZE=$WORLD_SIZE STARTED=$(date +%s%N)\"; sleep 2"]
        gang {
          size    = 2
          timeout = "3m"
        }
      }
      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
`

func TestGangStartsOnlyWhenAllPlaced(t *testing.T) {
	if _, err := exec.LookPath("nomad"); err != nil {
		t.Skip("no nomad binary on PATH")
	}
	srv, err := gang.StartServer("127.0.0.1:0", gang.RegistryConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	a := startAgent(t, srv.URL)

	a.waitDriver(t)
	// The example jobspec is accepted by an agent that has the driver
	// (its parking pool is created by the impact agent; here by hand).
	poolFile := filepath.Join(t.TempDir(), "pool.hcl")
	os.WriteFile(poolFile, []byte(`node_pool "impact-queue" {
  description = "parking pool of the impact scheduler"
}
`), 0o644)
	a.nomad(t, "node", "pool", "apply", poolFile)
	// From the repository root, as example/README.md runs it: the job's
	// file("example/jobs/train.py") is read relative to the CLI's directory.
	validate := exec.Command(nomadagent.Binary(t), "job", "validate", filepath.Join("example", "jobs", "distributed-training.nomad.hcl"))
	validate.Dir = nomadagent.RepoRoot()
	validate.Env = append(os.Environ(), "NOMAD_ADDR="+a.Addr)
	if out, err := validate.CombinedOutput(); err != nil {
		t.Fatalf("nomad job validate example/jobs/distributed-training.nomad.hcl: %v\n%s", err, out)
	}

	jobFile := filepath.Join(t.TempDir(), "gang.nomad.hcl")
	os.WriteFile(jobFile, []byte(jobHCL), 0o644)
	a.nomad(t, "job", "run", "-detach", jobFile)

	allocs := func() []allocStub {
		var out []allocStub
		_ = a.get(t, "/v1/job/gang-e2e/allocations", &out)
		return out
	}
	// Member 0 is placed and waits at the barrier.
	var first allocStub
	eventually(t, 60*time.Second, "first member waiting at the barrier", func() (bool, string) {
		as := allocs()
		if len(as) != 1 {
			return false, fmt.Sprintf("%d allocs", len(as))
		}
		first = as[0]
		for _, ev := range first.TaskStates["trainer"].Events {
			if strings.Contains(ev.DisplayMessage, "1 of 2 members arrived") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", first.TaskStates)
	})
	var out string
	_ = a.get(t, "/v1/client/fs/logs/"+first.ID+"?task=trainer&type=stdout&plain=true", &out)
	if strings.Contains(out, "RANK=") {
		t.Fatalf("member 0 started its command before member 1 was placed: %q", out)
	}

	// Place member 1.
	a.nomad(t, "job", "scale", "-detach", "gang-e2e", "workers", "2")
	var placed2 int64
	eventually(t, 120*time.Second, "both members complete", func() (bool, string) {
		as := allocs()
		done := 0
		for _, al := range as {
			if al.ID != first.ID {
				placed2 = al.CreateTime
			}
			if al.ClientStatus == "complete" {
				done++
			}
		}
		return len(as) == 2 && done == 2, fmt.Sprintf("%d allocs, %d complete", len(as), done)
	})

	ranks := map[string]bool{}
	for _, al := range allocs() {
		var logs string
		if err := a.get(t, "/v1/client/fs/logs/"+al.ID+"?task=trainer&type=stdout&plain=true", &logs); err != nil {
			t.Fatal(err)
		}
		t.Logf("alloc %s (%s): %s (second member placed at %d)", al.ID[:8], al.Name, strings.TrimSpace(logs), placed2)
		var rank, world string
		var started int64
		for _, f := range strings.Fields(logs) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "RANK":
				rank = v
			case "WORLD_SIZE":
				world = v
			case "STARTED":
				started, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		if world != "2" || (rank != "0" && rank != "1") {
			t.Fatalf("alloc %s printed %q", al.ID, logs)
		}
		ranks[rank] = true
		if started < placed2 {
			t.Fatalf("alloc %s started at %d, before the second member was placed at %d", al.ID, started, placed2)
		}
	}
	if len(ranks) != 2 {
		t.Fatalf("ranks %v, want 0 and 1", ranks)
	}
}

const survivorHCL = `
job "survivor" {
  type = "batch"
  group "g" {
    task "trainer" {
      driver       = "impact-exec"
      kill_signal  = "SIGTERM"
      kill_timeout = "5s"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'echo got-usr1' USR1; trap 'echo got-term; exit 0' TERM; echo started; while true; do sleep 0.2; done"]
        gang {
          size = 1
        }
      }
      resources {
        cpu    = 50
        memory = 64
      }
    }
  }
}
`

// pluginPIDs lists the impact-exec plugin processes the agent runs (not
// the task supervisors, which run `impact-exec supervise`).
func (a *agent) pluginPIDs() []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	want := filepath.Join(a.PluginDir, "impact-exec")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, _ := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if exe == want && !strings.Contains(string(cmdline), "supervise") {
			out = append(out, pid)
		}
	}
	return out
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && len(b) > i+2 && b[i+2] != 'Z'
}

// A running task survives a crash of the plugin and a restart of the
// agent: it is recovered (RecoverTask), keeps its process, and can then be
// signalled, measured and stopped.
func TestTaskSurvivesPluginCrashAndAgentRestart(t *testing.T) {
	if _, err := exec.LookPath("nomad"); err != nil {
		t.Skip("no nomad binary on PATH")
	}
	srv, err := gang.StartServer("127.0.0.1:0", gang.RegistryConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	a := startAgent(t, srv.URL)
	a.waitDriver(t)
	jobFile := filepath.Join(t.TempDir(), "survivor.nomad.hcl")
	os.WriteFile(jobFile, []byte(survivorHCL), 0o644)
	a.nomad(t, "job", "run", "-detach", jobFile)

	var alloc allocStub
	logs := func() string {
		var out string
		_ = a.get(t, "/v1/client/fs/logs/"+alloc.ID+"?task=trainer&type=stdout&plain=true", &out)
		return out
	}
	eventually(t, 60*time.Second, "task running", func() (bool, string) {
		var as []allocStub
		_ = a.get(t, "/v1/job/survivor/allocations", &as)
		if len(as) != 1 {
			return false, fmt.Sprintf("%d allocs", len(as))
		}
		alloc = as[0]
		return alloc.ClientStatus == "running" && strings.Contains(logs(), "started"), alloc.ClientStatus
	})
	// The program can print "started" before its supervisor records it
	// running (the status file is written after the child starts): wait
	// for the record.
	var st taskStatus
	eventually(t, 30*time.Second, "the task's status records its running child", func() (bool, string) {
		for _, s := range taskStatuses(a.Dir) {
			st = s
		}
		return st.ChildPID != 0 && alive(st.ChildPID), fmt.Sprintf("%+v", st)
	})
	t.Logf("task pid %d, supervisor pid %d", st.ChildPID, st.SupervisorPID)

	// 1. The plugin crashes: Nomad relaunches it and recovers the task.
	old := a.pluginPIDs()
	if len(old) != 1 {
		t.Fatalf("plugin processes: %v", old)
	}
	if err := syscall.Kill(old[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "plugin relaunched and task recovered", func() (bool, string) {
		now := a.pluginPIDs()
		return len(now) == 1 && now[0] != old[0] && strings.Contains(a.Output(), "task recovered"), fmt.Sprint(now)
	})
	if !alive(st.ChildPID) {
		t.Fatal("task died with the plugin")
	}

	// 2. The agent restarts: the task keeps running and is recovered again.
	a.Stop()
	if !alive(st.ChildPID) {
		t.Fatal("task died with the agent")
	}
	a.Restart()
	a.waitDriver(t)
	eventually(t, 60*time.Second, "task recovered after agent restart", func() (bool, string) {
		var as []allocStub
		_ = a.get(t, "/v1/job/survivor/allocations", &as)
		ok := len(as) == 1 && as[0].ClientStatus == "running" && strings.Contains(a.Output(), "task recovered")
		return ok, fmt.Sprintf("%+v", as)
	})
	if !alive(st.ChildPID) {
		t.Fatal("task died across the agent restart")
	}

	// 3. Stats and signals work on the recovered task.
	eventually(t, 30*time.Second, "allocation stats with the task's memory", func() (bool, string) {
		var stats struct {
			ResourceUsage struct{ MemoryStats struct{ RSS uint64 } }
		}
		err := a.get(t, "/v1/client/allocation/"+alloc.ID+"/stats", &stats)
		return err == nil && stats.ResourceUsage.MemoryStats.RSS > 0, fmt.Sprint(err, stats)
	})
	a.nomad(t, "alloc", "signal", "-s", "SIGUSR1", alloc.ID, "trainer")
	eventually(t, 30*time.Second, "USR1 reached the task", func() (bool, string) {
		return strings.Contains(logs(), "got-usr1"), logs()
	})

	// 4. Stopping the job stops the recovered task with its kill signal.
	a.nomad(t, "job", "stop", "-detach", "survivor")
	eventually(t, 60*time.Second, "task stopped", func() (bool, string) {
		return !alive(st.ChildPID) && strings.Contains(logs(), "got-term"), logs()
	})
	t.Logf("task output:\n%s", logs())
}

const propagateHCL = `
job "prop" {
  type = "batch"
  meta {
    impact_checkpoint_signal = "SIGUSR1"
    impact_grace             = "2s"
  }
  group "workers" {
    count = 2
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "trainer" {
      driver = "impact-exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'echo checkpoint' USR1; trap 'echo interrupted; exit 130' INT; echo rank=$RANK; if [ \"$RANK\" = 1 ]; then sleep 2; exit 3; fi; while true; do sleep 0.2; done"]
        gang {
          size = 2
        }
      }
      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}

job "lonely" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "trainer" {
      driver = "impact-exec"
      config {
        command = "/bin/true"
        gang {
          size    = 2
          timeout = "3s"
        }
      }
      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
`

func taskEvents(al allocStub) string {
	var msgs []string
	for _, ev := range al.TaskStates["trainer"].Events {
		msgs = append(msgs, ev.Type+": "+ev.DisplayMessage)
	}
	return strings.Join(msgs, "\n")
}

// A failing member makes its peer checkpoint and stop; a member whose gang
// never completes fails with an event naming how many arrived.
func TestGangFailureAndTimeoutOnNomad(t *testing.T) {
	if _, err := exec.LookPath("nomad"); err != nil {
		t.Skip("no nomad binary on PATH")
	}
	srv, err := gang.StartServer("127.0.0.1:0", gang.RegistryConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	a := startAgent(t, srv.URL)
	a.waitDriver(t)
	dir := t.TempDir()
	for i, job := range strings.SplitAfter(propagateHCL, "\n}\n") {
		if strings.TrimSpace(job) == "" {
			continue
		}
		f := filepath.Join(dir, fmt.Sprintf("job%d.nomad.hcl", i))
		os.WriteFile(f, []byte(job), 0o644)
		a.nomad(t, "job", "run", "-detach", f)
	}
	allocsOf := func(job string) []allocStub {
		var as []allocStub
		_ = a.get(t, "/v1/job/"+job+"/allocations", &as)
		return as
	}
	logsOf := func(al allocStub) string {
		var out string
		_ = a.get(t, "/v1/client/fs/logs/"+al.ID+"?task=trainer&type=stdout&plain=true", &out)
		return out
	}
	eventually(t, 90*time.Second, "both members of prop failed", func() (bool, string) {
		as := allocsOf("prop")
		failed := 0
		for _, al := range as {
			if al.ClientStatus == "failed" {
				failed++
			}
		}
		return len(as) == 2 && failed == 2, fmt.Sprintf("%d allocs, %d failed", len(as), failed)
	})
	ranks := map[string]int{}
	for _, al := range allocsOf("prop") {
		out, evs := logsOf(al), taskEvents(al)
		t.Logf("%s:\n%s\nevents:\n%s", al.Name, out, evs)
		for _, r := range []string{"rank=0", "rank=1"} {
			if strings.Contains(out, r) {
				ranks[r]++
			}
		}
		if strings.Contains(out, "rank=0") {
			if !strings.Contains(out, "checkpoint\ninterrupted") {
				t.Errorf("rank 0 was not checkpointed then interrupted: %q", out)
			}
			if !strings.Contains(evs, "Driver: Gang default:prop is failed") || !strings.Contains(evs, "exited with code 3") ||
				!strings.Contains(evs, "sending checkpoint signal SIGUSR1, stopping in 2s") {
				t.Errorf("rank 0 events lack the propagation: %s", evs)
			}
		}
	}
	// The checks above ran: one member printed each rank.
	if ranks["rank=0"] != 1 || ranks["rank=1"] != 1 {
		t.Fatalf("ranks printed by the members: %v, want rank=0 and rank=1 once each", ranks)
	}
	eventually(t, 60*time.Second, "lonely member failed at the barrier", func() (bool, string) {
		as := allocsOf("lonely")
		if len(as) != 1 {
			return false, fmt.Sprintf("%d allocs", len(as))
		}
		evs := taskEvents(as[0])
		return as[0].ClientStatus == "failed" && strings.Contains(evs, "Gang barrier timed out after 3s: 1 of 2 members arrived"), evs
	})
	t.Logf("lonely events:\n%s", taskEvents(allocsOf("lonely")[0]))
}

const nomadRdzvHCL = `
job "nomadrdzv" {
  type = "batch"
  group "workers" {
    count = 2
    network {
      port "rdzv" {}
    }
    service {
      provider = "nomad"
      name     = "nomadrdzv"
      port     = "rdzv"
      tags     = ["alloc_index=${NOMAD_ALLOC_INDEX}"]
    }
    task "trainer" {
      driver = "impact-exec"
      identity {
        env = true
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo RANK=$RANK WORLD_SIZE=$WORLD_SIZE MASTER_PORT=$MASTER_PORT PORT=$NOMAD_PORT_rdzv; sleep 1"]
        gang {
          discovery = "nomad"
          service   = "nomadrdzv"
          size      = 2
          timeout   = "2m"
        }
      }
      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
`

// Rendezvous through Nomad's own service discovery (no impact agent): the
// members find each other through a Nomad-native service read over the
// task API socket with their workload identity.
func TestGangNomadServiceDiscovery(t *testing.T) {
	if _, err := exec.LookPath("nomad"); err != nil {
		t.Skip("no nomad binary on PATH")
	}
	a := startAgent(t, "http://127.0.0.1:1") // the impact rendezvous is not used
	a.waitDriver(t)
	f := filepath.Join(t.TempDir(), "nomadrdzv.nomad.hcl")
	os.WriteFile(f, []byte(nomadRdzvHCL), 0o644)
	a.nomad(t, "job", "run", "-detach", f)
	var as []allocStub
	eventually(t, 90*time.Second, "both members complete", func() (bool, string) {
		as = nil
		_ = a.get(t, "/v1/job/nomadrdzv/allocations", &as)
		done := 0
		for _, al := range as {
			if al.ClientStatus == "complete" {
				done++
			}
		}
		return len(as) == 2 && done == 2, fmt.Sprintf("%d allocs, %d complete; %s", len(as), done, func() string {
			if len(as) > 0 {
				return taskEvents(as[0])
			}
			return ""
		}())
	})
	got := map[string]map[string]string{}
	for _, al := range as {
		var out string
		_ = a.get(t, "/v1/client/fs/logs/"+al.ID+"?task=trainer&type=stdout&plain=true", &out)
		t.Logf("%s: %s", al.Name, strings.TrimSpace(out))
		kv := map[string]string{}
		for _, f := range strings.Fields(out) {
			k, v, _ := strings.Cut(f, "=")
			kv[k] = v
		}
		got[kv["RANK"]] = kv
	}
	r0, r1 := got["0"], got["1"]
	if r0 == nil || r1 == nil || r0["WORLD_SIZE"] != "2" || r1["WORLD_SIZE"] != "2" {
		t.Fatalf("ranks: %v", got)
	}
	// Rank 0's own service port is everybody's MASTER_PORT.
	if r0["MASTER_PORT"] != r0["PORT"] || r1["MASTER_PORT"] != r0["PORT"] {
		t.Fatalf("master port: %v", got)
	}
}

const gpuGangHCL = `
job "gpu-gang" {
  type = "batch"
  meta {
    impact_tier              = "high"
    impact_project           = "olmo"
    impact_checkpoint_signal = "SIGUSR1"
    impact_grace             = "30s"
  }
  group "workers" {
    count = 2
    task "trainer" {
      driver = "impact-exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo RANK=$RANK LOCAL_RANK=$LOCAL_RANK LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE GPUS=$CUDA_VISIBLE_DEVICES"]
        gang {
          size = 2
        }
      }
      resources {
        cpu    = 50
        memory = 32
        device "nvidia/gpu" {
          count = 4
        }
      }
    }
  }
}
`

// The driver and the device plugin together: two members of a gang on one
// node of two 4-GPU NVLink islands each get one whole island, disjoint,
// and see them in CUDA_VISIBLE_DEVICES next to their ranks.
func TestGangWithGPUs(t *testing.T) {
	if _, err := exec.LookPath("nomad"); err != nil {
		t.Skip("no nomad binary on PATH")
	}
	srv, err := gang.StartServer("127.0.0.1:0", gang.RegistryConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const topo = "two-islands-8x-a100.hcl"
	a := startAgentWith(t, srv.URL, func(dir string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", "example", "topologies", topo))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, topo)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf(`plugin "impact-gpu" {
  config {
    backend       = "fake"
    fake_topology = %q
    group_by      = "island"
  }
}`, path)
	})
	a.waitDriver(t)
	f := filepath.Join(t.TempDir(), "gpu-gang.nomad.hcl")
	os.WriteFile(f, []byte(gpuGangHCL), 0o644)
	a.nomad(t, "job", "run", "-detach", f)
	var as []allocStub
	eventually(t, 90*time.Second, "both GPU members complete", func() (bool, string) {
		as = nil
		_ = a.get(t, "/v1/job/gpu-gang/allocations", &as)
		done := 0
		for _, al := range as {
			if al.ClientStatus == "complete" {
				done++
			}
		}
		info := fmt.Sprintf("%d allocs, %d complete", len(as), done)
		if len(as) > 0 {
			info += "; " + taskEvents(as[0])
		}
		return len(as) == 2 && done == 2, info
	})
	// GPU UUID -> index, from the topology file.
	index := map[string]int{}
	topoText, _ := os.ReadFile(filepath.Join("..", "..", "example", "topologies", topo))
	cur := -1
	for _, line := range strings.Split(string(topoText), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.Trim(strings.TrimSpace(v), `"`)
		switch k {
		case "index":
			cur, _ = strconv.Atoi(v)
		case "uuid":
			index[v] = cur
		}
	}
	if len(index) != 8 {
		t.Fatalf("topology: %v", index)
	}
	seen := map[string]string{}
	localRanks := map[string]bool{}
	for _, al := range as {
		var out string
		_ = a.get(t, "/v1/client/fs/logs/"+al.ID+"?task=trainer&type=stdout&plain=true", &out)
		t.Logf("%s: %s", al.Name, strings.TrimSpace(out))
		kv := map[string]string{}
		for _, f := range strings.Fields(out) {
			k, v, _ := strings.Cut(f, "=")
			kv[k] = v
		}
		gpus := strings.Split(kv["GPUS"], ",")
		if len(gpus) != 4 || kv["LOCAL_WORLD_SIZE"] != "2" {
			t.Fatalf("%s: %q", al.Name, out)
		}
		// One NVLink island: indices 0-3 or 4-7 of the topology.
		islands := map[int]bool{}
		for _, g := range gpus {
			idx, ok := index[g]
			if !ok {
				t.Fatalf("%s: unknown GPU %s", al.Name, g)
			}
			islands[idx/4] = true
		}
		if len(islands) != 1 {
			t.Fatalf("%s: GPUs span islands: %v", al.Name, gpus)
		}
		localRanks[kv["LOCAL_RANK"]] = true
		for _, g := range gpus {
			if other, dup := seen[g]; dup {
				t.Fatalf("GPU %s given to both %s and %s", g, other, al.Name)
			}
			seen[g] = al.Name
		}
	}
	if len(seen) != 8 || !localRanks["0"] || !localRanks["1"] {
		t.Fatalf("GPUs %v, local ranks %v", seen, localRanks)
	}
}

const blocksHCL = `
job "blocks" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "exec" {
      driver = "impact-exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo GPUS=$CUDA_VISIBLE_DEVICES NVIDIA=$NVIDIA_VISIBLE_DEVICES"]
        gang {
          size = 1
        }
      }
      resources {
        cpu    = 20
        memory = 32
        device "nvidia/gpu" {
          count = 2
        }
        device "nvidia/gpu" {
          count = 3
        }
      }
    }
    task "raw" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo GPUS=$CUDA_VISIBLE_DEVICES NVIDIA=$NVIDIA_VISIBLE_DEVICES"]
      }
      resources {
        cpu    = 20
        memory = 32
        device "nvidia/gpu" {
          count = 1
        }
        device "nvidia/gpu" {
          count = 2
        }
      }
    }
  }
}
`

// TestSeveralDeviceBlocks: on real Nomad with impact-gpu's shipped
// defaults, an impact-exec task with two GPU device blocks sees the GPUs
// of both in CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES (exactly what
// Nomad allocated to the task); a raw_exec task with two blocks sees only
// its last block's GPUs there, as the docs say (Nomad merges the blocks'
// env last-wins).
func TestSeveralDeviceBlocks(t *testing.T) {
	if _, err := exec.LookPath("nomad"); err != nil {
		t.Skip("no nomad binary on PATH")
	}
	srv, err := gang.StartServer("127.0.0.1:0", gang.RegistryConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const topo = "two-islands-8x-a100.hcl"
	a := startAgentWith(t, srv.URL, func(dir string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", "example", "topologies", topo))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, topo)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf(`plugin "impact-gpu" {
  config {
    backend       = "fake"
    fake_topology = %q
  }
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}`, path)
	})
	a.waitDriver(t)
	f := filepath.Join(t.TempDir(), "blocks.nomad.hcl")
	if err := os.WriteFile(f, []byte(blocksHCL), 0o644); err != nil {
		t.Fatal(err)
	}
	a.nomad(t, "job", "run", "-detach", f)
	var as []allocStub
	eventually(t, 90*time.Second, "the allocation complete", func() (bool, string) {
		as = nil
		_ = a.get(t, "/v1/job/blocks/allocations", &as)
		info := fmt.Sprintf("%d allocs", len(as))
		for _, al := range as {
			info += " " + al.ClientStatus
			for task, ts := range al.TaskStates {
				for _, ev := range ts.Events {
					info += fmt.Sprintf("; %s: %s %s", task, ev.Type, ev.DisplayMessage)
				}
			}
		}
		return len(as) >= 1 && as[0].ClientStatus == "complete", info
	})
	var full struct {
		AllocatedResources struct {
			Tasks map[string]struct {
				Devices []struct{ DeviceIDs []string }
			}
		}
	}
	if err := a.get(t, "/v1/allocation/"+as[0].ID, &full); err != nil {
		t.Fatal(err)
	}
	sortedList := func(s string) string {
		l := strings.Split(s, ",")
		sort.Strings(l)
		return strings.Join(l, ",")
	}
	for _, tc := range []struct {
		task string
		all  bool // sees every block's GPUs, else only the last block's
	}{{"exec", true}, {"raw", false}} {
		devs := full.AllocatedResources.Tasks[tc.task].Devices
		if len(devs) != 2 {
			t.Fatalf("task %s: %d allocated device blocks, want 2: %+v", tc.task, len(devs), devs)
		}
		want := devs[1].DeviceIDs
		if tc.all {
			want = append(append([]string(nil), devs[0].DeviceIDs...), devs[1].DeviceIDs...)
		}
		var out string
		_ = a.get(t, "/v1/client/fs/logs/"+as[0].ID+"?task="+tc.task+"&type=stdout&plain=true", &out)
		kv := map[string]string{}
		for _, f := range strings.Fields(out) {
			k, v, _ := strings.Cut(f, "=")
			kv[k] = v
		}
		w := sortedList(strings.Join(want, ","))
		if sortedList(kv["GPUS"]) != w || sortedList(kv["NVIDIA"]) != w {
			t.Errorf("task %s: CUDA_VISIBLE_DEVICES=%s NVIDIA_VISIBLE_DEVICES=%s, want %s (allocated %+v)", tc.task, kv["GPUS"], kv["NVIDIA"], w, devs)
		} else {
			t.Logf("task %s (%s): sees %d GPUs: %s", tc.task, map[bool]string{true: "impact-exec, every block", false: "raw_exec, last block"}[tc.all], len(want), kv["GPUS"])
		}
	}
}

// nomadQuickHCL: a Nomad-discovery gang with no gang.size (the job's
// allocation count, 2, read from Nomad) whose members end as soon as they
// pass the barrier.
const nomadQuickHCL = `
job "%[1]s" {
  type = "batch"
  group "workers" {
    count = 2
    network {
      port "rdzv" {}
    }
    service {
      provider = "nomad"
      name     = "%[1]s"
      port     = "rdzv"
      tags     = ["alloc_index=${NOMAD_ALLOC_INDEX}"]
    }
    restart {
      attempts = 0
    }
    task "trainer" {
      driver = "impact-exec"
      identity {
        env = true
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo RANK=$RANK WORLD_SIZE=$WORLD_SIZE"]
        gang {
          discovery = "nomad"
          service   = "%[1]s"
          timeout   = "3m"
        }
      }
      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
`

// Members that end at once after a Nomad-discovery barrier, several gangs
// at a time: none is stranded (each member keeps its registration for the
// hold after passing, and says so), and the gang size comes from the job.
func TestGangNomadDiscoveryMembersEndingAtOnce(t *testing.T) {
	if _, err := exec.LookPath("nomad"); err != nil {
		t.Skip("no nomad binary on PATH")
	}
	a := startAgent(t, "http://127.0.0.1:1")
	a.waitDriver(t)
	const gangs = 4
	for i := range gangs {
		f := filepath.Join(t.TempDir(), fmt.Sprintf("quick%d.nomad.hcl", i))
		os.WriteFile(f, []byte(fmt.Sprintf(nomadQuickHCL, fmt.Sprintf("quick%d", i))), 0o644)
		a.nomad(t, "job", "run", "-detach", f)
	}
	for i := range gangs {
		job := fmt.Sprintf("quick%d", i)
		var as []allocStub
		eventually(t, 2*time.Minute, job+": both members complete", func() (bool, string) {
			as = nil
			_ = a.get(t, "/v1/job/"+job+"/allocations", &as)
			done, events := 0, ""
			for _, al := range as {
				if al.ClientStatus == "complete" {
					done++
				}
				events += al.Name + ": " + taskEvents(al) + "\n"
			}
			return len(as) == 2 && done == 2, fmt.Sprintf("%d allocs, %d complete\n%s", len(as), done, events)
		})
		ranks := map[string]bool{}
		for _, al := range as {
			var out string
			_ = a.get(t, "/v1/client/fs/logs/"+al.ID+"?task=trainer&type=stdout&plain=true", &out)
			kv := map[string]string{}
			for _, f := range strings.Fields(out) {
				k, v, _ := strings.Cut(f, "=")
				kv[k] = v
			}
			if kv["WORLD_SIZE"] != "2" {
				t.Fatalf("%s %s: %q, want WORLD_SIZE=2 (the job's count)", job, al.Name, out)
			}
			ranks[kv["RANK"]] = true
			if ev := taskEvents(al); !strings.Contains(ev, "keeping its Nomad service registration") {
				t.Errorf("%s %s: no hold event: %s", job, al.Name, ev)
			}
		}
		if !ranks["0"] || !ranks["1"] {
			t.Fatalf("%s: ranks %v", job, ranks)
		}
	}
}
