package robust

import (
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/policy"
	"github.com/impact-sched/nomad-impact/scheduler/sim/impact"
)

// The preemption bound's floor is the time a preempted job takes to stop:
// the model's grace; the time to save where jobs save on their signal
// within the grace (and exit); the shortest loan where the impact policy
// lends a headroom's nodes; none where it takes back young work or work
// with little unsaved. With a
// loan of 0s a top-tier job may start a debounce after it arrives, so no
// critical gain is waived for needing less than a grace.
func TestStopTime(t *testing.T) {
	pol, err := impact.DefaultPolicy()
	if err != nil {
		t.Fatal(err)
	}
	pol.Headrooms["gpu"].TakeBack = 0 // the built-in policy takes back
	pol.Headrooms["gpu"].TakeBackUnsaved = 0
	back := pol.Clone()
	back.Headrooms["gpu"].TakeBack = 10 * time.Minute
	unsaved := pol.Clone()
	unsaved.Headrooms["gpu"].TakeBackUnsaved = 2 * time.Minute
	loan := pol.Clone()
	zero := time.Duration(0)
	loan.Headrooms["gpu"].LoanGrace = &zero
	for _, c := range []struct {
		name   string
		save   int64
		policy *policy.Policy
		want   int64
		basis  string
	}{
		{"grace", 0, pol, 60, "grace 60s"},
		{"saves within the grace", 10, pol, 10, "10s to save on the checkpoint signal"},
		{"saving takes longer than the grace", 90, pol, 60, "grace 60s"},
		{"a loan", 10, loan, 0, `headroom "gpu" loan_grace 0s`},
		{"taking back young work", 10, back, 0, `headroom "gpu" take_back 10m0s: young work stops at once`},
		{"taking back work with little unsaved", 10, unsaved, 0, `headroom "gpu" take_back_unsaved 2m0s: work with little unsaved stops at once`},
	} {
		cfg := DefaultConfig(c.policy)
		cfg.ImpactModel.SaveOnSignal = c.save
		if got, basis := stopTime(cfg); got != c.want || basis != c.basis {
			t.Errorf("%s: stopTime = %d, %q; want %d, %q", c.name, got, basis, c.want, c.basis)
		}
	}
	// The floor a loan of 0s leaves (the debounce) is below any p99 the
	// critical gain can need (native's exceeds ten times the bound, 1s or
	// more), so the bound never waives it.
	o := &Outcome{Scenario: Scenario{GPUs: 16}, Debounce: 1, Grace: 0, StopBasis: `headroom "gpu" loan_grace 0s`}
	if bound, short := preemptionBound(o, 2, 0); bound != "" || short != "" {
		t.Errorf("with a loan of 0s the bound says %q / %q", bound, short)
	}
}
