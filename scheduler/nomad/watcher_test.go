package nomad

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

func TestWatcherBuildsModel(t *testing.T) {
	e := newEnv(t, 2)
	e.register(gpuJob("train", map[string]string{"impact_tier": "high", "impact_project": "olmo"}, [2]int{2, 4}))
	e.register(gpuJob("typo", map[string]string{"impact_grace": "ten minutes"}, [2]int{1, 1}))
	// An unmanaged job in the GPU pool: its allocation counts as used.
	other := gpuJob("other", nil, [2]int{1, 2})
	gpu := "gpu"
	other.NodePool = &gpu
	e.register(other)
	e.startWatcher(WatcherConfig{})

	s := e.waitFor("model", func(s *cluster.Snapshot) bool { return s.NumNodes() == 2 && s.NumJobs() == 2 && s.NumAllocs() == 1 })
	n, _ := s.Node("node-0")
	if len(n.GPUs) != 8 || !n.Schedulable() || n.Pool != "gpu" {
		t.Fatalf("node-0 = %+v", n)
	}
	islands := map[int]int{}
	for _, g := range n.GPUs {
		islands[g.Island]++
		if !g.Healthy {
			t.Errorf("GPU %s unhealthy", g.ID)
		}
	}
	if islands[0] != 4 || islands[1] != 4 {
		t.Errorf("islands = %v, want 4+4", islands)
	}
	j, ok := s.Job(cluster.JobKey("default", "train"))
	if !ok || j.State != cluster.JobQueued || j.SpecErr != nil || j.Spec.Tier != "high" || j.GPUs() != 8 {
		t.Fatalf("train = %+v", j)
	}
	if j.ModifyIndex == 0 || j.Submit.IsZero() {
		t.Errorf("train lacks modify index or submit time: %+v", j)
	}
	bad, ok := s.Job(cluster.JobKey("default", "typo"))
	if !ok || bad.SpecErr == nil || !strings.Contains(bad.SpecErr.Error(), "impact_grace") {
		t.Fatalf("bad meta job = %+v (err %v), want a SpecErr naming impact_grace", bad, bad.SpecErr)
	}
	if _, ok := s.Job(cluster.JobKey("default", "other")); ok {
		t.Errorf("unmanaged job in the model")
	}
	a := s.Allocs()[0]
	if a.JobID != cluster.JobKey("default", "other") || len(a.GPUs) != 2 {
		t.Errorf("unmanaged alloc = %+v", a)
	}
	// Later events keep the model current: the unmanaged job ends.
	if err := e.fake.FinishAlloc(a.ID, false); err != nil {
		t.Fatal(err)
	}
	e.waitFor("alloc gone", func(s *cluster.Snapshot) bool { return s.NumAllocs() == 0 })
}

func TestWatcherStreamDropsMissNothingApplyNothingTwice(t *testing.T) {
	e := newEnv(t, 2)
	e.startWatcher(WatcherConfig{})
	for i := 0; i < 12; i++ {
		e.register(gpuJob(fmt.Sprintf("j%d", i), map[string]string{"impact_tier": "normal"}, [2]int{1, 1}))
		if i%3 == 1 {
			e.fake.DropStreams()
		}
		if i%4 == 2 {
			// A user edits a parked job while the stream is down.
			e.fake.DropStreams()
			if _, err := e.fake.UpdateJob(fmt.Sprintf("j%d", i-1), func(j *api.Job) { j.Meta["impact_tier"] = "high" }); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.waitIndex()
	if e.w.Stats().Reconnects == 0 {
		t.Fatal("no reconnect happened; the test tests nothing")
	}
	want := map[string]int{}
	var order []string
	for _, ev := range e.fake.Events() {
		if ev.Topic == "NodePool" {
			continue
		}
		k := fmt.Sprintf("%d/%s/%s/%s", ev.Index, ev.Topic, ev.Type, ev.Key)
		want[k]++
		order = append(order, k)
	}
	e.mu.Lock()
	got := map[string]int{}
	for _, ev := range e.applied {
		got[fmt.Sprintf("%d/%s/%s/%s", ev.Index, ev.Topic, ev.Type, ev.Key)]++
	}
	e.mu.Unlock()
	for _, k := range order {
		if got[k] != want[k] {
			t.Errorf("event %s applied %d times, emitted %d times", k, got[k], want[k])
		}
	}
	for k := range got {
		if want[k] == 0 {
			t.Errorf("applied an event Nomad never sent: %s", k)
		}
	}
	s := e.w.Snapshot()
	for i := 0; i < 12; i++ {
		if _, ok := s.Job(cluster.JobKey("default", fmt.Sprintf("j%d", i))); !ok {
			t.Errorf("job j%d missing", i)
		}
	}
	if j, _ := s.Job(cluster.JobKey("default", "j1")); j == nil || j.Spec.Tier != "high" {
		t.Errorf("user update made while the stream was down not applied: %+v", j)
	}
}

func TestWatcherResyncsAfterNomadRestart(t *testing.T) {
	e := newEnv(t, 1)
	for i := 0; i < 5; i++ {
		e.register(gpuJob(fmt.Sprintf("old%d", i), nil, [2]int{1, 1}))
	}
	e.startWatcher(WatcherConfig{})
	e.waitFor("old jobs", func(s *cluster.Snapshot) bool { return s.NumJobs() == 5 })
	resyncs := e.w.Stats().Resyncs
	node, err := e.fakeNode(0)
	if err != nil {
		t.Fatal(err)
	}
	e.fake.Restart(node)
	if err := e.c.EnsureNodePool(t.Context(), parking, "parking"); err != nil {
		t.Fatal(err)
	}
	e.register(gpuJob("new", nil, [2]int{1, 1}))
	s := e.waitFor("state of the restarted agent", func(s *cluster.Snapshot) bool {
		_, ok := s.Job(cluster.JobKey("default", "new"))
		return s.NumJobs() == 1 && ok && s.NumNodes() == 1
	})
	if e.w.Stats().Resyncs <= resyncs {
		t.Errorf("no resync after the restart")
	}
	if _, ok := s.Job(cluster.JobKey("default", "old0")); ok {
		t.Errorf("job of the old state survived")
	}
	// And it keeps following the new agent's stream.
	e.register(gpuJob("newer", nil, [2]int{1, 1}))
	e.waitFor("newer", func(s *cluster.Snapshot) bool { return s.NumJobs() == 2 })
}

func (e *env) fakeNode(i int) (*api.Node, error) {
	n, _, err := e.c.api.Nodes().Info(fmt.Sprintf("node-%d", i), nil)
	return n, err
}

// After a resync the stream replays Nomad's event buffer; objects gone
// before the resync's lists must not come back, even for a moment.
func TestResyncReplayDoesNotResurrect(t *testing.T) {
	e := newEnv(t, 1)
	e.register(gpuJob("gone", nil, [2]int{1, 1}))
	if _, _, err := e.c.api.Jobs().Deregister("gone", true, nil); err != nil {
		t.Fatal(err)
	}
	e.register(gpuJob("kept", nil, [2]int{1, 1}))
	var seenGone bool
	var mu sync.Mutex
	e.w = nil
	cfg := WatcherConfig{ParkingPool: parking, MinBackoff: 5 * time.Millisecond}
	var w *Watcher
	cfg.onBatch = func(uint64, []appliedEvent) {
		if _, ok := w.Snapshot().Job(cluster.JobKey("default", "gone")); ok {
			mu.Lock()
			seenGone = true
			mu.Unlock()
		}
	}
	w = NewWatcher(e.c, cfg, e.log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-w.Ready()
	deadline := time.Now().Add(5 * time.Second)
	for w.Stats().LastIndex < e.fake.Events()[len(e.fake.Events())-1].Index {
		if time.Now().After(deadline) {
			t.Fatal("replay not finished")
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if seenGone {
		t.Error("a job purged before the resync reappeared during the replay")
	}
	if _, ok := w.Snapshot().Job(cluster.JobKey("default", "kept")); !ok {
		t.Error("kept job missing")
	}
}

// A managed job's allocation that ends leaves the model with a record of
// the GPU time it used (start to the tasks' finish), so the engine charges
// its project even when it ran between two cycles.
func TestWatcherRecordsFinishedAllocations(t *testing.T) {
	e := newEnv(t, 1)
	t0 := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := t0
	e.fake.SetClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	// An admitted job: in the GPU pool, pinned by the scheduler.
	j := gpuJob("pinned", map[string]string{"impact_project": "olmo"}, [2]int{1, 2})
	gpu := "gpu"
	j.NodePool = &gpu
	j.TaskGroups[0].Constraints = append(j.TaskGroups[0].Constraints, &api.Constraint{LTarget: PinTarget, RTarget: "node-0", Operand: "set_contains_any"})
	e.register(j)
	e.startWatcher(WatcherConfig{})
	s := e.waitFor("running allocation", func(s *cluster.Snapshot) bool { return s.NumAllocs() == 1 })
	a := s.Allocs()[0]
	if recs, _ := s.FinishedSince(0); len(recs) != 0 {
		t.Fatalf("finished records before anything finished: %+v", recs)
	}
	mu.Lock()
	now = t0.Add(90 * time.Minute)
	mu.Unlock()
	if err := e.fake.FinishAlloc(a.ID, false); err != nil {
		t.Fatal(err)
	}
	s = e.waitFor("allocation finished", func(s *cluster.Snapshot) bool { return s.NumAllocs() == 0 })
	recs, _ := s.FinishedSince(0)
	if len(recs) != 1 {
		t.Fatalf("finished records = %+v, want one", recs)
	}
	r := recs[0]
	if r.AllocID != a.ID || r.JobID != cluster.JobKey("default", "pinned") || r.Project != "olmo" || r.GPUs != 2 ||
		!r.Start.Equal(a.Start) || !r.End.Equal(t0.Add(90*time.Minute)) {
		t.Errorf("record = %+v, want %s of default/pinned, project olmo, 2 GPUs, %v to %v", r, a.ID, a.Start, t0.Add(90*time.Minute))
	}
	// Its tasks exited successfully and nobody stopped it: a run time the
	// engine may learn from.
	if !r.Completed {
		t.Errorf("record = %+v, want it completed", r)
	}
}

// Only batches that change the model signal a change (each is worth a
// scheduling cycle); evaluation events and stale replays are counted as
// applied but signal nothing.
func TestWatcherSignalsOnlyModelChanges(t *testing.T) {
	w := NewWatcher(nil, WatcherConfig{ParkingPool: parking}, nil)
	changed := func() bool {
		select {
		case <-w.Changes():
			return true
		default:
			return false
		}
	}
	apply := func(line string) {
		t.Helper()
		var b wireBatch
		if err := decodeBatch([]byte(line), &b, nil); err != nil {
			t.Fatal(err)
		}
		if err := w.applyBatch(&b, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	apply(`{"Index":10,"Events":[{"Topic":"Evaluation","Type":"EvaluationUpdated","Key":"e1","Index":10,"Payload":{"Evaluation":{"ID":"e1","JobID":"j","Status":"blocked"}}}]}`)
	if changed() {
		t.Error("an evaluation event signalled a model change")
	}
	job := `{"Index":%d,"Events":[{"Topic":"Job","Type":"JobRegistered","Key":"j","Namespace":"default","Index":%d,"Payload":{"Job":{"ID":"j","Namespace":"default","NodePool":"` + parking + `","Status":"pending","ModifyIndex":%d,"JobModifyIndex":%d,"TaskGroups":[{"Name":"g","Count":1}]}}}]}`
	apply(fmt.Sprintf(job, 11, 11, 11, 11))
	if !changed() {
		t.Fatal("a job registration did not signal a change")
	}
	if _, ok := w.Snapshot().Job(cluster.JobKey("default", "j")); !ok {
		t.Fatal("job not in the model")
	}
	// An older version of the job, replayed at a later index: no change.
	apply(fmt.Sprintf(job, 12, 12, 9, 9))
	if changed() {
		t.Error("a stale job version signalled a change")
	}
	if st := w.Stats(); st.EventsApplied != 3 || st.LastIndex != 12 {
		t.Errorf("stats %+v: want 3 events applied up to index 12", st)
	}
}
