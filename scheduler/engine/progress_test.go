package engine

import (
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// A preemption carries what its victim will have saved, so that the
// adapter can write it into the parked job (impact_progress) and the job
// is expected to need its walltime less it: the earlier runs' work, plus
// this run up to its last expected checkpoint, or up to the decision if
// its tasks checkpoint on the signal. A gang counts from its latest
// member's start, since it makes no progress before every member runs.
func TestPreemptionCarriesTheVictimsProgress(t *testing.T) {
	h := func(d float64) time.Time { return t0.Add(-time.Duration(d * float64(time.Hour))) }
	scav := func(extra ...string) *cluster.Job {
		return mkJob("s", running(), meta(append([]string{"impact_tier", "scavenger", "impact_walltime", "10h"}, extra...)...))
	}
	hours := func(d float64) time.Duration { return time.Duration(d * float64(time.Hour)) }
	for _, c := range []struct {
		name               string
		job                *cluster.Job
		allocs             []*cluster.Alloc
		progress, onSignal time.Duration
	}{
		{"nothing known saved: the run counts only if it checkpoints on its signal",
			scav(), []*cluster.Alloc{alloc("a", "s", "n1", h(3.5), 0, 1, 2, 3)}, 0, hours(3.5)},
		{"every hour: three checkpoints in 3.5h",
			scav("impact_checkpoint_interval", "1h"), []*cluster.Alloc{alloc("a", "s", "n1", h(3.5), 0, 1, 2, 3)}, hours(3), hours(3.5)},
		{"earlier runs' work is carried",
			scav("impact_checkpoint_interval", "1h", "impact_progress", "4h"), []*cluster.Alloc{alloc("a", "s", "n1", h(3.5), 0, 1, 2, 3)}, hours(7), hours(7.5)},
		{"a checkpoint the model knows",
			scav(), []*cluster.Alloc{withCheckpoint(alloc("a", "s", "n1", h(3.5), 0, 1, 2, 3), h(1))}, hours(2.5), hours(3.5)},
		{"a gang from its latest member's start, to its members' earliest checkpoint",
			scav("impact_checkpoint_interval", "1h"), []*cluster.Alloc{
				alloc("a", "s", "n1", h(3.5), 0, 1), // checkpoints at 1h, 2h, 3h of its run
				alloc("b", "s", "n1", h(3), 2, 3),   // at 1h, 2h, 3h: 0.5h ago
			}, hours(2.5), hours(3)},
	} {
		t.Run(c.name, func(t *testing.T) {
			crit := mkJob("c", group("main", 1, 4), meta("impact_tier", "critical"))
			snap := mustSnap(t, []*cluster.Node{mkNode("n1", 4, 1)}, []*cluster.Job{c.job, crit}, c.allocs)
			pol := policy.Default()
			pol.Preemption.MinRuntime = 0
			plan := mustEngine(t, pol).Decide(snap, t0)
			if err := ValidatePlan(pol, snap, plan); err != nil {
				t.Fatalf("invalid plan: %v", err)
			}
			if len(plan.Preemptions) != 1 {
				t.Fatalf("preemptions %+v, want the one of s; critical: %+v", plan.Preemptions, plan.Explanations["c"])
			}
			p := plan.Preemptions[0]
			if p.Progress != c.progress || p.ProgressOnSignal != c.onSignal {
				t.Fatalf("progress %v, on signal %v; want %v, %v", p.Progress, p.ProgressOnSignal, c.progress, c.onSignal)
			}
		})
	}
}

// A job's saved work shortens what the engine expects of it: a 6h job
// with 5h saved is ordered as the one-hour job it now is under
// shortest_first, ahead of a 2h job of its tier, and with 5h50m saved
// ahead of a 30m one. (The oldest job of the tier is overdue and first
// whatever its walltime.)
func TestSavedWorkShortensTheExpectedRun(t *testing.T) {
	pol := shortestFirstOnly(t)
	now := t0
	ago := func(h float64) jobOpt { return submitted(now.Add(-time.Duration(h * float64(time.Hour)))) }
	for _, c := range []struct {
		progress string
		want     string
	}{
		{"", "old,half,two,resumed"},
		{"5h", "old,half,resumed,two"},
		{"5h50m", "old,resumed,half,two"},
	} {
		extra := []string{"impact_walltime", "6h"}
		if c.progress != "" {
			extra = append(extra, "impact_progress", c.progress)
		}
		jobs := []*cluster.Job{
			mkJob("busy", running()),
			mkJob("old", ago(10), meta("impact_walltime", "50h")),
			mkJob("half", ago(0.3), meta("impact_walltime", "30m")),
			mkJob("two", ago(0.2), meta("impact_walltime", "2h")),
			mkJob("resumed", ago(0.1), meta(extra...)),
		}
		snap := mustSnap(t, []*cluster.Node{mkNode("n1", 1, 1)}, jobs, []*cluster.Alloc{alloc("busy-0", "busy", "n1", now.Add(-time.Hour), 0)})
		plan := mustEngine(t, pol).Decide(snap, now)
		if got := join(plan.Queue); got != c.want {
			t.Errorf("progress %q: queue %s, want %s", c.progress, got, c.want)
		}
	}
}

// A gang requeued for a lost member carries its checkpoints up to the
// loss (when the engine first saw it missing), not the minutes it
// stalled through the grace after it, and the same either way its
// survivors end: what they save at the signal is not known to be newer.
// A replacement Nomad placed is not of the run.
func TestGangRequeueCarriesItsCheckpointsToTheLoss(t *testing.T) {
	// Checkpoints at +20m, +40m, +60m: 1h saved at t0, when it is first
	// seen missing; the next, at +80m, falls within the grace.
	start := t0.Add(-79 * time.Minute)
	gang := mkJob("g", running(), group("main", 2, 4),
		meta("impact_tier", "normal", "impact_checkpoint_interval", "20m", "impact_progress", "30m"))
	replacement := alloc("a3", "g", "n2", t0, 0, 1, 2, 3)
	replacement.Replacement = true
	nodes := []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)}
	for _, c := range []struct {
		name   string
		allocs []*cluster.Alloc
	}{
		{"member lost: requeued after the grace", []*cluster.Alloc{alloc("a1", "g", "n1", start, 0, 1, 2, 3)}},
		{"a replacement: requeued at once", []*cluster.Alloc{alloc("a1", "g", "n1", start, 0, 1, 2, 3), replacement}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pol := policy.Default()
			e := mustEngine(t, pol)
			snap := mustSnap(t, nodes, []*cluster.Job{gang}, c.allocs)
			var req []Preemption
			for _, at := range []time.Time{t0, t0.Add(pol.Gangs.MissingMemberGrace)} {
				if req = e.Decide(snap, at).Requeues; len(req) > 0 {
					break
				}
			}
			if len(req) != 1 {
				t.Fatalf("requeues %+v, want the gang's", req)
			}
			want := 90 * time.Minute // 30m carried + 1h to the loss
			if req[0].Progress != want || req[0].ProgressOnSignal != want {
				t.Fatalf("progress %v, on signal %v; want %v both ways", req[0].Progress, req[0].ProgressOnSignal, want)
			}
		})
	}
}
