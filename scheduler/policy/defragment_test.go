package policy

import (
	"strings"
	"testing"
	"time"
)

// The defragment block is validated with errors that name the field.
func TestDefragmentPolicyValidation(t *testing.T) {
	cases := []struct{ src, want string }{
		{`defragment { max_victim_gpus = 0 }`, "defragment max_victim_gpus: must be >= 1, got 0"},
		{`defragment { max_per_cycle = 0 }`, "defragment max_per_cycle: must be >= 1, got 0"},
		{`defragment { gain_horizon = "-1m" }`, "defragment gain_horizon: must not be negative"},
		{"preemption { enabled = false }\ndefragment { enabled = true }", "test.hcl:2: defragment enabled: needs preemption enabled"},
		{`defragment { moves = 3 }`, `test.hcl:1: defragment moves: Unsupported argument; An argument named "moves" is not expected here`},
	}
	for _, tc := range cases {
		_, err := LoadBytes([]byte(tc.src), "test.hcl")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.src, err, tc.want)
		}
	}
	p, err := LoadBytes([]byte("preemption { gain_horizon = \"3m\" }\ndefragment { enabled = true }"), "test.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if !p.Defragment.Enabled || p.Defragment.MaxVictimGPUs != 2 || p.Defragment.MaxPerCycle != 2 || p.DefragmentGainHorizon() != 3*time.Minute {
		t.Fatalf("defaults: %+v, gain horizon %s; want max_victim_gpus 2, max_per_cycle 2, the preemption block's horizon", p.Defragment, p.DefragmentGainHorizon())
	}
}
