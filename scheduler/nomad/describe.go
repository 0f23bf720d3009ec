package nomad

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/jobspec"
)

// The job's ui.description, at the top of its page and under its name in
// Nomad's UI, is where an operator looks first. Nomad's own status there
// can mislead: a queued batch job is a red "Failed" (nothing placed), and
// a preempted one can be a green "Complete" (the UI fills the job's slots
// with the complete allocations of any version). Every time the executor
// re-registers a job anyway (an admission, a park after a preemption, a
// requeue or a rolled-back admission) it writes what happened in front of
// the user's own description, at no extra job version or evaluation. The
// block is the text before descSeparator, starting with descMarker; the
// user's description after it is kept as written.
const (
	descMarker    = "**impact scheduler:** "
	descSeparator = "\n\n---\n\n"
)

// userDescription is the job's description without the scheduler's block.
func userDescription(job *api.Job) string {
	if job.UI == nil {
		return ""
	}
	d := job.UI.Description
	if !strings.HasPrefix(d, descMarker) {
		return d
	}
	if i := strings.Index(d, descSeparator); i >= 0 {
		return d[i+len(descSeparator):]
	}
	return ""
}

// describe puts the scheduler's status in front of the job's description:
// the sentence, when it was written and, with page, a link to the agent's
// page of the job.
func describe(job *api.Job, status string, at time.Time, page string) {
	user := userDescription(job)
	var b strings.Builder
	b.WriteString(descMarker)
	b.WriteString(status)
	fmt.Fprintf(&b, " (%s)", at.UTC().Format("2006-01-02 15:04:05 UTC"))
	if page != "" {
		fmt.Fprintf(&b, " [Its page on the impact scheduler](%s)", page)
	}
	if user != "" {
		b.WriteString(descSeparator)
		b.WriteString(user)
	}
	if job.UI == nil {
		job.UI = &api.JobUIConfig{}
	}
	job.UI.Description = b.String()
}

// admittedStatus says what an admission did, for the job's description,
// from its pinned GPUs by node (the intent's PinnedGPUs).
func admittedStatus(pinned map[string][]string) string {
	gpus := 0
	for _, ids := range pinned {
		gpus += len(ids)
	}
	return fmt.Sprintf("admitted: started whole on %d node(s) with %d GPU(s) pinned by the scheduler. "+
		"Nomad's status below is this run's.", len(pinned), gpus)
}

// parkedStatus says why a job is back in the queue, for its description:
// it is queued, not complete, whatever badge Nomad draws; with progress,
// the work it has saved (impact_progress), and whether that has used up
// its walltime (impact_walltime; 0: none), after which the scheduler no
// longer knows how long it needs (jobspec.Spec.Left).
func parkedStatus(why string, progress, walltime time.Duration) string {
	s := "back in the queue (not complete): " + why + ". It holds no GPUs while it waits " +
		"(Nomad shows it as not placed) and runs again when the scheduler admits it."
	switch {
	case progress <= 0:
	case walltime > 0 && (jobspec.Spec{Walltime: walltime, Progress: progress}).Left() == 0:
		s += fmt.Sprintf(" Work saved so far: %s of its run (impact_progress), all of its impact_walltime %s: the scheduler no longer knows how long it needs; raise impact_walltime if it will run longer.", progress, walltime)
	default:
		s += fmt.Sprintf(" Work saved so far: %s of its run (impact_progress); the scheduler expects it to need its impact_walltime less this.", progress)
	}
	return s
}

// parkReason is the why of parkedStatus for a stop the executor carried
// out (a preemption, a requeue, a reclaim).
func parkReason(in *Intent) string {
	switch {
	case in.Preemptor != "":
		return fmt.Sprintf("preempted for %s with its checkpoint signal", in.Preemptor)
	case in.Reason != "":
		return "requeued whole: " + firstClause(in.Reason)
	}
	return "requeued whole"
}

// firstClause is a reason's first clause (up to the first "; "), enough
// for a one-line status.
func firstClause(s string) string {
	if i := strings.Index(s, "; "); i >= 0 {
		return s[:i]
	}
	return s
}

// page is the agent's page of the job, "" without ExecutorConfig.PageURL.
func (x *Executor) page(jobKey string) string {
	if x.cfg.PageURL == nil {
		return ""
	}
	return x.cfg.PageURL(jobKey)
}
