package scheduler

// TestEvaluationsPerAdmission counts, from Nomad's own API, the job
// versions and evaluations an admission through the impact queue costs,
// against the same job run on plain Nomad, on one real cluster (one
// server, one client of 8 fake GPUs, the impact agent with its default
// cycle) (issue 39: "no extra evaluation per admission where one can be
// avoided"). Measured on Nomad 2.0.5 and asserted exactly:
//
//   - plain Nomad: a job that fits at once has 1 version and 1
//     evaluation (job-register); one that has to wait 1 version and 2
//     (job-register, and the blocked one, queued-allocs, that places it
//     when capacity frees);
//   - the impact queue, fit, wait or gang alike: 2 versions (the user's,
//     in the parking pool, and the admission's, pinned in its pool) and 3
//     evaluations: the user's job-register, the blocked (queued-allocs)
//     evaluation the scheduler makes because nothing can be placed in the
//     parking pool (Nomad re-runs that same evaluation on every capacity
//     change while the job waits, so waiting adds none), and the
//     admission's job-register, which places the job and makes Nomad
//     cancel the blocked one.
//
// None of the three can be avoided with the parking pool. Every register
// of a job that is neither periodic nor parameterized makes an evaluation
// (nomad/job_endpoint.go Register), and the admission has to change the
// job (pool and pins), which is a new version. The blocked evaluation is
// the one that keeps a parked job alive: a batch job is "pending", and
// not garbage-collected, only while it has a non-terminal evaluation or
// allocation (state_store.go getJobStatus); without it a parked job is
// "dead", and `nomad system gc` purges it with its versions
// (TestParkingCandidates shows both).

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/e2e/internal/nomadagent"
)

// jobCost is what a job cost Nomad: its versions (by node pool) and its
// evaluations (TriggeredBy:Status).
type jobCost struct {
	pools []string
	evals []string
}

func (c jobCost) String() string {
	return fmt.Sprintf("%d versions %v, %d evaluations %v", len(c.pools), c.pools, len(c.evals), c.evals)
}

// nonTerminal is the number of the job's evaluations still pending or
// blocked.
func (c jobCost) nonTerminal() int {
	n := 0
	for _, ev := range c.evals {
		if strings.HasSuffix(ev, ":blocked") || strings.HasSuffix(ev, ":pending") {
			n++
		}
	}
	return n
}

// triggers counts the job's evaluations by TriggeredBy.
func (c jobCost) triggers() map[string]int {
	out := map[string]int{}
	for _, ev := range c.evals {
		trig, _, _ := strings.Cut(ev, ":")
		out[trig]++
	}
	return out
}

func (e *lcEnv) cost(job string) jobCost {
	var vs struct {
		Versions []struct {
			Version  int
			NodePool string
		}
	}
	var c jobCost
	if err := e.a.Get("/v1/job/"+job+"/versions", &vs); err != nil {
		e.t.Fatalf("versions of %s: %v", job, err)
	}
	sort.Slice(vs.Versions, func(i, j int) bool { return vs.Versions[i].Version < vs.Versions[j].Version })
	for _, v := range vs.Versions {
		c.pools = append(c.pools, v.NodePool)
	}
	var evs []struct {
		TriggeredBy, Status string
		CreateIndex         uint64
	}
	if err := e.a.Get("/v1/job/"+job+"/evaluations", &evs); err != nil {
		e.t.Fatalf("evaluations of %s: %v", job, err)
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].CreateIndex < evs[j].CreateIndex })
	for _, ev := range evs {
		c.evals = append(c.evals, ev.TriggeredBy+":"+ev.Status)
	}
	return c
}

// settledCost waits until the job runs want allocations and none of its
// evaluations is pending or blocked any more, and returns its cost.
func (e *lcEnv) settledCost(job string, want int) jobCost {
	e.t.Helper()
	e.waitRunningN(job, want, 60*time.Second)
	var c jobCost
	eventually(e.t, 30*time.Second, job+": no evaluation pending or blocked", func() (bool, string) {
		c = e.cost(job)
		return c.nonTerminal() == 0, c.String()
	})
	return c
}

func TestEvaluationsPerAdmission(t *testing.T) {
	c, impact := startGPUClusterWith(t, "impact-e2e-evals-", 1, "")
	e := &lcEnv{c: c, env: &env{t: t, a: c.Agent, dir: c.Dir, impact: impact, logLevel: "info",
		// The agent's defaults for interval and debounce.
		cycle:  "cycle {\n  admission_deadline = \"1m\"\n}\n",
		apiURL: fmt.Sprintf("http://127.0.0.1:%d", nomadagent.FreePorts(t, 1)[0])}}
	e.impactProc = e.startImpact(t)
	forever := `trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done`
	costs := map[string]jobCost{}

	// Fit: an idle node.
	for _, mode := range []string{"plain", "impact"} {
		name := "ev-fit-" + mode
		runHCL(t, e.a, e.dir, name, latJob(mode, name, 1, "", forever))
		costs[name] = e.settledCost(name, 1)
	}
	e.purgeAll("ev-fit-plain", "ev-fit-impact")

	// Wait: both jobs are submitted while a plain job holds all 8 GPUs,
	// and start once it stops.
	runHCL(t, e.a, e.dir, "ev-filler", latJob("plain", "ev-filler", 8, "", forever))
	e.waitRunningN("ev-filler", 8, 60*time.Second)
	for _, mode := range []string{"plain", "impact"} {
		name := "ev-wait-" + mode
		runHCL(t, e.a, e.dir, name, latJob(mode, name, 1, "", forever))
	}
	eventually(t, 30*time.Second, "ev-wait-impact waiting in the impact queue", func() (bool, string) {
		ex := e.explain("ev-wait-impact")
		return strings.HasPrefix(ex, "waiting/"), ex
	})
	eventually(t, 30*time.Second, "ev-wait-plain blocked in Nomad", func() (bool, string) {
		c := e.cost("ev-wait-plain")
		return c.nonTerminal() == 1, c.String()
	})
	waitCycles(t, e.apiURL, 2)
	if _, err := e.nomad("job", "stop", "-purge", "-detach", "ev-filler"); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"plain", "impact"} {
		name := "ev-wait-" + mode
		costs[name] = e.settledCost(name, 1)
	}
	e.purgeAll("ev-wait-plain", "ev-wait-impact")

	// A gang of two allocations of 2 GPUs: one admission for both.
	runHCL(t, e.a, e.dir, "ev-gang-impact", parkedJob{name: "ev-gang-impact", meta: map[string]string{"impact_tier": "normal"},
		count: 2, gpus: 2, script: forever}.hcl())
	costs["ev-gang-impact"] = e.settledCost("ev-gang-impact", 2)

	for _, name := range []string{"ev-fit-plain", "ev-fit-impact", "ev-wait-plain", "ev-wait-impact", "ev-gang-impact"} {
		t.Logf("%-15s %s", name, costs[name])
	}
	check := func(name string, versions int, triggers map[string]int) {
		t.Helper()
		c := costs[name]
		if len(c.pools) != versions || fmt.Sprint(c.triggers()) != fmt.Sprint(triggers) {
			t.Errorf("%s cost %s; want %d versions and evaluations %v", name, c, versions, triggers)
		}
	}
	check("ev-fit-plain", 1, map[string]int{"job-register": 1})
	check("ev-wait-plain", 1, map[string]int{"job-register": 1, "queued-allocs": 1})
	for _, name := range []string{"ev-fit-impact", "ev-wait-impact", "ev-gang-impact"} {
		check(name, 2, map[string]int{"job-register": 2, "queued-allocs": 1})
		if c := costs[name]; len(c.pools) == 2 && (c.pools[0] != "impact-queue" || c.pools[1] != "default") {
			t.Errorf("%s: versions in pools %v, want the parking pool, then the admission's", name, c.pools)
		}
	}
}
