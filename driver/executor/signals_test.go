package executor

import (
	"sort"
	"strings"
	"testing"

	"github.com/impact-sched/nomad-impact/jobspec"
)

// Every signal name the contract accepts has a number here, and no other.
func TestSignalNumbers(t *testing.T) {
	t.Parallel()
	var here []string
	for n := range signalsByName {
		here = append(here, n)
	}
	sort.Strings(here)
	if got, want := strings.Join(here, " "), strings.Join(jobspec.SignalNames(), " "); got != want {
		t.Fatalf("the driver numbers %s; the contract's names are %s", got, want)
	}
	for _, n := range jobspec.SignalNames() {
		if s, err := ParseSignal(n); err != nil || s == 0 {
			t.Errorf("ParseSignal(%q) = %v, %v", n, s, err)
		}
	}
	for _, bad := range []string{"usr1", "USR1", "10", "SIGBOGUS", ""} {
		if _, err := ParseSignal(bad); err == nil {
			t.Errorf("ParseSignal(%q): want an error (the contract takes SIG names only)", bad)
		}
	}
}
