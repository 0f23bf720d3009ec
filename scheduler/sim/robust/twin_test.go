package robust

import (
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/baseline"
	"github.com/impact-sched/nomad-impact/scheduler/sim/impact"
	"github.com/impact-sched/nomad-impact/scheduler/sim/synth"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// TestJitter: the twin's jobs are the scenario's with each submit moved
// later by at most upTo seconds, the same each time, never past the
// window's last second, sorted by submit again; 0 moves nothing.
func TestJitter(t *testing.T) {
	var jobs []trace.Job
	for i := range 400 {
		jobs = append(jobs, trace.Job{ID: string(rune('a' + i%26)), Submit: int64(i / 4), Duration: 60, GPUs: 1})
	}
	const end = 100 // the last jobs sit at 99, the window's last second
	if got := Jitter(jobs, 0, end, 0); !slices.Equal(got, jobs) {
		t.Fatal("jitter 0 moved jobs")
	}
	for _, upTo := range []int64{1, 5} {
		a, b := Jitter(jobs, upTo, end, 0), Jitter(jobs, upTo, end, 0)
		if !slices.Equal(a, b) {
			t.Fatalf("jitter %d: two runs differ", upTo)
		}
		if !slices.IsSortedFunc(a, func(x, y trace.Job) int { return int(x.Submit - y.Submit) }) {
			t.Fatalf("jitter %d: not sorted by submit", upTo)
		}
		for _, j := range a {
			if j.Submit >= end {
				t.Fatalf("jitter %d: a job moved out of the window (%d)", upTo, j.Submit)
			}
		}
		// Each moved job matches an original one of its ID submitted at
		// most upTo seconds before it, each original used once.
		moved := 0
		orig := slices.Clone(jobs)
		for _, j := range a {
			k := slices.IndexFunc(orig, func(o trace.Job) bool {
				return o.ID == j.ID && o.Submit <= j.Submit && j.Submit-o.Submit <= upTo
			})
			if k < 0 {
				t.Fatalf("jitter %d: job %s at %d is no job moved by at most %d", upTo, j.ID, j.Submit, upTo)
			}
			if orig[k].Submit != j.Submit {
				moved++
			}
			orig = slices.Delete(orig, k, k+1)
		}
		if moved == 0 {
			t.Fatalf("jitter %d: nothing moved", upTo)
		}
	}
}

// TestTwinChecks: the twin is held to tier waits, weighted JCT and
// occupancy against nomad-native (not partial-gang idle, every job
// finished or the top tier's gain); each failed check of impact carries
// the twin's result there and whether the twin is at least as bad; with
// no twin nothing is set.
func TestTwinChecks(t *testing.T) {
	res := func(p50, jct, occ, partial float64) *sim.Result {
		w := map[string]sim.Percentiles{"normal": {P50: p50, P99: 1000}, "scavenger": {P50: p50, P99: 1000}}
		return &sim.Result{WaitS: w, WeightedJCTS: jct, Occupancy: occ, PartialGangIdleGPUHours: partial,
			JobsCompletedByTier: map[string]int{"normal": 1, "scavenger": 1}, Capacity: 8, WindowStart: 0, WindowEnd: 3600}
	}
	o := &Outcome{Results: map[string]*sim.Result{
		baseline.NomadNative: res(1000, 500, 0.9, 0),
		impact.Name:          res(2000, 600, 0.8, 1),
		// The twin's p50 fails by more than impact's, its JCT by less;
		// its occupancy passes; it has partial gangs, as native does.
		NativeTwin: res(3000, 550, 0.9, 5),
	}, Debounce: 1}
	o.Checks = NeverWorse(o)
	twinChecks(o)
	want := []string{"normal wait p50", "scavenger wait p50", "weighted JCT"}
	if !slices.Equal(o.TwinFailed, want) {
		t.Fatalf("twin failed %v, want %v", o.TwinFailed, want)
	}
	byName := map[string]Check{}
	for _, c := range o.Checks {
		byName[c.Name] = c
	}
	for name, within := range map[string]bool{"normal wait p50": true, "scavenger wait p50": true, "weighted JCT": false, "occupancy": false} {
		c := byName[name]
		if c.OK {
			t.Fatalf("%s passed on a worse result", name)
		}
		if c.Twin == "" || c.WithinTwin != within {
			t.Errorf("%s: twin %q within %v, want within %v", name, c.Twin, c.WithinTwin, within)
		}
	}
	if c := byName["partial-gang idle"]; c.Twin != "" || c.WithinTwin {
		t.Errorf("partial-gang idle compared with the twin: %+v", c)
	}
	if c := byName["normal wait p99"]; !c.OK || c.Twin != "" {
		t.Errorf("a passed check carries the twin: %+v", c)
	}
	if n, ok := TwinTally([]*Outcome{o}); !ok || n != (TwinCount{TwinFailed: 3, ImpactFailed: 4, Within: 2}) {
		t.Errorf("tally: %+v ok %v, want twin 3 impact 4 within 2", n, ok)
	}

	delete(o.Results, NativeTwin)
	o.TwinFailed = nil
	o.Checks = NeverWorse(o)
	twinChecks(o)
	if o.TwinFailed != nil {
		t.Errorf("no twin, yet twin failures %v", o.TwinFailed)
	}
	if _, ok := TwinTally([]*Outcome{o}); ok {
		t.Error("no twin, yet a tally")
	}
	// The report tells a twin that failed nothing from no twin.
	if b, _ := json.Marshal(o); !strings.Contains(string(b), `"native_twin_failed":null`) {
		t.Errorf("no twin: report %s", b)
	}
	o.Results[NativeTwin] = o.Results[baseline.NomadNative]
	twinChecks(o)
	if b, _ := json.Marshal(o); !strings.Contains(string(b), `"native_twin_failed":[]`) {
		t.Errorf("a twin equal to native: report %s", b)
	}
}

// TestRunWithTwin: Run simulates the native twin only when asked, and
// its line in the failures names it.
func TestRunWithTwin(t *testing.T) {
	cfg := config(t)
	sc := scenario(t, synth.Bursty(1, 0.05))
	o, err := Run(sc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if o.Results[NativeTwin] != nil || o.TwinFailed != nil {
		t.Fatal("a twin ran without TwinJitter")
	}
	cfg.TwinJitter = 1
	o, err = Run(sc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tw, nat := o.Results[NativeTwin], o.Results[baseline.NomadNative]
	if tw == nil || o.TwinFailed == nil {
		t.Fatal("no twin with TwinJitter 1")
	}
	if tw.JobsCompleted != nat.JobsCompleted {
		t.Errorf("twin completed %d jobs, native %d", tw.JobsCompleted, nat.JobsCompleted)
	}
	if _, ok := o.Summary[NativeTwin]; !ok {
		t.Error("the twin has no summary in the report")
	}
	var b strings.Builder
	if err := WriteTable(&b, []*Outcome{o}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "native twin fails") {
		t.Errorf("table lacks the twin's column:\n%s", b.String())
	}
}

// TestRunWritesJobs: with JobsDir every run writes its jobs, one row each
// after the header, and with Reasons impact's waiting reasons too; the
// rows hold what the results say (a first start no earlier than the
// submit, free GPUs within the cluster's).
func TestRunWritesJobs(t *testing.T) {
	cfg := config(t)
	cfg.TwinJitter = 1
	cfg.JobsDir, cfg.Reasons = t.TempDir(), true
	sc := scenario(t, synth.Bursty(1, 0.05))
	o, err := Run(sc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range append(append([]string(nil), Policies...), NativeTwin, "bound") {
		b, err := os.ReadFile(jobsPath(cfg.JobsDir, sc.Name, name))
		if err != nil {
			t.Fatal(err)
		}
		rows := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		if rows[0]+"\n" != JobsHeader {
			t.Fatalf("%s: header %q", name, rows[0])
		}
		if r := o.Results[name]; r != nil && len(rows)-1 != len(r.Jobs) {
			t.Fatalf("%s: %d rows for %d jobs", name, len(rows)-1, len(r.Jobs))
		}
		for _, row := range rows[1:] {
			f := strings.Split(row, "\t")
			if len(f) != 12 {
				t.Fatalf("%s: row %q has %d fields", name, row, len(f))
			}
			submit, _ := strconv.Atoi(f[6])
			start, _ := strconv.Atoi(f[7])
			free, _ := strconv.Atoi(f[10])
			if start < submit || free < 0 || free > sc.GPUs {
				t.Fatalf("%s: row %q", name, row)
			}
		}
	}
	b, err := os.ReadFile(reasonsPath(cfg.JobsDir, sc.Name))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), impact.ReasonsHeader) || !strings.Contains(string(b), "\twaiting\t") {
		t.Fatalf("waiting reasons lack the header or any waiting job:\n%.500s", b)
	}
}
