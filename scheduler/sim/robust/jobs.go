package robust

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// JobsHeader is the first row of a per-job outcome file (writeJobs).
const JobsHeader = "job\ttier\tgpus\tpreemptible\tduration_s\twalltime_s\tsubmit_s\tfirst_start_s\tfinish_s\tpreemptions\tfree_at_submit\twidest_free_at_submit\n"

// jobsPath is where a scenario's per-job outcomes under policy go
// (Config.JobsDir), and reasonsPath its impact waiting reasons.
func jobsPath(dir, scenario, policy string) string {
	return filepath.Join(dir, scenario+"."+policy+".tsv")
}

func reasonsPath(dir, scenario string) string {
	return filepath.Join(dir, scenario+".impact.reasons.tsv")
}

// writeJobs writes one row per job of a run: the trace's facts (its
// preemptibility and walltime as the scenario labels them: empty when
// unlabelled, trace.UnknownWalltime, a week, for a walltime the user
// gave none) beside what the policy made of it (-1 for a start or finish
// that never came) and the free GPUs it found on arrival (its first
// submit: a requeue is not an arrival). With a second policy's file for the same scenario, each
// job's wait can be compared and told apart by what it found.
func writeJobs(path string, jobs []trace.Job, res *sim.Result) error {
	facts := make(map[string]*trace.Job, len(jobs))
	for i := range jobs {
		facts[jobs[i].ID] = &jobs[i]
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("per-job outcomes: %w", err)
	}
	w := bufio.NewWriter(f)
	w.WriteString(JobsHeader)
	for _, jr := range res.Jobs {
		j := facts[jr.ID]
		if j == nil {
			f.Close()
			return fmt.Errorf("per-job outcomes %s: job %q is not in the scenario", path, jr.ID)
		}
		pre := ""
		if j.Preemptible != nil {
			pre = fmt.Sprint(*j.Preemptible)
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", jr.ID, jr.Tier, j.GPUs, pre, j.Duration, j.Walltime,
			jr.Submit, jr.FirstStart, jr.Finish, jr.Preempted, jr.FreeAtSubmit, jr.WidestFreeAtSubmit)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("per-job outcomes %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("per-job outcomes %s: %w", path, err)
	}
	return nil
}

// reasonsFile is the buffered file impact's waiting reasons go to.
type reasonsFile struct {
	f *os.File
	w *bufio.Writer
}

func createReasons(path string) (*reasonsFile, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("waiting reasons: %w", err)
	}
	return &reasonsFile{f: f, w: bufio.NewWriter(f)}, nil
}

// close flushes and closes the file.
func (r *reasonsFile) close() error {
	ferr := r.w.Flush()
	cerr := r.f.Close()
	if err := errors.Join(ferr, cerr); err != nil {
		return fmt.Errorf("waiting reasons %s: %w", r.f.Name(), err)
	}
	return nil
}
