package nomad

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// Issue 39: a job its user purges while the executor stops it (in its
// preemption grace) is gone, not an error: the stop ends without an ERROR
// log and without an intent left for the next leader to "recover".
func TestPreemptionOfAPurgedJobIsNoError(t *testing.T) {
	e := newEnv(t, 2)
	e.register(gpuJob("victim", map[string]string{"impact_tier": "scavenger"}, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	var logs syncBuffer
	x := e.executor(nil)
	x.log = hclog.New(&hclog.LoggerOptions{Name: "executor", Level: hclog.Info, Output: &logs})
	admitAndRun(t, e, x, "victim")
	res := x.Apply(context.Background(), &engine.Plan{Preemptions: []engine.Preemption{preemption(e, "victim", 2*time.Second)}})
	if len(res.Preempted) != 1 {
		t.Fatalf("apply = %+v", res)
	}
	if _, _, err := e.c.api.Jobs().Deregister("victim", true, nil); err != nil {
		t.Fatal(err)
	}
	x.Wait()
	if strings.Contains(logs.tail(1<<20), "[ERROR]") {
		t.Errorf("a purged victim's preemption logged an error:\n%s", logs.tail(1<<20))
	}
	if in, _ := x.st.Intent(context.Background(), cluster.JobKey("default", "victim")); in != nil {
		t.Errorf("intent left for a purged job: %+v", in)
	}
}
