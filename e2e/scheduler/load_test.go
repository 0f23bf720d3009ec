package scheduler

// TestLoad re-measures issue 39's load on a real multi-node Nomad: one
// server and four clients of 8 fake GPUs each (32 GPUs), the impact agent
// with its default cycle. The same workload runs twice, first on plain
// Nomad (node pool default), then through the impact queue: 200 jobs of
// one GPU (2s each) and 50 gangs of 2 members x 4 GPUs (4s each),
// interleaved and submitted at once over Nomad's HTTP API. Per mode it
// reports, from Nomad's own times: submit-to-start latency percentiles (a
// gang starts when its last member does), how far apart a gang's members
// started, versions and evaluations per job, and the impact agent's
// resident memory (VmHWM, its peak, from /proc).
//
// Measured here (Nomad 2.0.5, everything on one 2-core machine, 4m in
// all), plain / impact: all complete after 1m43s / 1m52s; start latency
// of all jobs p50 28.9s / 60.3s, p90 65.5s / 97.6s, p99 95.2s / 105.0s;
// 1-GPU jobs p50 25.2s / 58.6s; gangs p50 68.0s / 65.1s, p90 90.2s /
// 100.1s; a gang's members apart p50 0.93s / 0.15s, max 59.2s / 1.5s;
// versions/job 1.00 / 2.00, evaluations/job 1.92 / 3.00; the agent's peak
// RSS 43 MiB. (Plain Nomad starts the 1-GPU jobs ahead of the gangs
// queued before them and places a gang's members one by one; the impact
// queue keeps the order and starts gangs whole.)
//
// A benchmark of minutes: it runs only with IMPACT_E2E_LOAD=1;
// IMPACT_E2E_LOAD_SINGLES and IMPACT_E2E_LOAD_GANGS change the job counts.
// It fails when a job does not complete, when an impact gang's members
// start more than 5s apart, or when an impact job cost other than 2
// versions (a job admitted once). Run:
//
//	make build && PATH=/opt/nomad-bin:$PATH IMPACT_BIN=$PWD/bin IMPACT_E2E_LOAD=1 \
//	  go test -count=1 -v -timeout 60m -run TestLoad ./e2e/scheduler/

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/e2e/internal/nomadagent"
)

// loadJob is one job of the load: count members of gpus GPUs, each
// sleeping secs.
type loadJob struct {
	name              string
	count, gpus, secs int
}

func (j loadJob) json(pool string) []byte {
	return apiJob{name: j.name, pool: pool, meta: map[string]string{"impact_tier": "normal"},
		count: j.count, gpus: j.gpus, cpu: 20, mem: 32, script: fmt.Sprintf("sleep %d", j.secs)}.json()
}

// loadResult is what one job cost and how it started.
type loadResult struct {
	latency, spread  float64 // seconds: submit to the last member's start; first to last member
	versions, evals  int
	complete, gang   bool
	members, started int
}

func (e *lcEnv) loadResultOf(j loadJob) loadResult {
	r := loadResult{gang: j.count > 1, members: j.count}
	submit, _, versions, evals := e.firstSubmit(j.name)
	r.versions, r.evals = versions, evals
	var as []latAlloc
	_ = e.a.Get("/v1/job/"+j.name+"/allocations?all=true", &as)
	var first, last int64
	done := 0
	for _, a := range as {
		var s int64
		for _, ev := range a.TaskStates["t"].Events {
			if ev.Type == "Started" && (s == 0 || ev.Time < s) {
				s = ev.Time
			}
		}
		if s == 0 {
			continue
		}
		r.started++
		if first == 0 || s < first {
			first = s
		}
		if s > last {
			last = s
		}
		if a.ClientStatus == "complete" {
			done++
		}
	}
	r.complete = done >= j.count
	if last > 0 {
		r.latency = float64(last-submit) / 1e9
		r.spread = float64(last-first) / 1e9
	}
	return r
}

func vmHWM(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err.Error()
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func TestLoad(t *testing.T) {
	if os.Getenv("IMPACT_E2E_LOAD") != "1" {
		t.Skip("a benchmark of many minutes: set IMPACT_E2E_LOAD=1 to run it")
	}
	singles := latEnvInt("IMPACT_E2E_LOAD_SINGLES", 200)
	gangs := latEnvInt("IMPACT_E2E_LOAD_GANGS", 50)
	c, impact := startGPUClusterWith(t, "impact-e2e-load-", 4, "")
	e := &lcEnv{c: c, env: &env{t: t, a: c.Agent, dir: c.Dir, impact: impact, logLevel: "info",
		cycle:  "cycle {\n  admission_deadline = \"5m\"\n}\n",
		apiURL: fmt.Sprintf("http://127.0.0.1:%d", nomadagent.FreePorts(t, 1)[0])}}
	e.impactProc = e.startImpact(t)

	for _, mode := range []string{"plain", "impact"} {
		// Interleaved: a gang after every singles/gangs single jobs.
		var jobs []loadJob
		every := max(1, singles/max(1, gangs))
		g := 0
		for i := range singles {
			jobs = append(jobs, loadJob{name: fmt.Sprintf("ld-%s-s%03d", mode, i), count: 1, gpus: 1, secs: 2})
			if (i+1)%every == 0 && g < gangs {
				jobs = append(jobs, loadJob{name: fmt.Sprintf("ld-%s-g%03d", mode, g), count: 2, gpus: 4, secs: 4})
				g++
			}
		}
		for ; g < gangs; g++ {
			jobs = append(jobs, loadJob{name: fmt.Sprintf("ld-%s-g%03d", mode, g), count: 2, gpus: 4, secs: 4})
		}
		pool := "default"
		if mode == "impact" {
			pool = "impact-queue"
		}
		began := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, len(jobs))
		sem := make(chan struct{}, 8)
		for _, j := range jobs {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				resp, err := http.Post(e.a.Addr+"/v1/jobs", "application/json", bytes.NewReader(j.json(pool)))
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = fmt.Errorf("register %s: HTTP %d", j.name, resp.StatusCode)
					}
				}
				if err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		submitted := time.Since(began)
		results := map[string]loadResult{}
		eventually(t, 40*time.Minute, mode+": every job complete", func() (bool, string) {
			left := 0
			for _, j := range jobs {
				if r, ok := results[j.name]; ok && r.complete {
					continue
				}
				r := e.loadResultOf(j)
				results[j.name] = r
				if !r.complete {
					left++
				}
			}
			return left == 0, fmt.Sprintf("%d of %d jobs not complete", left, len(jobs))
		})
		took := time.Since(began)
		var lat, single, gang, spread []float64
		versions, evals := 0, 0
		var badVersions []string
		for _, j := range jobs {
			r := e.loadResultOf(j)
			lat = append(lat, r.latency)
			if r.gang {
				gang = append(gang, r.latency)
				spread = append(spread, r.spread)
			} else {
				single = append(single, r.latency)
			}
			versions += r.versions
			evals += r.evals
			if mode == "impact" && r.versions != 2 {
				badVersions = append(badVersions, fmt.Sprintf("%s: %d", j.name, r.versions))
			}
		}
		pct := func(xs []float64) string {
			return fmt.Sprintf("p50 %.2fs p90 %.2fs p99 %.2fs max %.2fs", percentile(xs, .5), percentile(xs, .9), percentile(xs, .99), percentile(xs, 1))
		}
		t.Logf("%-6s %d jobs (%d x 1 GPU, %d x 2x4) submitted in %s, all complete after %s", mode, len(jobs), singles, gangs,
			submitted.Round(100*time.Millisecond), took.Round(time.Second))
		t.Logf("%-6s start latency all:    %s", mode, pct(lat))
		t.Logf("%-6s start latency 1 GPU:  %s", mode, pct(single))
		t.Logf("%-6s start latency gangs:  %s", mode, pct(gang))
		t.Logf("%-6s gang members apart:   %s", mode, pct(spread))
		t.Logf("%-6s versions/job %.2f evaluations/job %.2f", mode, float64(versions)/float64(len(jobs)), float64(evals)/float64(len(jobs)))
		if mode == "impact" {
			t.Logf("impact agent peak RSS (VmHWM) %s", vmHWM(e.impactProc.Cmd.Process.Pid))
			if len(badVersions) > 0 {
				t.Errorf("impact jobs admitted other than once (versions): %s", strings.Join(badVersions, ", "))
			}
			if m := percentile(spread, 1); m > 5 {
				t.Errorf("an impact gang's members started %.2fs apart; want whole (within 5s)", m)
			}
		}
		// Purged before the next mode, which starts on an idle cluster.
		for _, j := range jobs {
			req, _ := http.NewRequest(http.MethodDelete, e.a.Addr+"/v1/job/"+j.name+"?purge=true", nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
		eventually(t, 5*time.Minute, mode+": jobs purged", func() (bool, string) {
			var js []struct{ ID string }
			err := e.a.Get("/v1/jobs?prefix=ld-", &js)
			return err == nil && len(js) == 0, fmt.Sprintf("%d left %v", len(js), err)
		})
		waitCycles(t, e.apiURL, 3)
	}
}
