package scheduler

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/e2e/internal/nomadagent"
)

// The exact-GPU suites: with impact-gpu's shipped defaults (one device
// group per model), every task gets exactly the GPUs the engine chose, for
// any ask up to a whole node. Each task writes the CUDA_VISIBLE_DEVICES it
// was started with; the test compares it with the GPUs Nomad allocated
// (the allocation's AllocatedResources) and with the plan's (the impact
// agent's /v1/explain placement), and checks that no admission was rolled
// back and no pin mismatch was counted.

// gpuJobHCL is a batch job of count allocations, each one task "t"
// (raw_exec) with one device block of gpus GPUs, that writes its
// CUDA_VISIBLE_DEVICES to <envDir>/<name>-<alloc ID> and sleeps.
func gpuJobHCL(name string, count, gpus int, topology, envDir string) string {
	meta := map[string]string{}
	if topology != "" {
		meta["impact_topology"] = topology
	}
	script := fmt.Sprintf(`echo "$CUDA_VISIBLE_DEVICES" > %s/%s-$NOMAD_ALLOC_ID; trap 'exit 0' TERM; sleep 600 & wait`, envDir, name)
	return parkedGPUJob(name, meta, count, gpus, script)
}

// parkedGPUJob is the jobspec the suites submit to the parking pool (see
// parkedJob), with Nomad's default kill signal and a 2s kill timeout.
func parkedGPUJob(name string, meta map[string]string, count, gpus int, script string) string {
	return parkedJob{name: name, meta: meta, count: count, gpus: gpus, script: script}.hcl()
}

// parkedJob is a jobspec for the parking pool: a batch job with meta, one
// group "g" of count allocations that Nomad neither restarts nor
// reschedules (the impact agent decides what runs again), each one
// raw_exec task "t" running script under /bin/sh with one device block of
// gpus GPUs.
type parkedJob struct {
	name        string
	meta        map[string]string
	count, gpus int
	script      string
	// node, when set, pins the job to the node of that name with a
	// job-level constraint (the model honours ${node.unique.name}).
	node string
	// killSignal is the task's kill_signal ("": Nomad's default, SIGINT),
	// killTimeout its kill_timeout (0: 2s).
	killSignal  string
	killTimeout time.Duration
}

func (p parkedJob) hcl() string {
	keys := make([]string, 0, len(p.meta))
	for k := range p.meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var mb strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&mb, "    %s = %q\n", k, p.meta[k])
	}
	constraint := ""
	if p.node != "" {
		constraint = fmt.Sprintf(`
  constraint {
    attribute = "${node.unique.name}"
    value     = %q
  }`, p.node)
	}
	kill := ""
	if p.killSignal != "" {
		kill = fmt.Sprintf("\n      kill_signal  = %q", p.killSignal)
	}
	timeout := p.killTimeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	return fmt.Sprintf(`job %q {
  type      = "batch"
  node_pool = "impact-queue"
  meta {
%s  }%s
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
      driver       = "raw_exec"%s
      kill_timeout = "%ds"
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
`, p.name, mb.String(), constraint, p.count, kill, int(timeout.Seconds()), p.script, p.gpus)
}

func runHCL(t *testing.T, a *nomadagent.Agent, dir, name, hcl string) {
	t.Helper()
	path := filepath.Join(dir, name+".nomad.hcl")
	if err := os.WriteFile(path, []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := a.CLI("job", "run", "-detach", path); err != nil {
		t.Fatalf("nomad job run %s: %v\n%s", name, err, out)
	}
}

type allocDevices struct {
	ID, NodeID, ClientStatus string
	AllocatedResources       struct {
		Tasks map[string]struct {
			Devices []struct {
				Type      string
				DeviceIDs []string
			}
		}
	}
}

// placed is an allocation as the test saw it: where it runs, what Nomad
// allocated, what the task saw.
type placed struct {
	alloc, node   string
	allocated     []string
	visible       []string
	planned       []string // the plan's GPUs of the allocation's group on its node
	plannedIsland []int
}

// exactGPUs waits until every allocation of the job runs and its task has
// written what it sees, then checks, per allocation, that the task's
// CUDA_VISIBLE_DEVICES is the set Nomad allocated, and per node that
// Nomad's allocations there are exactly the plan's GPUs there.
func exactGPUs(t *testing.T, a *nomadagent.Agent, apiURL, envDir, name string, count int) []placed {
	t.Helper()
	var out []placed
	eventually(t, 120*time.Second, name+": every allocation running with its env written", func() (bool, string) {
		out = out[:0]
		var stubs []allocStub
		if err := a.Get("/v1/job/"+name+"/allocations", &stubs); err != nil {
			return false, err.Error()
		}
		for _, s := range stubs {
			if s.ClientStatus != "running" {
				continue
			}
			var full allocDevices
			if err := a.Get("/v1/allocation/"+s.ID, &full); err != nil {
				return false, err.Error()
			}
			p := placed{alloc: s.ID, node: full.NodeID}
			for _, d := range full.AllocatedResources.Tasks["t"].Devices {
				if d.Type == "gpu" {
					p.allocated = append(p.allocated, d.DeviceIDs...)
				}
			}
			b, err := os.ReadFile(filepath.Join(envDir, name+"-"+s.ID))
			if err != nil || len(strings.TrimSpace(string(b))) == 0 {
				return false, fmt.Sprintf("alloc %s: no env yet", s.ID)
			}
			p.visible = strings.Split(strings.TrimSpace(string(b)), ",")
			out = append(out, p)
		}
		var why struct{ State, Reason string }
		_ = getAPI(apiURL, "/v1/explain/"+name, &why)
		return len(out) == count, fmt.Sprintf("%d of %d running: %+v; impact: %s: %s", len(out), count, stubs, why.State, why.Reason)
	})
	// The engine's explanation of the admission, as /v1/explain shows it.
	type allocPlacement struct {
		Node    string `json:"node_id"`
		GPUs    []string
		Islands []int
	}
	var exp struct {
		Engine struct {
			Placement []struct {
				Group  string
				Allocs []allocPlacement
			}
		}
	}
	var allocs []allocPlacement
	eventually(t, 30*time.Second, name+": the agent explains the placement", func() (bool, string) {
		err := getAPI(apiURL, "/v1/explain/"+name, &exp)
		allocs = nil
		for _, g := range exp.Engine.Placement {
			allocs = append(allocs, g.Allocs...)
		}
		return err == nil && len(allocs) == count, fmt.Sprintf("%+v %v", exp, err)
	})
	plan := map[string][]string{}
	islands := map[string][]int{}
	for _, p := range allocs {
		plan[p.Node] = append(plan[p.Node], p.GPUs...)
		islands[p.Node] = append(islands[p.Node], p.Islands...)
	}
	got := map[string][]string{}
	for i := range out {
		p := &out[i]
		if v, al := sorted(p.visible), sorted(p.allocated); !slices.Equal(v, al) {
			t.Errorf("%s alloc %s on %s: CUDA_VISIBLE_DEVICES %v, Nomad allocated %v", name, p.alloc, p.node, v, al)
		}
		got[p.node] = append(got[p.node], p.allocated...)
		p.planned, p.plannedIsland = plan[p.node], islands[p.node]
	}
	for node, want := range plan {
		if g, w := sorted(got[node]), sorted(want); !slices.Equal(g, w) {
			t.Errorf("%s on %s: Nomad allocated %v, the plan pinned %v", name, node, g, w)
		} else {
			t.Logf("%s on %s: planned = allocated = visible: %s", name, node, strings.Join(w, ","))
		}
	}
	if len(got) != len(plan) {
		t.Errorf("%s: allocations on %d nodes, plan on %d", name, len(got), len(plan))
	}
	return out
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	sort.Strings(out)
	return out
}

// noRollbacks checks the impact agent's metrics: no admission rolled back
// and no pin mismatch read back.
func noRollbacks(t *testing.T, apiURL string) {
	t.Helper()
	var text string
	if err := getAPI(apiURL, "/metrics", &text); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(text, "\n") {
		for _, m := range []string{"impact_admissions_rollbacks_total", "impact_gpu_pin_mismatch_total"} {
			if v, ok := strings.CutPrefix(line, m+" "); ok && v != "0" {
				t.Errorf("%s = %s, want 0", m, v)
			} else if ok {
				t.Logf("%s = %s", m, v)
			}
		}
	}
}

// stopJob stops a job and waits until Nomad shows its allocations ended
// and the impact agent's model has their GPUs back (it holds none).
func (e *env) stopJob(t *testing.T, name string) {
	t.Helper()
	e.stopJobLeaving(t, name, 0)
}

// stopJobLeaving stops a job and waits until Nomad shows its allocations
// ended and the impact agent's model holds exactly want GPUs (the other
// jobs' ones).
func (e *env) stopJobLeaving(t *testing.T, name string, want int) {
	t.Helper()
	if out, err := e.nomad("job", "stop", "-detach", name); err != nil {
		t.Fatalf("stop %s: %v\n%s", name, err, out)
	}
	eventually(t, 60*time.Second, name+" stopped and its GPUs free in the model", func() (bool, string) {
		live := 0
		for _, a := range e.allocs(name) {
			if a.ClientStatus == "running" || a.ClientStatus == "pending" {
				live++
			}
		}
		var q struct {
			Cluster struct {
				AllocatedGPUs int `json:"allocated_gpus"`
			}
		}
		err := getAPI(e.apiURL, "/v1/queue", &q)
		return live == 0 && err == nil && q.Cluster.AllocatedGPUs == want, fmt.Sprintf("live %d, model %+v %v", live, q.Cluster, err)
	})
}

// TestExactGPUs: on a two-island 8-GPU node with the plugin's shipped
// defaults, an 8-GPU task runs; then 2-, 2- and 4-GPU jobs (the 4-GPU one
// impact_topology = "nvlink") run at the same time, the 4 in one island;
// every task sees exactly the GPUs Nomad allocated, which are the plan's;
// no admission is rolled back.
func TestExactGPUs(t *testing.T) {
	e := setupWith(t, false, "")
	e.startImpact(t)
	envDir := filepath.Join(e.dir, "env")
	if err := os.MkdirAll(envDir, 0o777); err != nil {
		t.Fatal(err)
	}

	runHCL(t, e.a, e.dir, "whole", gpuJobHCL("whole", 1, 8, "", envDir))
	if p := exactGPUs(t, e.a, e.apiURL, envDir, "whole", 1); len(p) == 1 && len(p[0].allocated) != 8 {
		t.Errorf("whole-node job got %d GPUs", len(p[0].allocated))
	}
	e.stopJob(t, "whole")

	runHCL(t, e.a, e.dir, "two-a", gpuJobHCL("two-a", 1, 2, "", envDir))
	runHCL(t, e.a, e.dir, "two-b", gpuJobHCL("two-b", 1, 2, "", envDir))
	runHCL(t, e.a, e.dir, "four", gpuJobHCL("four", 1, 4, "nvlink", envDir))
	all := map[string]bool{}
	var fourGPUs []string
	for _, j := range []struct {
		name string
		gpus int
	}{{"two-a", 2}, {"two-b", 2}, {"four", 4}} {
		for _, p := range exactGPUs(t, e.a, e.apiURL, envDir, j.name, 1) {
			if len(p.allocated) != j.gpus {
				t.Errorf("%s: %d GPUs, want %d", j.name, len(p.allocated), j.gpus)
			}
			for _, g := range p.allocated {
				if all[g] {
					t.Errorf("GPU %s given twice", g)
				}
				all[g] = true
			}
			if j.name == "four" {
				fourGPUs = p.allocated
				if len(p.plannedIsland) != 4 || slices.Min(p.plannedIsland) != slices.Max(p.plannedIsland) {
					t.Errorf("the NVLink job's GPUs are on islands %v, want one", p.plannedIsland)
				} else {
					t.Logf("four: island %d", p.plannedIsland[0])
				}
			}
		}
	}
	// All three at once: they share the node's 8 GPUs.
	for _, name := range []string{"two-a", "two-b", "four"} {
		if n := e.runningAllocs(name); n != 1 {
			t.Errorf("%s: %d running allocations, want 1 (all three at once)", name, n)
		}
	}
	if len(all) != 8 {
		t.Errorf("2 + 2 + 4 took %d distinct GPUs, want 8", len(all))
	}
	// The job's Variable, as the Nomad UI shows it, names each pinned GPU
	// with its island (each device block's GPUs are in the blocks item).
	eventually(t, 30*time.Second, "the Variable of four shows its pinned GPUs", func() (bool, string) {
		var v struct{ Items map[string]string }
		err := e.a.Get("/v1/var/nomad/jobs/four/impact", &v)
		p := v.Items["placement"]
		ok := err == nil && len(fourGPUs) == 4 && strings.Count(p, "(island ") == 4
		for _, g := range fourGPUs {
			ok = ok && strings.Contains(p, g+" (island ")
		}
		return ok, fmt.Sprintf("%q %v", p, err)
	})
	noRollbacks(t, e.apiURL)
}

// TestExactGPUsTwoNodes: on two Nomad client processes (each its own data
// dir, ports and fake two-island topology with distinct UUIDs), a gang of
// 2 allocations x 8 GPUs gets exactly its planned GPUs on both nodes.
func TestExactGPUsTwoNodes(t *testing.T) {
	c, impact := startGPUCluster(t, "impact-e2e-gpus-", 2)
	e := &env{t: t, a: c.Agent, dir: c.Dir, impact: impact,
		apiURL: fmt.Sprintf("http://127.0.0.1:%d", nomadagent.FreePorts(t, 1)[0])}
	e.startImpact(t)
	envDir := filepath.Join(e.dir, "env")
	if err := os.MkdirAll(envDir, 0o777); err != nil {
		t.Fatal(err)
	}
	runHCL(t, c.Agent, e.dir, "gang", gpuJobHCL("gang", 2, 8, "", envDir))
	ps := exactGPUs(t, c.Agent, e.apiURL, envDir, "gang", 2)
	nodes := map[string]bool{}
	for _, p := range ps {
		nodes[p.node] = true
		if len(p.allocated) != 8 {
			t.Errorf("alloc %s on %s: %d GPUs, want 8", p.alloc, p.node, len(p.allocated))
		}
	}
	if len(nodes) != 2 {
		t.Errorf("gang on %d nodes, want 2", len(nodes))
	}
	noRollbacks(t, e.apiURL)
}
