package nomad

import (
	"testing"

	"github.com/impact-sched/nomad-impact/internal/jobspectest"
	"github.com/impact-sched/nomad-impact/jobspec"
)

// The scheduler reads each input of the jobspec contract's table (shared
// with the driver's TestContractAgreesWithScheduler) as the table says:
// a Nomad job with that one meta key becomes a model job whose spec (and
// its group's) means the table's value, or whose SpecErr is the table's
// error, word for word.
func TestContractAsTheSchedulerReadsIt(t *testing.T) {
	for _, c := range jobspectest.Cases(t) {
		wj := &wireJob{ID: "j", Namespace: "default", NodePool: parking, Meta: c.Meta(),
			TaskGroups: []wireGroup{{Name: "workers", Count: 1}}}
		cj := translateJob(wj, "default/j", 0, false, translateConfig{parkingPool: parking})
		if !c.Valid() {
			if cj.SpecErr == nil || cj.SpecErr.Error() != c.Err {
				t.Errorf("%s = %q: SpecErr %v, want %q", c.Key, c.Value, cj.SpecErr, c.Err)
			}
			continue
		}
		if cj.SpecErr != nil {
			t.Errorf("%s = %q: SpecErr %v, want it to mean %q", c.Key, c.Value, cj.SpecErr, c.Want)
			continue
		}
		for what, s := range map[string]jobspec.Spec{"job": cj.Spec, "group": cj.Groups[0].Spec} {
			if got := jobspectest.Meaning(s, c.Key); got != c.Want {
				t.Errorf("%s = %q: the %s's spec means %q, want %q", c.Key, c.Value, what, got, c.Want)
			}
		}
	}
}
