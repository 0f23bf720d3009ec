package nomad

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/internal/nomadfake"
)

func TestAdmitPinsGangToPlannedNodesAndIsland(t *testing.T) {
	e := newEnv(t, 3)
	e.register(gpuJob("gang", map[string]string{"impact_tier": "high"}, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	s := e.waitFor("job", func(s *cluster.Snapshot) bool { return s.NumJobs() == 1 })
	x := e.executor(nil)
	res := x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{admission(t, s, "gang")}})
	if len(res.Admitted) != 1 || len(res.Failed) != 0 {
		t.Fatalf("apply = %+v", res)
	}
	job := e.fake.Job("gang")
	if *job.NodePool != "gpu" {
		t.Errorf("pool = %s", *job.NodePool)
	}
	var pin, distinct bool
	for _, c := range job.TaskGroups[0].Constraints {
		if c.LTarget == PinTarget && c.Operand == "set_contains_any" && c.RTarget == "node-0,node-1" {
			pin = true
		}
		if c.Operand == "distinct_hosts" {
			distinct = true
		}
	}
	if !pin || !distinct {
		t.Errorf("constraints = %+v, want pin to node-0,node-1 and distinct_hosts", job.TaskGroups[0].Constraints)
	}
	allocs := e.fake.Allocations("gang")
	nodes := map[string]bool{}
	for _, a := range allocs {
		nodes[a.NodeID] = true
		if a.ClientStatus != "running" {
			t.Errorf("alloc %s %s", a.ID, a.ClientStatus)
		}
		devs := a.AllocatedResources.Tasks["trainer"].Devices
		if len(devs) != 1 || !strings.Contains(devs[0].Name, "island 1") {
			t.Errorf("alloc on %s got %+v, want the planned island 1", a.NodeID, devs)
		}
		// Exactly the planned GPUs (the device pin), not just the island.
		var want []string
		for _, ap := range admission(t, s, "gang").Groups[0].Allocs {
			if ap.NodeID == a.NodeID {
				want = ap.GPUs
			}
		}
		if got := slices.Sorted(slices.Values(devs[0].DeviceIDs)); !slices.Equal(got, want) {
			t.Errorf("alloc on %s got GPUs %v, want the planned %v", a.NodeID, got, want)
		}
	}
	if len(allocs) != 2 || !nodes["node-0"] || !nodes["node-1"] {
		t.Errorf("allocations on %v, want node-0 and node-1", nodes)
	}
	if in, _ := x.st.Intent(context.Background(), cluster.JobKey("default", "gang")); in == nil || in.Phase != PhaseRegistered {
		t.Errorf("intent after admission = %+v", in)
	}
	if rolled := x.CheckDeadlines(context.Background()); len(rolled) != 0 {
		t.Errorf("rolled back %v", rolled)
	}
	if in, _ := x.st.Intent(context.Background(), cluster.JobKey("default", "gang")); in != nil {
		t.Errorf("intent kept after the gang started: %+v", in)
	}
	if n := x.PinMismatches(); n != 0 {
		t.Errorf("%d pin mismatches reading back what Nomad allocated, want 0", n)
	}
	// A read-back that disagrees with the pins is counted, per node.
	var started []string
	for _, a := range allocs {
		started = append(started, a.ID)
	}
	x.checkPins(context.Background(), &Intent{JobID: cluster.JobKey("default", "gang"),
		PinnedGPUs: map[string][]string{"node-0": {"not-this-gpu"}}}, started)
	if n := x.PinMismatches(); n != 2 {
		t.Errorf("%d pin mismatches after a wrong read-back (node-0 differs, node-1 unplanned), want 2", n)
	}
	// The model now shows the job running with its gang.
	e.waitFor("running gang", func(s *cluster.Snapshot) bool {
		j, ok := s.Job(cluster.JobKey("default", "gang"))
		return ok && j.State == cluster.JobRunning && len(s.JobAllocs(j.ID)) == 2
	})
}

func TestAdmitLosesToConcurrentUserUpdate(t *testing.T) {
	e := newEnv(t, 2)
	e.register(gpuJob("edited", nil, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	s := e.waitFor("job", func(s *cluster.Snapshot) bool { return s.NumJobs() == 1 })
	adm := admission(t, s, "edited")
	// The user edits the job after the snapshot the plan was made on.
	if _, err := e.fake.UpdateJob("edited", func(j *api.Job) { j.Meta = map[string]string{"impact_tier": "critical"} }); err != nil {
		t.Fatal(err)
	}
	x := e.executor(nil)
	res := x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{adm}})
	if conflicts(res) != 1 || len(res.Admitted) != 0 {
		t.Fatalf("apply = %+v, want a conflict", res)
	}
	if j := e.fake.Job("edited"); *j.NodePool != parking || j.Meta["impact_tier"] != "critical" {
		t.Errorf("user's update lost: pool %s meta %v", *j.NodePool, j.Meta)
	}
	// The race inside the register itself: Nomad answers HTTP 500 with
	// its EnforceIndex text (as recorded from the real agent).
	s = e.waitFor("new index", func(s *cluster.Snapshot) bool {
		j, _ := s.Job(cluster.JobKey("default", "edited"))
		return j != nil && j.Spec.Tier == "critical"
	})
	adm = admission(t, s, "edited")
	e.fake.FailNext("PUT", "/v1/jobs", 500, "Enforcing job modify index 44: job exists with conflicting job modify index: 45")
	res = x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{adm}})
	if conflicts(res) != 1 {
		t.Fatalf("apply = %+v, want a conflict", res)
	}
	if in, _ := x.st.Intent(context.Background(), adm.JobID); in != nil {
		t.Errorf("intent left after a conflict: %+v", in)
	}
	if len(e.fake.Allocations("edited")) != 0 {
		t.Errorf("conflicting admission placed allocations")
	}
	// The next cycle, on the fresh index, admits it.
	res = x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{adm}})
	if len(res.Admitted) != 1 {
		t.Fatalf("retry = %+v", res)
	}
}

// A register whose answer is lost (and the job cannot be read back) may
// have placed the gang: the executor keeps watching the job, so a gang
// that does not fully start is still rolled back at the deadline.
func TestAdmitWithUnknownOutcomeIsWatched(t *testing.T) {
	e := newEnv(t, 2)
	e.fake.SetClientBehavior("node-1", nomadfake.ClientHold)
	e.register(gpuJob("lost", nil, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	s := e.waitFor("job", func(s *cluster.Snapshot) bool { return s.NumJobs() == 1 })
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	x := e.executor(clk)
	e.fake.FailAfterNext("PUT", "/v1/jobs", 503, "connection reset")
	for range 3 { // every read-back attempt fails
		e.fake.FailNextOnceLost("GET", "/v1/job/lost", 503, "connection reset")
	}
	res := x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{admission(t, s, "lost")}})
	key := cluster.JobKey("default", "lost")
	if res.Failed[key] == nil || !strings.Contains(res.Failed[key].Error(), "outcome unknown") {
		t.Fatalf("apply = %+v, want a failure with an unknown outcome", res)
	}
	if !pinnedAPI(e.fake.Job("lost")) {
		t.Fatal("test setup: the register did not take effect")
	}
	if !x.Busy(key) {
		t.Fatal("admission with an unknown outcome is not watched")
	}
	if rolled := x.CheckDeadlines(context.Background()); len(rolled) != 0 {
		t.Fatalf("rolled back before the deadline: %v", rolled)
	}
	clk.Add(2 * time.Minute)
	if rolled := x.CheckDeadlines(context.Background()); len(rolled) != 1 || rolled[0] != key {
		t.Fatalf("rolled = %v, want the half-placed gang", rolled)
	}
	if job := e.fake.Job("lost"); *job.NodePool != parking || pinnedAPI(job) {
		t.Errorf("after rollback pool %s pinned %v", *job.NodePool, pinnedAPI(job))
	}
	if x.Busy(key) {
		t.Error("still busy after the rollback")
	}
}

// A lost register answer followed by one failed read-back is settled by
// the next read: the job was registered, so it is admitted.
func TestAdmitLostAnswerSettledByReadBack(t *testing.T) {
	e := newEnv(t, 2)
	e.register(gpuJob("lost", nil, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	s := e.waitFor("job", func(s *cluster.Snapshot) bool { return s.NumJobs() == 1 })
	x := e.executor(nil)
	e.fake.FailAfterNext("PUT", "/v1/jobs", 503, "connection reset")
	e.fake.FailNextOnceLost("GET", "/v1/job/lost", 503, "connection reset")
	res := x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{admission(t, s, "lost")}})
	if len(res.Admitted) != 1 || len(res.Failed) != 0 {
		t.Fatalf("apply = %+v, want the job admitted", res)
	}
	if in, _ := x.st.Intent(context.Background(), cluster.JobKey("default", "lost")); in == nil || in.Phase != PhaseRegistered {
		t.Fatalf("intent = %+v, want one in phase registered", in)
	}
}

// Apply waits for the model to show admitted jobs' allocations once for
// the whole plan (PlacementWait in all), not once per admission.
func TestApplyWaitsForPlacementOncePerPlan(t *testing.T) {
	e := newEnv(t, 2)
	jobs := []string{"w1", "w2", "w3"}
	for _, id := range jobs {
		e.register(gpuJob(id, nil, [2]int{2, 4}))
	}
	e.startWatcher(WatcherConfig{})
	s := e.waitFor("jobs", func(s *cluster.Snapshot) bool { return s.NumJobs() == len(jobs) })
	x := e.executor(nil)
	// A model that never shows the allocations: every admission waits.
	x.cfg.Snapshot = func() *cluster.Snapshot { return s }
	x.cfg.PlacementWait = time.Second
	var plan engine.Plan
	for _, id := range jobs {
		plan.Admissions = append(plan.Admissions, admission(t, s, id))
	}
	start := time.Now()
	res := x.Apply(context.Background(), &plan)
	took := time.Since(start)
	if len(res.Admitted) != len(jobs) {
		t.Fatalf("apply = %+v", res)
	}
	if took < time.Second || took > 2500*time.Millisecond {
		t.Errorf("Apply took %v; want about PlacementWait (1s) for the whole plan, not 1s per admission", took)
	}
}

// The target pool is the plan's decision (the engine resolves impact_pool
// and the default pool): an admission without one is refused, even for a
// job whose meta names a pool, and the job stays parked with no intent.
func TestAdmitRefusesAPlanWithoutPool(t *testing.T) {
	e := newEnv(t, 2)
	e.register(gpuJob("nopool", map[string]string{jobspec.MetaPool: "gpu"}, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	s := e.waitFor("job", func(s *cluster.Snapshot) bool { return s.NumJobs() == 1 })
	adm := admission(t, s, "nopool")
	adm.Pool = ""
	x := e.executor(nil)
	res := x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{adm}})
	if err := res.Failed[adm.JobID]; err == nil || !strings.Contains(err.Error(), "no target pool") || len(res.Admitted) != 0 {
		t.Fatalf("apply = %+v, want the admission refused for naming no pool", res)
	}
	if j := e.fake.Job("nopool"); *j.NodePool != parking || pinnedAPI(j) {
		t.Errorf("job moved to pool %s (pinned %v) by a plan without a pool", *j.NodePool, pinnedAPI(j))
	}
	if in, _ := x.st.Intent(context.Background(), adm.JobID); in != nil {
		t.Errorf("intent left for a refused admission: %+v", in)
	}
}
