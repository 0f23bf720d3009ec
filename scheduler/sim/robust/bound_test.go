package robust

import (
	"fmt"
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// TestWidestThatMustStart: the preemption bound keeps idle the GPUs of
// the widest top-tier job its p99 does not let wait: of 99 jobs none may
// (nearest rank), of 100 one, so a lone 8-GPU job among 1-GPU ones sets
// the bound at 99 jobs and not at 100, and two of them do at 100.
func TestWidestThatMustStart(t *testing.T) {
	jobs := func(wide, narrow int) []trace.Job {
		js := []trace.Job{{ID: "n", Tier: "normal", GPUs: 64}}
		for i := range wide + narrow {
			g := 1
			if i < wide {
				g = 8
			}
			js = append(js, trace.Job{ID: fmt.Sprint("c", i), Tier: "critical", GPUs: g})
		}
		return js
	}
	for _, tc := range []struct {
		name         string
		wide, narrow int
		want         int
	}{
		{"no top-tier job", 0, 0, 0},
		{"one job", 1, 0, 8},
		{"99 jobs: none may wait", 1, 98, 8},
		{"100 jobs: the widest may wait", 1, 99, 1},
		{"100 jobs, two wide: one of them must start", 2, 98, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := widestThatMustStart(jobs(tc.wide, tc.narrow)); got != tc.want {
				t.Errorf("widestThatMustStart = %d, want %d", got, tc.want)
			}
		})
	}
}
