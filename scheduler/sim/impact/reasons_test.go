package impact

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/policy"
	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// TestReasonsTraceWaitsAndDecidesTheSame: with WithReasons, a job that
// waits (4 GPUs free, 2 on each node) gets a row saying why at the first
// decision that sees it, one row per change rather than per decision (the
// 1-GPU job's admission while it waits changes nothing for it),
// and its admission another; one decision's rows in job ID order; and the
// replay decides exactly as without explanations.
func TestReasonsTraceWaitsAndDecidesTheSame(t *testing.T) {
	jobs := []trace.Job{
		tj("a", 0, 3600, 6, "normal", false),
		tj("b", 0, 3000, 6, "normal", false),
		tj("waits", 60, 600, 4, "normal", false),
		tj("other", 120, 600, 1, "normal", false),
	}
	plain, err := sim.Run(jobs, newSchedNoHeadroom(t), opts(t, 2))
	if err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	s := newSchedWith(t, func(pol *policy.Policy) { pol.Headrooms = nil }, WithReasons(&buf))
	traced, err := sim.Run(jobs, s, opts(t, 2))
	if err != nil {
		t.Fatal(err)
	}
	for i := range plain.Jobs {
		if p, q := plain.Jobs[i], traced.Jobs[i]; p != q {
			t.Fatalf("%s: %+v without reasons, %+v with", p.ID, p, q)
		}
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if lines[0]+"\n" != ReasonsHeader {
		t.Fatalf("first row %q, want the header", lines[0])
	}
	var rows []string
	prev := []string{"", ""}
	for _, l := range lines[1:] {
		f := strings.Split(l, "\t")
		if len(f) != 4 {
			t.Fatalf("row %q: want 4 fields", l)
		}
		// One decision's rows come in job ID order ("a" and "b" both
		// change at the first): the file is the same every replay.
		if f[0] == prev[0] && f[1] <= prev[1] {
			t.Fatalf("row %q after job %q at the same time: want job ID order", l, prev[1])
		}
		prev = f[:2]
		if f[1] == "waits" {
			rows = append(rows, f[0]+" "+f[2]+" "+f[3])
		}
	}
	start := byID(traced)["waits"].FirstStart
	if o := byID(traced)["other"]; o.FirstStart < 120 || o.FirstStart >= start {
		t.Fatalf("the 1-GPU job started at %d, want while the 4-GPU job waited (120 to %d)", o.FirstStart, start)
	}
	if len(rows) != 2 || !strings.HasPrefix(rows[0], "61 waiting no placement for the whole gang (4 GPUs)") || rows[1] != fmt.Sprintf("%d admitted ", start) {
		t.Fatalf("rows for the waiting job %q (started at %d), want one waiting from 61 and its admission", rows, start)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestReasonsWriteErrorStopsTheRun: a trace that cannot be written fails
// the replay with the cause, rather than leaving a silently short file.
func TestReasonsWriteErrorStopsTheRun(t *testing.T) {
	s := newSchedWith(t, func(*policy.Policy) {}, WithReasons(failingWriter{}))
	_, err := sim.Run([]trace.Job{tj("a", 0, 60, 1, "normal", false)}, s, opts(t, 1))
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("err %v, want the write's", err)
	}
}
