package nomad

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// The scheduler's block goes in front of the user's description and
// replaces an earlier block of its own, never the user's text.
func TestDescribeKeepsTheUsersText(t *testing.T) {
	at := time.Date(2026, 12, 4, 16, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		ui   *api.JobUIConfig
		user string
	}{
		{"no ui block", nil, ""},
		{"user's description", &api.JobUIConfig{Description: "Pretrain OLMo."}, "Pretrain OLMo."},
		{"earlier block and user's", &api.JobUIConfig{Description: descMarker + "admitted: ..." + descSeparator + "Pretrain OLMo."}, "Pretrain OLMo."},
		{"earlier block alone", &api.JobUIConfig{Description: descMarker + "admitted: ..."}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := &api.Job{UI: tc.ui}
			describe(job, parkedStatus("preempted for default/urgent with its checkpoint signal", 0, 0), at, "http://a/ui/job/default/j")
			d := job.UI.Description
			want := descMarker + "back in the queue (not complete): preempted for default/urgent"
			if !strings.HasPrefix(d, want) || !strings.Contains(d, "2026-12-04 16:00:00 UTC") || !strings.Contains(d, "(http://a/ui/job/default/j)") {
				t.Fatalf("description %q", d)
			}
			if got := userDescription(job); got != tc.user {
				t.Fatalf("user's description %q, want %q (whole: %q)", got, tc.user, d)
			}
			if strings.Count(d, descMarker) != 1 {
				t.Fatalf("two scheduler blocks: %q", d)
			}
		})
	}
}

// Issue 41: each re-registration the executor makes anyway tells the
// operator, in the job's description, what happened: an admission says
// admitted (and where), a preemption's park says back in the queue, not
// complete, and for whom; the user's own description stays below; no
// extra job version is spent on it.
func TestDescriptionFollowsAdmissionAndPreemption(t *testing.T) {
	e := newEnv(t, 2)
	e.fake.SetExitOnSignal(true)
	e.fake.SetSignalExitCode(75)
	j := gpuJob("victim", map[string]string{"impact_tier": "scavenger"}, [2]int{2, 4})
	j.UI = &api.JobUIConfig{Description: "Sweep over learning rates."}
	e.register(j)
	e.startWatcher(WatcherConfig{})
	x := e.executor(nil)
	x.cfg.PageURL = func(key string) string { return "http://agent/ui/job/" + key }
	admitAndRun(t, e, x, "victim")
	admitted := e.fake.Job("victim")
	d := admitted.UI.Description
	if !strings.HasPrefix(d, descMarker+"admitted: started whole on 2 node(s) with 8 GPU(s)") ||
		!strings.HasSuffix(d, descSeparator+"Sweep over learning rates.") || !strings.Contains(d, "(http://agent/ui/job/default/victim)") {
		t.Fatalf("admitted job's description %q", d)
	}
	version := *admitted.Version
	x.Apply(context.Background(), &engine.Plan{Preemptions: []engine.Preemption{preemption(e, "victim", 30*time.Second)}})
	x.Wait()
	parked := e.fake.Job("victim")
	d = parked.UI.Description
	if !strings.HasPrefix(d, descMarker+"back in the queue (not complete): preempted for default/urgent") ||
		!strings.HasSuffix(d, descSeparator+"Sweep over learning rates.") {
		t.Fatalf("preempted job's description %q", d)
	}
	if *parked.Version != version+1 {
		t.Errorf("versions %d -> %d: the park is one registration, description included", version, *parked.Version)
	}
	e.waitFor("victim queued", func(s *cluster.Snapshot) bool {
		j, ok := s.Job(cluster.JobKey("default", "victim"))
		return ok && j.State == cluster.JobQueued
	})
}

// A parked job's description says the work it saved, and when that has
// used up its walltime, that the scheduler no longer knows how long it
// needs.
func TestParkedStatusSaysTheWorkSaved(t *testing.T) {
	for _, c := range []struct {
		name               string
		progress, walltime time.Duration
		want, not          string
	}{
		{"nothing saved", 0, 6 * time.Hour, "", "Work saved"},
		{"some saved", 4 * time.Hour, 6 * time.Hour, "Work saved so far: 4h0m0s of its run (impact_progress); the scheduler expects it to need its impact_walltime less this.", "no longer knows"},
		{"no walltime", 4 * time.Hour, 0, "Work saved so far: 4h0m0s", "no longer knows"},
		{"walltime used up", 6 * time.Hour, 6 * time.Hour, "all of its impact_walltime 6h0m0s: the scheduler no longer knows how long it needs", "expects it to need"},
	} {
		got := parkedStatus("preempted", c.progress, c.walltime)
		if (c.want != "" && !strings.Contains(got, c.want)) || strings.Contains(got, c.not) {
			t.Errorf("%s: %q, want %q and not %q", c.name, got, c.want, c.not)
		}
	}
}
