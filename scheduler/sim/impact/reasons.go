package impact

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// Option configures New.
type Option func(*options)

type options struct {
	reasons io.Writer
}

// WithReasons writes to w, as tab-separated rows (ReasonsHeader), every
// change of a queued job's status or waiting reason at each decision: what
// `impact explain` would have said of it, over the whole replay. The
// engine then formats explanations, which makes a replay slower but
// decides the same (engine.WithoutExplanations).
func WithReasons(w io.Writer) Option { return func(o *options) { o.reasons = w } }

// ReasonsHeader is the first row WithReasons writes.
const ReasonsHeader = "time_s\tjob\tstatus\treason\n"

// reasonTrace writes the changes of the queued jobs' explanations, one
// row per job whose status or reason differs from the last it wrote; the
// rows of one decision in job ID order, so that a replay writes the same
// file every time (the plan keeps explanations in a map).
type reasonTrace struct {
	w       io.Writer
	last    map[string]string
	err     error
	changed []string // scratch: the job IDs that changed at a decision
}

func newReasonTrace(w io.Writer) *reasonTrace {
	t := &reasonTrace{w: w, last: map[string]string{}}
	_, t.err = io.WriteString(w, ReasonsHeader)
	return t
}

// record writes the changes plan's explanations make at now; the first
// write error stays and is returned from then on.
func (t *reasonTrace) record(now int64, plan *engine.Plan) error {
	if t.err != nil {
		return t.err
	}
	t.changed = t.changed[:0]
	for id, e := range plan.Explanations {
		key := string(e.Status) + "\x00" + e.Reason
		if t.last[id] != key {
			t.last[id] = key
			t.changed = append(t.changed, id)
		}
	}
	slices.Sort(t.changed)
	for _, id := range t.changed {
		e := plan.Explanations[id]
		if _, err := fmt.Fprintf(t.w, "%d\t%s\t%s\t%s\n", now, id, e.Status, oneLine(e.Reason)); err != nil {
			t.err = fmt.Errorf("write waiting reasons: %w", err)
			return t.err
		}
	}
	return nil
}

// oneLine keeps a reason on its row of the TSV.
func oneLine(s string) string {
	return strings.NewReplacer("\t", " ", "\n", " ").Replace(s)
}
