package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// The queue an engine keeps across cycles (per-shard job cache, the
// previous order as the sort's starting point) is every queued job of the
// snapshot exactly once, valid jobs by score (then priority, submit, ID)
// and jobs with bad metadata last, whatever was added, admitted or removed
// between cycles.
func TestPropertyQueueOrderAcrossCycles(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		store, pol := genWorld(t)
		e := mustEngine(t, pol)
		now := t0
		for cycle := range 5 {
			snap := store.Snapshot()
			plan := e.Decide(snap, now)
			want := map[string]*cluster.Job{}
			snap.EachJob(func(j *cluster.Job) {
				if j.State == cluster.JobQueued {
					want[j.ID] = j
				}
			})
			if len(plan.Queue) != len(want) {
				t.Fatalf("cycle %d: queue has %d jobs, snapshot %d queued", cycle, len(plan.Queue), len(want))
			}
			for i, id := range plan.Queue {
				if want[id] == nil {
					t.Fatalf("cycle %d: queue lists %s, not queued (or twice)", cycle, id)
				}
				want[id] = nil
				if i == 0 {
					continue
				}
				x, y := plan.Explanations[plan.Queue[i-1]], plan.Explanations[id]
				jx, _ := snap.Job(x.JobID)
				jy, _ := snap.Job(id)
				if !queuedBefore(x, y, jx, jy) {
					t.Fatalf("cycle %d: %s (score %v, %s) ordered before %s (score %v, %s)", cycle, x.JobID, x.Score.Total, x.Status, id, y.Score.Total, y.Status)
				}
			}
			if err := Apply(store, snap, plan, now); err != nil {
				t.Fatal(err)
			}
			for k := range rapid.IntRange(0, 3).Draw(t, "arrivals") {
				j := mkJob(fmt.Sprintf("new-%d-%d", cycle, k), meta("impact_tier", tierGen.Draw(t, "tier")), submitted(now),
					group("main", rapid.IntRange(1, 2).Draw(t, "count"), rapid.IntRange(1, 4).Draw(t, "per")))
				if err := store.UpsertJob(j); err != nil {
					t.Fatal(err)
				}
			}
			now = now.Add(time.Duration(rapid.IntRange(1, 90).Draw(t, "dt")) * time.Minute)
		}
	})
}

func queuedBefore(x, y *Explanation, jx, jy *cluster.Job) bool {
	px, py := x.Status == StatusParked && x.Tier == "", y.Status == StatusParked && y.Tier == ""
	if px != py {
		return !px
	}
	if x.Score.Total != y.Score.Total {
		return x.Score.Total > y.Score.Total
	}
	if jx.Priority != jy.Priority {
		return jx.Priority > jy.Priority
	}
	if c := jx.Submit.Compare(jy.Submit); c != 0 {
		return c < 0
	}
	return strings.Compare(jx.ID, jy.ID) < 0
}
