package scheduler

// TestStartLatency measures, side by side on one real multi-node Nomad
// cluster (one server, three clients of 8 fake GPUs each, the impact agent
// with its default cycle interval and debounce), how fast a job starts
// when it goes through the impact queue against plain Nomad (issue 39,
// "start as fast as Nomad would"):
//
//   - fit: a 1-GPU job submitted to an idle cluster; the time from the
//     job's first version's SubmitTime (Nomad's) to its task's "Started"
//     event (the client's). Plain and impact jobs alternate, one at a time.
//   - freed: client-0 is filled (7 GPUs held by one long job, then K
//     1-GPU jobs of 2 s each, all pinned to client-0, so one runs at a
//     time); the time from a job's task "Terminated" event to the next
//     job's "Started" event. The plain and impact chains alternate.
//
// Both take their times from Nomad's own events, so the test's own
// polling adds nothing. Also logged: versions and evaluations per fit job.
//
// A benchmark, not a check: it runs only with IMPACT_E2E_LATENCY=1 (it
// takes minutes) and fails only on a ratio over IMPACT_E2E_LATENCY_MAX_RATIO
// when that is set. IMPACT_E2E_LATENCY_N sets the number of fit jobs per
// mode (default 10) and of chain jobs per chain (default 6, two chains per
// mode). Run:
//
//	PATH=/opt/nomad-bin:$PATH IMPACT_E2E_LATENCY=1 go test -count=1 -v -timeout 30m -run TestStartLatency ./e2e/scheduler/

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/e2e/internal/nomadagent"
)

type latAlloc struct {
	ID, ClientStatus, DesiredStatus string
	TaskStates                      map[string]struct {
		Events []struct {
			Type string
			Time int64
		}
	}
}

// taskEvent is the first event of that type of the job's task "t", over
// all its allocations (0 if none).
func (e *lcEnv) taskEvent(job, typ string) int64 {
	var as []latAlloc
	_ = e.a.Get("/v1/job/"+job+"/allocations?all=true", &as)
	var first int64
	for _, a := range as {
		for _, ev := range a.TaskStates["t"].Events {
			if ev.Type == typ && (first == 0 || ev.Time < first) {
				first = ev.Time
			}
		}
	}
	return first
}

// firstSubmit is the SubmitTime of the job's first version, that of its
// second (the impact agent's admission, 0 if none), and the number of
// versions and evaluations the job has.
func (e *lcEnv) firstSubmit(job string) (submit, admitted int64, versions, evals int) {
	var vs struct {
		Versions []struct {
			Version    uint64
			SubmitTime int64
		}
	}
	_ = e.a.Get("/v1/job/"+job+"/versions", &vs)
	for _, v := range vs.Versions {
		if submit == 0 || v.SubmitTime < submit {
			submit = v.SubmitTime
		}
	}
	for _, v := range vs.Versions {
		if v.SubmitTime > submit && (admitted == 0 || v.SubmitTime < admitted) {
			admitted = v.SubmitTime
		}
	}
	var ev []struct{ ID string }
	_ = e.a.Get("/v1/job/"+job+"/evaluations", &ev)
	return submit, admitted, len(vs.Versions), len(ev)
}

func latEnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// latJob is a 1-GPU job for mode "plain" (node pool default) or "impact"
// (the parking pool).
func latJob(mode, name string, count int, node, script string) string {
	h := parkedJob{name: name, meta: map[string]string{"impact_tier": "normal"}, count: count, gpus: 1, script: script, node: node}.hcl()
	if mode == "plain" {
		h = strings.Replace(h, `node_pool = "impact-queue"`, `node_pool = "default"`, 1)
	}
	return h
}

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(p*float64(len(s)-1) + 0.5)
	return s[i]
}

func TestStartLatency(t *testing.T) {
	if os.Getenv("IMPACT_E2E_LATENCY") != "1" {
		t.Skip("a benchmark of minutes: set IMPACT_E2E_LATENCY=1 to run it")
	}
	n := latEnvInt("IMPACT_E2E_LATENCY_N", 10)
	k := latEnvInt("IMPACT_E2E_LATENCY_K", 6)
	c, impact := startGPUClusterWith(t, "impact-e2e-latency-", 3, "")
	e := &lcEnv{c: c, env: &env{t: t, a: c.Agent, dir: c.Dir, impact: impact, logLevel: "info",
		// The agent's defaults for interval and debounce.
		cycle:  "cycle {\n  admission_deadline = \"1m\"\n}\n",
		apiURL: fmt.Sprintf("http://127.0.0.1:%d", nomadagent.FreePorts(t, 1)[0])}}
	e.impactProc = e.startImpact(t)
	modes := []string{"plain", "impact"}
	forever := `trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done`

	fit := map[string][]float64{}
	vers := map[string]int{}
	evals := map[string]int{}
	for i := range n {
		for j := range modes {
			mode := modes[(i+j)%2] // alternate which mode goes first
			name := fmt.Sprintf("lat-fit-%s-%d", mode, i)
			runHCL(t, e.a, e.dir, name, latJob(mode, name, 1, "", forever))
			var started int64
			eventually(t, 60*time.Second, name+" started", func() (bool, string) {
				started = e.taskEvent(name, "Started")
				return started > 0, fmt.Sprintf("%+v; explain %s", e.allocsOf(name), e.explain(name))
			})
			submit, admitted, v, ev := e.firstSubmit(name)
			fit[mode] = append(fit[mode], float64(started-submit)/1e9)
			if admitted > 0 {
				fit["submit->admit"] = append(fit["submit->admit"], float64(admitted-submit)/1e9)
				fit["admit->start"] = append(fit["admit->start"], float64(started-admitted)/1e9)
			}
			vers[mode] += v
			evals[mode] += ev
			_, _ = e.nomad("job", "stop", "-purge", "-detach", name)
			eventually(t, 60*time.Second, name+" gone", func() (bool, string) {
				return len(e.running(name)) == 0, ""
			})
			time.Sleep(500 * time.Millisecond)
		}
	}

	freed := map[string][]float64{}
	for round := range 2 {
		for j := range modes {
			mode := modes[(round+j)%2]
			filler := fmt.Sprintf("lat-fill-%s-%d", mode, round)
			runHCL(t, e.a, e.dir, filler, latJob(mode, filler, 7, "client-0", forever))
			e.waitRunningN(filler, 7, 120*time.Second)
			var chain []string
			for i := range k {
				name := fmt.Sprintf("lat-chain-%s-%d-%d", mode, round, i)
				chain = append(chain, name)
				runHCL(t, e.a, e.dir, name, latJob(mode, name, 1, "client-0", "sleep 2; exit 0"))
			}
			type se struct{ start, end int64 }
			var runs []se
			eventually(t, time.Duration(k)*30*time.Second, mode+" chain done", func() (bool, string) {
				runs = runs[:0]
				for _, name := range chain {
					s, f := e.taskEvent(name, "Started"), e.taskEvent(name, "Terminated")
					if s == 0 || f == 0 {
						return false, name + " not done; explain " + e.explain(name)
					}
					runs = append(runs, se{s, f})
				}
				return true, ""
			})
			slices.SortFunc(runs, func(a, b se) int { return int(a.start - b.start) })
			for i := 1; i < len(runs); i++ {
				freed[mode] = append(freed[mode], float64(runs[i].start-runs[i-1].end)/1e9)
			}
			for _, name := range append(chain, filler) {
				_, _ = e.nomad("job", "stop", "-purge", "-detach", name)
			}
			eventually(t, 60*time.Second, "client-0 empty", func() (bool, string) {
				return len(e.running(filler)) == 0, ""
			})
			time.Sleep(2 * time.Second)
		}
	}

	maxRatio, _ := strconv.ParseFloat(os.Getenv("IMPACT_E2E_LATENCY_MAX_RATIO"), 64)
	report := func(what string, m map[string][]float64) {
		pp, ip := percentile(m["plain"], .5), percentile(m["impact"], .5)
		t.Logf("%-6s plain  p50 %.3fs p90 %.3fs (n=%d) %v", what, pp, percentile(m["plain"], .9), len(m["plain"]), round3(m["plain"]))
		t.Logf("%-6s impact p50 %.3fs p90 %.3fs (n=%d) %v", what, ip, percentile(m["impact"], .9), len(m["impact"]), round3(m["impact"]))
		ratio := ip / pp
		t.Logf("%-6s impact/plain p50 %.2fx", what, ratio)
		if maxRatio > 0 && ratio > maxRatio {
			t.Errorf("%s: impact's p50 is %.2fx plain Nomad's, over %.2fx", what, ratio, maxRatio)
		}
	}
	report("fit", fit)
	for _, part := range []string{"submit->admit", "admit->start"} {
		t.Logf("fit    impact %s p50 %.3fs p90 %.3fs %v", part, percentile(fit[part], .5), percentile(fit[part], .9), round3(fit[part]))
	}
	report("freed", freed)
	for _, mode := range modes {
		t.Logf("fit    %-6s versions/job %.2f evaluations/job %.2f", mode, float64(vers[mode])/float64(n), float64(evals[mode])/float64(n))
	}
}

func round3(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(int(x*1000+0.5)) / 1000
	}
	return out
}
