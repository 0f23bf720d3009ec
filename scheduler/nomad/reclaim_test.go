package nomad

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

func reclaim(e *env, job string, requeue bool) engine.Reclaim {
	var ids []string
	for _, a := range e.fake.Allocations(job) {
		ids = append(ids, a.ID)
	}
	return engine.Reclaim{Stop: engine.Stop{JobID: cluster.JobKey("default", job), Allocs: ids, GPUs: 8, Grace: 100 * time.Millisecond,
		CheckpointSignal: "SIGUSR1"}, Requeue: requeue, Requeues: 1, Reason: "hung: every member below 5% for 30m0s"}
}

// A reclaim of a hung gang signals it, waits its grace and then either
// queues it again (as a preemption does) or stops it for good; it is not
// recorded as a preemption.
func TestReclaimRequeuesOrStopsHungJob(t *testing.T) {
	for _, requeue := range []bool{true, false} {
		t.Run(map[bool]string{true: "requeue", false: "stop for good"}[requeue], func(t *testing.T) {
			e := newEnv(t, 2)
			e.register(gpuJob("hung", map[string]string{"impact_tier": "scavenger"}, [2]int{2, 4}))
			e.startWatcher(WatcherConfig{})
			x := e.executor(nil)
			admitAndRun(t, e, x, "hung")
			res := x.Apply(context.Background(), &engine.Plan{Reclaims: []engine.Reclaim{reclaim(e, "hung", requeue)}})
			if len(res.Reclaimed) != 1 || len(res.Preempted) != 0 {
				t.Fatalf("apply = %+v", res)
			}
			if res := x.Apply(context.Background(), &engine.Plan{Reclaims: []engine.Reclaim{reclaim(e, "hung", requeue)}}); len(res.Skipped) != 1 {
				t.Errorf("second reclaim = %+v, want skipped", res)
			}
			x.Wait()
			if sig := e.fake.Signals(); len(sig) != 2 || sig[0].Signal != "SIGUSR1" {
				t.Errorf("signals = %+v, want SIGUSR1 to both allocations", sig)
			}
			for _, a := range e.fake.Allocations("hung") {
				if a.ClientStatus == "running" {
					t.Errorf("alloc %s still running", a.ID)
				}
			}
			job := e.fake.Job("hung")
			if requeue {
				if *job.NodePool != parking || pinnedAPI(job) || derefB(job.Stop) {
					t.Errorf("requeued job pool %s pinned %v stop %v", *job.NodePool, pinnedAPI(job), derefB(job.Stop))
				}
				e.waitFor("hung queued again", func(s *cluster.Snapshot) bool {
					j, ok := s.Job(cluster.JobKey("default", "hung"))
					return ok && j.State == cluster.JobQueued && len(s.JobAllocs(j.ID)) == 0
				})
			} else if job != nil && !derefB(job.Stop) {
				t.Errorf("job not stopped: stop %v pool %s", derefB(job.Stop), *job.NodePool)
			}
			recs, err := x.st.Preemptions(context.Background(), time.Time{})
			if err != nil || len(recs) != 0 {
				t.Errorf("preemption records = %+v, %v; a reclaim is not a preemption", recs, err)
			}
			if in, _ := x.st.Intent(context.Background(), cluster.JobKey("default", "hung")); in != nil {
				t.Errorf("intent left: %+v", in)
			}
			want := map[bool]string{true: "reclaimed (stopped and queued again): hung", false: "reclaimed (stopped and left stopped): hung"}[requeue]
			if out := x.Outcome(cluster.JobKey("default", "hung")); !strings.HasPrefix(out, want) {
				t.Errorf("outcome %q, want prefix %q", out, want)
			}
		})
	}
}
