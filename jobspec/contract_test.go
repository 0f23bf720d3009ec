package jobspec_test

import (
	"testing"

	"github.com/impact-sched/nomad-impact/internal/jobspectest"
	"github.com/impact-sched/nomad-impact/jobspec"
)

// The table the scheduler's and the driver's tests share says what
// ParseMeta says, and covers every key with a valid and an invalid value.
func TestContractTable(t *testing.T) {
	cases := jobspectest.Cases(t)
	valid, invalid := map[string]int{}, map[string]int{}
	for _, c := range cases {
		s, err := jobspec.ParseMeta(c.Meta(), nil)
		switch {
		case c.Valid() && err != nil:
			t.Errorf("%s = %q: want %q, got error %v", c.Key, c.Value, c.Want, err)
		case c.Valid() && jobspectest.Meaning(s, c.Key) != c.Want:
			t.Errorf("%s = %q: means %q, want %q", c.Key, c.Value, jobspectest.Meaning(s, c.Key), c.Want)
		case !c.Valid() && (err == nil || err.Error() != c.Err):
			t.Errorf("%s = %q: error %v, want %q", c.Key, c.Value, err, c.Err)
		}
		if c.Valid() {
			valid[c.Key]++
		} else {
			invalid[c.Key]++
		}
	}
	for _, k := range jobspec.Keys() {
		if valid[k] == 0 || invalid[k] == 0 {
			t.Errorf("the table has %d valid and %d invalid rows for %s: want both", valid[k], invalid[k], k)
		}
	}
}

// Every signal name is a valid checkpoint signal, and each is refused in
// the spellings Nomad does not take, with the name meant suggested.
func TestSignalVocabulary(t *testing.T) {
	names := jobspec.SignalNames()
	if len(names) == 0 {
		t.Fatal("no signal names")
	}
	for _, n := range names {
		if got, err := jobspec.ParseSignal(" " + n + " "); err != nil || got != n {
			t.Errorf("ParseSignal(%q) = %q, %v", n, got, err)
		}
		for _, bad := range []string{n[3:], "sig" + n[3:]} {
			_, err := jobspec.ParseSignal(bad)
			if err == nil || err.Error() != `must be a signal name such as SIGUSR1 or SIGTERM (did you mean "`+n+`"?)` {
				t.Errorf("ParseSignal(%q): %v, want an error suggesting %s", bad, err, n)
			}
		}
	}
}
