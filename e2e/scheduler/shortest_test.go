package scheduler

// TestShortestFirst: the policy's shortest_first block on a real Nomad
// cluster (one server, one client process with 8 fake GPUs), with every
// other term that could tell jobs of one tier apart switched off (aging,
// fair share), so a normal-tier job's score is the tier's weight plus
// the shortest-first term: 0.9 x 1h / (1h + impact_walltime), a job
// without a walltime counted as an hour's; a job that has waited more
// than 0.75 of what the oldest normal job waiting in its pool has is
// overdue and gets the whole 0.9.
//
// A normal job ("filler") holds all 8 GPUs. Behind it, 8-GPU normal
// jobs wait: "long" (walltime 10h), and once the agent reports it has
// waited 10s, in quick succession "long2" (10h), "nowall" (none) and
// "short" (5m). First come, first served would queue them long, long2,
// nowall, short; shortest first alone short, nowall, then long and
// long2. The test reads one cycle's queue and explanations and checks:
//
//   - every waiting job's short term and overdue flag (/v1/explain,
//     engine.score) are what the rule gives at that cycle's instant
//     (generated_at) from the submit times the agent reports (since),
//     the queue is ordered by score, ties first come, first served, and
//     nothing but the tier and that term is in the score;
//   - the scenario the timing makes: long is overdue (the oldest waiting:
//     the running filler does not count) and first despite the longest
//     walltime; the others, arrived 10s after it, stay clear of the
//     overdue line for 30s (until their wait is 0.75 of long's) and
//     follow shortest walltime first, so the queue is long, short,
//     nowall, long2 (long2, with long's walltime, last);
//   - each job's Variable nomad/jobs/<job>/impact has score_short, the
//     term in whole points.
//
// Then the filler is stopped: long, overdue, is the one admitted. Once
// it runs, long2 is the oldest normal job waiting, so it is overdue at
// once and heads the queue (checked against the rule again); long is
// stopped and long2 is the one admitted, although a few seconds before
// it was last in the queue.
//
// The oldest waiting job of a tier is always overdue, so within a tier
// the head of the queue is first come, first served (with no other term
// to tell jobs apart); shortest first orders the rest, which is what
// backfill and the other terms see.

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The policy TestShortestFirst runs: the tier and the shortest-first
// term alone tell its jobs apart.
const (
	sfWeight       = 0.9
	sfOverdueShare = 0.75
	sfPolicy       = `
aging {
  weight_per_hour = 0
}
fair_share {
  weight = 0
}
shortest_first {
  weight        = 0.9
  overdue_share = 0.75
}
`
)

// sfReference is the walltime whose job gets half the weight, and what
// a job without one counts as.
const sfReference = time.Hour

// sfRule is the shortest-first term of a job waiting since submit at
// now, with walltime (0: none), when the oldest job of its tier waiting
// in its pool was submitted at oldest: the whole weight when it is
// overdue (has waited more than the overdue share of what the oldest
// has; never before it has waited at all), else weight x 1h / (1h +
// walltime).
func sfRule(now, submit, oldest time.Time, walltime time.Duration) (short float64, overdue bool) {
	waited := now.Sub(submit)
	if waited > 0 && float64(waited) > sfOverdueShare*float64(now.Sub(oldest)) {
		return sfWeight, true
	}
	if walltime <= 0 {
		walltime = sfReference
	}
	return sfWeight * float64(sfReference) / float64(sfReference+walltime), false
}

// sfExplain is the part of /v1/explain/<job> TestShortestFirst reads.
type sfExplain struct {
	State       string
	Position    int
	Since       time.Time
	GeneratedAt time.Time `json:"generated_at"`
	Engine      *struct {
		Position int
		Score    struct {
			Total, Tier, Deadline, Age, Short float64
			FairShare                         float64 `json:"fair_share"`
			Overdue                           bool
		}
	}
}

// sfCycle is one cycle of the agent as TestShortestFirst reads it: when
// it decided, the waiting jobs in queue order, and their explanations.
type sfCycle struct {
	at      time.Time
	waiting []string
	explain map[string]sfExplain
	// state is every managed job's state in that cycle.
	state map[string]string
}

func (c sfCycle) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cycle at %s, waiting %v", c.at.Format(time.RFC3339Nano), c.waiting)
	for _, j := range c.waiting {
		ex := c.explain[j]
		fmt.Fprintf(&b, "\n  %s: place %d, submitted %s (waited %s)", j, ex.Position, ex.Since.Format(time.RFC3339Nano), c.at.Sub(ex.Since).Round(time.Millisecond))
		if ex.Engine != nil {
			fmt.Fprintf(&b, ", engine position %d, score %+v", ex.Engine.Position, ex.Engine.Score)
		}
	}
	return b.String()
}

// readSFCycle reads the agent's queue and the explanation of every job
// waiting in it; ok is false unless they all come from one cycle, every
// waiting job has the engine's explanation, and the waiting jobs are
// exactly want.
func (w *lcEnv) readSFCycle(want ...string) (c sfCycle, ok bool, info string) {
	var q struct {
		GeneratedAt time.Time `json:"generated_at"`
		Jobs        []struct {
			Job, State string
			Position   int
		}
	}
	if err := getAPI(w.apiURL, "/v1/queue", &q); err != nil {
		return c, false, err.Error()
	}
	c = sfCycle{at: q.GeneratedAt, explain: map[string]sfExplain{}, state: map[string]string{}}
	for _, j := range q.Jobs {
		c.state[j.Job] = j.State
		if j.State == "waiting" {
			c.waiting = append(c.waiting, j.Job)
		}
	}
	if !slices.Equal(sorted(c.waiting), sorted(want)) {
		return c, false, fmt.Sprintf("waiting %v, states %v", c.waiting, c.state)
	}
	for _, j := range c.waiting {
		var ex sfExplain
		if err := getAPI(w.apiURL, "/v1/explain/"+j, &ex); err != nil {
			return c, false, err.Error()
		}
		if !ex.GeneratedAt.Equal(c.at) || ex.Engine == nil || ex.State != "waiting" {
			return c, false, fmt.Sprintf("%s: %+v (queue of %s)", j, ex, c.at.Format(time.RFC3339Nano))
		}
		c.explain[j] = ex
	}
	return c, true, ""
}

// waitSFCycle waits for a cycle of the agent whose waiting jobs are
// exactly want and in which the job running (if any) runs, and returns
// it.
func (w *lcEnv) waitSFCycle(t *testing.T, running string, want ...string) sfCycle {
	t.Helper()
	var c sfCycle
	eventually(t, 60*time.Second, fmt.Sprintf("a cycle with %v waiting", want), func() (bool, string) {
		var ok bool
		var info string
		c, ok, info = w.readSFCycle(want...)
		if ok && running != "" && c.state[running] != "running" {
			return false, fmt.Sprintf("%s is %q", running, c.state[running])
		}
		return ok, info
	})
	return c
}

// checkSFRule checks one cycle against the rule: each waiting job's
// short term and overdue flag are sfRule's at the cycle's instant (the
// oldest being the earliest submitted of the waiting jobs, all of one
// tier and pool), the score has no other term but the tier's, and the
// queue is ordered by score, ties by submit time. It returns each job's
// overdue flag.
func checkSFRule(t *testing.T, c sfCycle, walltime map[string]time.Duration) map[string]bool {
	t.Helper()
	oldest := c.explain[c.waiting[0]].Since
	for _, j := range c.waiting {
		if s := c.explain[j].Since; s.Before(oldest) {
			oldest = s
		}
	}
	overdue := map[string]bool{}
	score := map[string]float64{}
	tier := c.explain[c.waiting[0]].Engine.Score.Tier
	for _, j := range c.waiting {
		ex := c.explain[j]
		sc := ex.Engine.Score
		short, od := sfRule(c.at, ex.Since, oldest, walltime[j])
		overdue[j], score[j] = od, tier+short
		if math.Abs(sc.Short-short) > 1e-6 || sc.Overdue != od {
			t.Errorf("%s: short %v overdue %v; the rule gives %v %v (waited %s, the oldest %s)",
				j, sc.Short, sc.Overdue, short, od, c.at.Sub(ex.Since), c.at.Sub(oldest))
		}
		if sc.Tier != tier || sc.FairShare != 0 || sc.Age != 0 || sc.Deadline != 0 || math.Abs(sc.Total-(sc.Tier+sc.Short)) > 1e-9 {
			t.Errorf("%s: score %+v, want the tier's %v plus the short term and nothing else", j, sc, tier)
		}
	}
	want := slices.Clone(c.waiting)
	slices.SortFunc(want, func(a, b string) int {
		if score[a] != score[b] {
			if score[a] > score[b] {
				return -1
			}
			return 1
		}
		return c.explain[a].Since.Compare(c.explain[b].Since)
	})
	if !slices.Equal(c.waiting, want) {
		t.Errorf("queue %v, want %v by the rule's scores %v", c.waiting, want, score)
	}
	for i, j := range c.waiting {
		ex := c.explain[j]
		if ex.Position != i+1 || i > 0 && ex.Engine.Position <= c.explain[c.waiting[i-1]].Engine.Position {
			t.Errorf("%s: place %d, engine position %d; want place %d, after %s in the engine's order", j, ex.Position, ex.Engine.Position, i+1, c.waiting[max(0, i-1)])
		}
	}
	if t.Failed() {
		t.Logf("%s", c)
	}
	return overdue
}

// admittedOf waits until one of jobs has an allocation and returns the
// jobs that have any.
func (w *lcEnv) admittedOf(t *testing.T, jobs ...string) []string {
	t.Helper()
	var got []string
	eventually(t, 90*time.Second, fmt.Sprintf("one of %v admitted", jobs), func() (bool, string) {
		got = nil
		for _, j := range jobs {
			if len(w.allocsOf(j)) > 0 {
				got = append(got, j)
			}
		}
		return len(got) > 0, fmt.Sprintf("queue: %s", w.queueLine())
	})
	return got
}

// queueLine is the agent's queue in one line, for failure reports.
func (w *lcEnv) queueLine() string {
	var q struct {
		Jobs []struct {
			Job, State string
			Position   int
		}
	}
	if err := getAPI(w.apiURL, "/v1/queue", &q); err != nil {
		return err.Error()
	}
	return fmt.Sprint(q.Jobs)
}

// points is a score in whole points as the Variable writes it.
func points(v float64) string {
	r := math.Round(v)
	if r == 0 {
		r = 0 // not "-0"
	}
	return strconv.FormatFloat(r, 'f', 0, 64)
}

func TestShortestFirst(t *testing.T) {
	w := setupGPUCluster(t, "impact-e2e-shortest-", 1, sfPolicy, "")
	envDir := filepath.Join(w.dir, "env")
	if err := os.MkdirAll(envDir, 0o777); err != nil {
		t.Fatal(err)
	}
	walltime := map[string]time.Duration{"long": 10 * time.Hour, "long2": 10 * time.Hour, "short": 5 * time.Minute}
	submit := func(name string) {
		t.Helper()
		var wall string
		if d := walltime[name]; d > 0 {
			wall = d.String()
		}
		runHCL(t, w.c.Agent, w.dir, name, dfJob{name: name, tier: "normal", gpus: 8, walltime: wall}.hcl(envDir))
	}
	defer func() {
		if t.Failed() {
			t.Logf("impact agent output (tail):\n%s", w.impactProc.Output())
		}
	}()

	submit("filler")
	w.waitRunningN("filler", 1, 120*time.Second)
	submit("long")
	// long's wait is what the others' are measured against: 10s of it
	// keeps them clear of the overdue line (0.75 of long's wait) for
	// 30s after they arrive.
	eventually(t, 60*time.Second, "long waiting 10s", func() (bool, string) {
		c, ok, info := w.readSFCycle("long")
		return ok && c.at.Sub(c.explain["long"].Since) >= 10*time.Second, info
	})
	for _, name := range []string{"long2", "nowall", "short"} {
		submit(name)
	}

	c := w.waitSFCycle(t, "filler", "long", "long2", "nowall", "short")
	t.Logf("all four waiting: %s", c)
	overdue := checkSFRule(t, c, walltime)
	if want := []string{"long", "short", "nowall", "long2"}; !slices.Equal(c.waiting, want) {
		t.Errorf("queue %v, want %v (long overdue, then shortest walltime first)", c.waiting, want)
	}
	for j, want := range map[string]bool{"long": true, "long2": false, "nowall": false, "short": false} {
		if overdue[j] != want {
			t.Errorf("%s: overdue %v by the rule, want %v: the cycle came %s after long2's submission, long having waited %s (see the cycle above)",
				j, overdue[j], want, c.at.Sub(c.explain["long2"].Since), c.at.Sub(c.explain["long"].Since))
		}
	}
	for j, want := range map[string]float64{"long": sfWeight, "short": sfWeight * 60 / 65, "nowall": sfWeight / 2, "long2": sfWeight / 11} {
		if got := c.explain[j].Engine.Score.Short; math.Abs(got-want) > 1e-6 {
			t.Errorf("%s: short %v, want %v", j, got, want)
		}
	}
	for _, j := range c.waiting {
		want := points(c.explain[j].Engine.Score.Short)
		var v struct{ Items map[string]string }
		eventually(t, 30*time.Second, j+"'s Variable with score_short "+want, func() (bool, string) {
			err := w.c.Agent.Get("/v1/var/nomad/jobs/"+j+"/impact", &v)
			return err == nil && v.Items["score_short"] == want, fmt.Sprintf("%v %v", err, v.Items)
		})
	}
	if t.Failed() {
		return
	}

	// The filler ends: the head of the queue, long, is admitted.
	if out, err := w.nomad("job", "stop", "-detach", "filler"); err != nil {
		t.Fatalf("stop filler: %v\n%s", err, out)
	}
	if got := w.admittedOf(t, "long", "long2", "nowall", "short"); !slices.Equal(got, []string{"long"}) {
		t.Fatalf("admitted %v once the filler stopped, want long alone (overdue, the head of the queue)", got)
	}
	w.waitRunningN("long", 1, 90*time.Second)

	// long runs: long2 is now the oldest normal job waiting, so overdue.
	c = w.waitSFCycle(t, "long", "long2", "nowall", "short")
	t.Logf("long running: %s", c)
	if overdue := checkSFRule(t, c, walltime); !overdue["long2"] || c.waiting[0] != "long2" {
		t.Errorf("long2: overdue %v, queue %v; want it overdue at the head (the oldest waiting)", overdue["long2"], c.waiting)
	}

	if out, err := w.nomad("job", "stop", "-detach", "long"); err != nil {
		t.Fatalf("stop long: %v\n%s", err, out)
	}
	if got := w.admittedOf(t, "long2", "nowall", "short"); !slices.Equal(got, []string{"long2"}) {
		t.Fatalf("admitted %v once long stopped, want long2 alone (overdue, the head of the queue)", got)
	}
	w.waitRunningN("long2", 1, 90*time.Second)
	noRollbacks(t, w.apiURL)
}
