package scheduler

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/e2e/internal/nomadagent"
)

// TestChaos (gated: IMPACT_CHAOS=1, and nomad on PATH) runs IMPACT_CHAOS_JOBS
// (default 100) short jobs of every shape (1x4, 1x8, 2x4, 2x8 gangs) and
// tier on a 1-server 3-client cluster (24 GPUs) under two impact agents
// (HA), SIGKILLing a random agent every 10-25s and restarting it a few
// seconds later, and reports:
//   - jobs lost: not completed by the end;
//   - admitted twice: a job seen with more running allocations than its
//     gang has (two admissions at once);
//   - half-placed gangs held longer than the grace: a gang seen with some
//     but not all members running for longer than the gang watch's grace
//     plus 10s of start skew;
//   - jobs run twice: a job whose members finished their work (exit 0)
//     more often than it has members.
//
// All four must be 0. Preempted jobs exit 75 (the requeue code) on their
// checkpoint signal and run again: that is a requeue, not a second run.
func TestChaos(t *testing.T) {
	if os.Getenv("IMPACT_CHAOS") == "" {
		t.Skip("set IMPACT_CHAOS=1 to run the chaos run (about 10 minutes)")
	}
	njobs := 100
	if v, err := strconv.Atoi(os.Getenv("IMPACT_CHAOS_JOBS")); err == nil && v > 0 {
		njobs = v
	}
	const grace = 10 * time.Second
	e := setupCluster(t, "impact-e2e-chaos-", fmt.Sprintf("gangs {\n  missing_member_grace = %q\n}\n", grace))
	// setupCluster started one agent; a second one makes it HA.
	ports := nomadagent.FreePorts(t, 1)
	urls := []string{e.apiURL, fmt.Sprintf("http://127.0.0.1:%d", ports[0])}
	names := []string{"e2e", "e2e-b"}
	var pmu sync.Mutex
	procs := []*nomadagent.Process{e.impactProc, e.launchImpact(t, names[1], urls[1])}

	marks := filepath.Join(e.dir, "marks")
	if err := os.MkdirAll(marks, 0o777); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(11))
	shapes := [][2]int{{1, 4}, {1, 8}, {2, 4}, {2, 8}}
	tiers := []string{"scavenger", "normal", "normal", "high", "critical"}
	type spec struct {
		name  string
		count int
	}
	var jobs []spec
	for i := range njobs {
		sh := shapes[rng.Intn(len(shapes))]
		tier := tiers[rng.Intn(len(tiers))]
		secs := 4 + rng.Intn(10)
		name := fmt.Sprintf("c%03d", i)
		mark := filepath.Join(marks, name)
		// Work for secs seconds, then record it done and exit 0; on the
		// checkpoint signal exit 75 (requeue me); on TERM exit without
		// recording.
		script := fmt.Sprintf(`trap 'exit 75' USR1; trap 'exit 143' TERM; i=0; while [ $i -lt %d ]; do sleep 1 & wait $!; i=$((i+1)); done; echo "$NOMAD_ALLOC_ID" >> %s; exit 0`, secs, mark)
		hcl := parkedGPUJob(name, map[string]string{
			"impact_tier":              tier,
			"impact_checkpoint_signal": "SIGUSR1",
			"impact_grace":             "3s",
			"impact_walltime":          fmt.Sprintf("%ds", secs+5),
		}, sh[0], sh[1], script)
		jobs = append(jobs, spec{name: name, count: sh[0]})
		runHCL(t, e.a, e.dir, name, hcl)
	}
	t.Logf("%d jobs submitted", len(jobs))

	// Chaos: kill a random agent now and then, restart it a little later.
	stop := make(chan struct{})
	var kills int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(10+rng.Intn(15)) * time.Second):
			}
			i := rng.Intn(2)
			pmu.Lock()
			procs[i].Kill()
			kills++
			pmu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(2+rng.Intn(4)) * time.Second):
			}
			pmu.Lock()
			procs[i] = e.launchImpact(t, names[i], urls[i])
			pmu.Unlock()
		}
	}()

	// Sample the cluster every second until every job is done.
	maxRunning := map[string]int{}
	halfSince := map[string]time.Time{}
	halfMax := map[string]time.Duration{}
	deadline := time.Now().Add(time.Duration(njobs)*12*time.Second + 5*time.Minute)
	for time.Now().Before(deadline) {
		var stubs []struct {
			JobID, ClientStatus, DesiredStatus string
		}
		if err := e.a.Get("/v1/allocations", &stubs); err != nil {
			time.Sleep(time.Second)
			continue
		}
		running := map[string]int{}
		for _, s := range stubs {
			if s.ClientStatus == "running" {
				running[s.JobID]++
			}
		}
		now := time.Now()
		done := 0
		for _, j := range jobs {
			n := running[j.name]
			maxRunning[j.name] = max(maxRunning[j.name], n)
			if n > 0 && n < j.count {
				if halfSince[j.name].IsZero() {
					halfSince[j.name] = now
				}
				halfMax[j.name] = max(halfMax[j.name], now.Sub(halfSince[j.name]))
			} else {
				delete(halfSince, j.name)
			}
			if finished(marks, j.name) >= j.count && n == 0 {
				done++
			}
		}
		if done == len(jobs) {
			break
		}
		time.Sleep(time.Second)
	}
	close(stop)
	wg.Wait()

	var lost, twice, half, ranTwice []string
	var longestHalf time.Duration
	requeued := 0 // jobs parked again after an admission (preempted or requeued)
	for _, j := range jobs {
		var nj struct{ Version uint64 }
		if err := e.a.Get("/v1/job/"+j.name, &nj); err == nil && nj.Version > 1 {
			requeued++
		}
		f := finished(marks, j.name)
		if f < j.count {
			lost = append(lost, fmt.Sprintf("%s (%d of %d members finished; %s)", j.name, f, j.count, e.jobState(j.name)))
		}
		if f > j.count {
			ranTwice = append(ranTwice, fmt.Sprintf("%s (%d completions for %d members)", j.name, f, j.count))
		}
		if maxRunning[j.name] > j.count {
			twice = append(twice, fmt.Sprintf("%s (%d running at once, gang of %d)", j.name, maxRunning[j.name], j.count))
		}
		longestHalf = max(longestHalf, halfMax[j.name])
		if halfMax[j.name] > grace+10*time.Second {
			half = append(half, fmt.Sprintf("%s (%v)", j.name, halfMax[j.name].Round(time.Second)))
		}
	}
	var outcomes []string
	for _, line := range strings.Split(metricsText(urls), "\n") {
		if strings.HasPrefix(line, "impact_preemption_outcomes_total") || strings.HasPrefix(line, "impact_gangs_requeued_total") ||
			strings.HasPrefix(line, "impact_admissions_rollbacks_total") {
			outcomes = append(outcomes, line)
		}
	}
	sort.Strings(outcomes)
	t.Logf("chaos: %d jobs, %d agent SIGKILLs, %d jobs parked again after an admission (preempted); jobs lost %d, admitted twice %d, half-placed gangs held longer than the grace (%v + 10s) %d (longest half-placed %v), jobs run twice %d",
		len(jobs), kills, requeued, len(lost), len(twice), grace, len(half), longestHalf.Round(100*time.Millisecond), len(ranTwice))
	t.Logf("metrics of the agent processes up at the end (counters restart with each killed agent): %s", strings.Join(outcomes, "; "))
	for _, l := range [][]string{lost, twice, half, ranTwice} {
		if len(l) > 0 {
			t.Errorf("%s", strings.Join(l, ", "))
		}
	}
}

// finished counts the members of a job that finished their work (exit 0).
func finished(marks, name string) int {
	b, err := os.ReadFile(filepath.Join(marks, name))
	if err != nil {
		return 0
	}
	return len(strings.Fields(string(b)))
}

func (e *lcEnv) jobState(name string) string {
	j := e.job(name)
	return fmt.Sprintf("job %s in %s, explain %s", j.Status, j.NodePool, e.explain(name))
}

func metricsText(urls []string) string {
	var all []string
	for _, u := range urls {
		var text string
		if err := getAPI(u, "/metrics", &text); err == nil {
			all = append(all, text)
		}
	}
	return strings.Join(all, "\n")
}
