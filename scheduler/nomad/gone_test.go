package nomad

import (
	"context"
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// Issue 39: a parked job purged between the decision and the admission is
// skipped (SkipGone), not a failed action, and leaves no intent behind.
func TestAdmitOfPurgedJobIsSkipped(t *testing.T) {
	e := newEnv(t, 3)
	e.register(gpuJob("q-1", map[string]string{"impact_tier": "high"}, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	s := e.waitFor("job", func(s *cluster.Snapshot) bool { return s.NumJobs() == 1 })
	adm := admission(t, s, "q-1")
	if _, _, err := e.c.api.Jobs().Deregister("q-1", true, nil); err != nil {
		t.Fatal(err)
	}
	x := e.executor(nil)
	res := x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{adm}})
	if len(res.Failed) != 0 || len(res.Admitted) != 0 || res.Skipped[adm.JobID] != SkipGone {
		t.Fatalf("apply = %+v, want the admission skipped as gone", res)
	}
	ins, err := x.st.Intents(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ins) != 0 {
		t.Errorf("intents left behind: %+v", ins)
	}
}
