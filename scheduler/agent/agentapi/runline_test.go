package agentapi

import (
	"strings"
	"testing"
)

// TestRunLine: the run a job declares and has saved, in the words
// `impact explain`, the job's page and its Variable share; what it
// expects of the next run is the walltime less the saved work, unknown
// once the saved work reaches the walltime.
func TestRunLine(t *testing.T) {
	const h = 3600.0
	for _, c := range []struct {
		name        string
		state       string
		wall, saved float64
		want        string
	}{
		{"neither", StateWaiting, 0, 0, ""},
		{"walltime only", StateWaiting, 6 * h, 0, "6h00m (impact_walltime)"},
		{"saved work, waiting", StateWaiting, 6 * h, 4 * h, "6h00m (impact_walltime), 4h00m of it saved by earlier runs (impact_progress): expected to need 2h00m from its next start"},
		{"saved work, running", StateRunning, 6 * h, 4 * h, "6h00m (impact_walltime), 4h00m of it saved by earlier runs (impact_progress): expected to need 2h00m from this run's start"},
		{"saved work, admitting", StateAdmitting, 6 * h, 4 * h, "expected to need 2h00m from this run's start"},
		{"saved all of it", StateWaiting, 6 * h, 6 * h, "6h00m (impact_walltime), all of it saved by earlier runs (impact_progress 6h00m): how long it still needs is unknown"},
		{"saved past it", StateWaiting, 6 * h, 7 * h, "6h00m (impact_walltime), all of it saved by earlier runs (impact_progress 7h00m): how long it still needs is unknown"},
		{"saved work, no walltime", StateWaiting, 0, 90, "none given; 1m30s saved by earlier runs (impact_progress)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := (Entry{State: c.state, WalltimeSeconds: c.wall, ProgressSeconds: c.saved}).RunLine(); !strings.HasSuffix(got, c.want) || (c.want == "") != (got == "") {
				t.Errorf("RunLine(%v, %v) = %q, want %q", c.wall, c.saved, got, c.want)
			}
		})
	}
}
