package scheduler

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/baseline"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// TestNativePlacement checks the simulator's nomad-native baseline, the
// policy every never-worse check of `impact robustness` is held to,
// against how a real Nomad places GPU jobs on its own (node pool default,
// no impact agent). On four clients of 8 fake GPUs, jobs of 1 to 4 GPUs
// (and some groups of two such allocations) are submitted one at a time,
// each asking CPU and memory in proportion to its GPUs (an eighth of a
// node's per GPU, as the baseline assumes), until the next one would not
// fit; then all are stopped and another round starts. For every job's
// first allocation Nomad placed, the baseline's model
// (baseline.NomadChances: the better-packed of two random feasible nodes)
// gives the chance of the node Nomad picked, from the GPUs each node had
// in use before it. A group's second allocation is placed by Nomad walking
// on in the shuffled order of the first, which the model does not draw
// (nomadpick.go): it is checked only for the job anti-affinity, on a node
// without the group's first where one has room.
//
// It fails when Nomad picked a node the model gives no chance, when the
// count of first allocations on the tightest fit (the node with the
// fewest free GPUs that fits, what the baseline assumed before) is more
// than 3 standard deviations (+1) from what the model expects (under a
// best-fit model Nomad would pick the tightest fit every time), or when a
// group's allocations share a node though they need not.
func TestNativePlacement(t *testing.T) {
	c, _ := startGPUClusterWith(t, "impact-e2e-native-", 4, "")
	nodes := nativeNodes(t, c.Agent.Get)
	rng := rand.New(rand.NewPCG(7, 38))
	var (
		placed, tightest         int
		laterMembers             int
		expTightest, varTightest float64
		logModel                 float64
		bestFitRuledOut          int
	)
	for round := range 8 {
		used := make([]int, len(nodes))
		for k := 0; ; k++ {
			count, gpus := 1, 1+rng.IntN(4)
			if rng.IntN(4) == 0 {
				count, gpus = 2, 2+rng.IntN(3)
			}
			if !nativeFits(used, count, gpus) {
				break
			}
			name := fmt.Sprintf("native-r%d-%02d", round, k)
			nativeSubmit(t, c.Agent.Addr, name, count, gpus, nodes[0].cpuPerGPU, nodes[0].memPerGPU)
			got := nativeWaitPlaced(t, c.Agent.Get, name, count)
			onNode := make([]int, len(nodes))
			for m, nodeID := range got {
				n := nativeIndex(t, nodes, nodeID)
				var feasible []int
				var scores []float64
				apart := false // some node with room holds none of the group
				for i := range nodes {
					if 8-used[i] >= gpus {
						feasible = append(feasible, i)
						scores = append(scores, baseline.NomadScore(used[i]+gpus, 8, onNode[i], count))
						apart = apart || onNode[i] == 0
					}
				}
				if m > 0 {
					// A later allocation of a group: Nomad walks on from where
					// the previous one stopped in the same shuffled order,
					// which the model does not draw (nomadpick.go), so only
					// the anti-affinity is checked here.
					t.Logf("%s[%d] (%d GPUs): GPUs in use before %v, the group's allocations per node %v, Nomad picked %s", name, m, gpus, used, onNode, nodes[n].name)
					if apart && onNode[n] > 0 {
						t.Errorf("%s[%d]: Nomad put it beside the group's allocation on %s though a node without one had room", name, m, nodes[n].name)
					}
					laterMembers++
					used[n] += gpus
					onNode[n]++
					continue
				}
				chances, err := baseline.NomadChances(scores)
				if err != nil {
					t.Fatal(err)
				}
				p, pTight, minFree := 0.0, 0.0, 9
				for _, i := range feasible {
					minFree = min(minFree, 8-used[i])
				}
				for fi, i := range feasible {
					if i == n {
						p = chances[fi]
					}
					if 8-used[i] == minFree {
						pTight += chances[fi]
					}
				}
				t.Logf("%s[%d] (%d GPUs): GPUs in use before %v, Nomad picked %s (model's chance %.3f)", name, m, gpus, used, nodes[n].name, p)
				if p == 0 {
					t.Errorf("%s[%d]: Nomad picked %s, a node the model gives no chance (GPUs in use %v)", name, m, nodes[n].name, used)
				} else {
					logModel += math.Log(p)
				}
				placed++
				expTightest += pTight
				varTightest += pTight * (1 - pTight)
				if 8-used[n] == minFree {
					tightest++
				} else {
					bestFitRuledOut++
				}
				used[n] += gpus
				onNode[n]++
			}
		}
		c.StopAllJobs()
	}
	sd := math.Sqrt(varTightest)
	t.Logf("%d first allocations placed: %d on the tightest fit, the model expects %.1f (sd %.1f); %d picks a best-fit baseline gives no chance; log-likelihood of the model %.1f; %d later allocations of groups, each on a node without one of its group where one had room",
		placed, tightest, expTightest, sd, bestFitRuledOut, logModel, laterMembers)
	if placed < 20 {
		t.Fatalf("only %d first allocations placed: too few to judge the model", placed)
	}
	if math.Abs(float64(tightest)-expTightest) > 3*sd+1 {
		t.Errorf("Nomad picked the tightest fit %d times of %d, the model expects %.1f (sd %.1f)", tightest, placed, expTightest, sd)
	}
}

// nativeNode is one client as the test sees it: its name and ID, and the
// CPU (MHz) and memory (MB) a job asks per GPU: an eighth of what the
// node offers to allocations.
type nativeNode struct {
	id, name             string
	cpuPerGPU, memPerGPU int
}

// nativeNodes lists the clients, sorted by name.
func nativeNodes(t *testing.T, get func(string, any) error) []nativeNode {
	t.Helper()
	var stubs []struct{ ID, Name string }
	if err := get("/v1/nodes", &stubs); err != nil {
		t.Fatal(err)
	}
	var out []nativeNode
	for _, s := range stubs {
		var n struct {
			NodeResources struct {
				Cpu    struct{ CpuShares int }
				Memory struct{ MemoryMB int }
			}
			ReservedResources struct {
				Cpu    struct{ CpuShares int }
				Memory struct{ MemoryMB int }
			}
		}
		if err := get("/v1/node/"+s.ID, &n); err != nil {
			t.Fatal(err)
		}
		cpu := n.NodeResources.Cpu.CpuShares - n.ReservedResources.Cpu.CpuShares
		mem := n.NodeResources.Memory.MemoryMB - n.ReservedResources.Memory.MemoryMB
		if cpu < 8*20 || mem < 8*20 {
			t.Fatalf("node %s offers %d MHz and %d MB: too little for 8 GPUs' worth of asks", s.Name, cpu, mem)
		}
		out = append(out, nativeNode{id: s.ID, name: s.Name, cpuPerGPU: cpu / 8, memPerGPU: mem / 8})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].name < out[b].name })
	for _, n := range out[1:] {
		if n.cpuPerGPU != out[0].cpuPerGPU || n.memPerGPU != out[0].memPerGPU {
			t.Fatalf("the clients offer different CPU or memory (%+v): the asks would not follow GPUs on every node", out)
		}
	}
	return out
}

// nativeFits: count allocations of gpus fit nodes with used GPUs in
// use, on distinct nodes (so that the test never waits on a blocked
// evaluation).
func nativeFits(used []int, count, gpus int) bool {
	room := 0
	for _, u := range used {
		if 8-u >= gpus {
			room++
		}
	}
	return room >= count
}

// nativeSubmit registers a batch job of Nomad's default priority (50)
// in the default pool: one group of count allocations, each a raw_exec
// task that sleeps, asking gpus GPUs and CPU and memory in proportion.
func nativeSubmit(t *testing.T, addr, name string, count, gpus, cpuPerGPU, memPerGPU int) {
	t.Helper()
	nativeSubmitPriority(t, addr, name, count, gpus, 50, cpuPerGPU, memPerGPU)
}

// nativeSubmitPriority is nativeSubmit with the job's priority.
func nativeSubmitPriority(t *testing.T, addr, name string, count, gpus, priority, cpuPerGPU, memPerGPU int) {
	t.Helper()
	b := apiJob{name: name, pool: "default", priority: priority, count: count, gpus: gpus,
		cpu: cpuPerGPU * gpus, mem: memPerGPU * gpus, script: "trap 'exit 0' TERM; sleep 600 & wait"}.json()
	resp, err := http.Post(addr+"/v1/jobs", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("register %s: %v", name, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("register %s: HTTP %d", name, resp.StatusCode)
	}
}

// nativeWaitPlaced waits until every allocation of name is placed and
// returns their nodes by allocation index.
func nativeWaitPlaced(t *testing.T, get func(string, any) error, name string, count int) []string {
	t.Helper()
	var nodes []string
	eventually(t, 60*time.Second, name+": every allocation placed", func() (bool, string) {
		var as []struct{ Name, NodeID string }
		if err := get("/v1/job/"+name+"/allocations", &as); err != nil {
			return false, err.Error()
		}
		if len(as) < count {
			return false, fmt.Sprintf("%d of %d allocations", len(as), count)
		}
		sort.Slice(as, func(a, b int) bool { return as[a].Name < as[b].Name })
		nodes = nodes[:0]
		for _, a := range as {
			nodes = append(nodes, a.NodeID)
		}
		return true, strings.Join(nodes, ",")
	})
	return nodes
}

// nativeIndex is the index of the node of ID id.
func nativeIndex(t *testing.T, nodes []nativeNode, id string) int {
	t.Helper()
	for i, n := range nodes {
		if n.id == id {
			return i
		}
	}
	t.Fatalf("allocation on node %s, not one of the clients", id)
	return -1
}

// TestNativeQueueOrder checks the order in which the nomad-native
// baseline starts waiting jobs against a real Nomad (two clients of 8
// fake GPUs, node pool default, no impact agent), and the baseline's own
// replay of the same run against both. Fillers hold every GPU (7 + 1 on
// one node, 6 + 2 on the other); then a low-priority 1-GPU job L1, a
// high-priority 2-GPU job H and a low 1-GPU job L2 queue, in that order.
// Freed GPUs then go, as Nomad's blocked evaluations are served (priority,
// then the order they were made in):
//
//  1. the 2-GPU filler stops: H starts (priority), the low jobs wait;
//  2. the 1-GPU filler stops: L1 starts (first come among equals), L2
//     waits;
//  3. a high 4-GPU job H4 queues and H stops: L2 starts on the 2 GPUs
//     H4 cannot use (a lower job placed while a higher one is blocked);
//  4. the 6-GPU filler stops: H4 starts.
//
// The same arrivals and ends, replayed by the simulator's nomad-native,
// must start each job after the same stop.
func TestNativeQueueOrder(t *testing.T) {
	c, _ := startGPUClusterWith(t, "impact-e2e-nativeq-", 2, "")
	nodes := nativeNodes(t, c.Agent.Get)
	cpu, mem := nodes[0].cpuPerGPU, nodes[0].memPerGPU
	t0 := time.Now()
	type run struct {
		name     string
		gpus     int
		priority int
		submit   time.Time
		stop     time.Time // zero: runs to the end
	}
	var runs []*run
	// The replay below counts whole seconds: each submit and stop comes in
	// a second of its own, two after the last, so that its order with the
	// others is the same there (a spacing of the replay's clock, not a
	// wait for Nomad, which the conditions below do).
	var last time.Time
	spaced := func() time.Time {
		if !last.IsZero() {
			time.Sleep(time.Until(t0.Add((last.Sub(t0)/time.Second + 2) * time.Second)))
		}
		last = time.Now()
		return last
	}
	submit := func(name string, gpus, priority int) *run {
		r := &run{name: name, gpus: gpus, priority: priority, submit: spaced()}
		nativeSubmitPriority(t, c.Agent.Addr, name, 1, gpus, priority, cpu, mem)
		runs = append(runs, r)
		return r
	}
	started := func(name string) bool {
		s, _ := nativeStarted(c.Agent.Get, name)
		return !s.IsZero()
	}
	waitStarted := func(name string) {
		t.Helper()
		eventually(t, 60*time.Second, name+" started", func() (bool, string) { return started(name), "" })
	}
	stop := func(r *run) {
		t.Helper()
		r.stop = spaced()
		if out, err := c.Agent.CLI("job", "stop", "-detach", r.name); err != nil {
			t.Fatalf("stop %s: %v\n%s", r.name, err, out)
		}
	}
	// mustWait: each job is blocked and, for a window after the GPUs it
	// must not take freed, still waits. A window, because Nomad records
	// nothing when it evaluates a blocked job again and blocks it again
	// (the evaluation keeps its index: tried here, it never moves), so no
	// state says it has decided; it does so within a second of the GPUs
	// freeing (each expected start below came within one).
	mustWait := func(window time.Duration, names ...string) {
		t.Helper()
		time.Sleep(window)
		for _, n := range names {
			nativeWaitBlocked(t, c.Agent.Get, n)
			if started(n) {
				t.Fatalf("%s started; Nomad should have kept it waiting", n)
			}
		}
	}
	const window = 3 * time.Second

	fill := func(name string, gpus int) *run {
		t.Helper()
		r := submit(name, gpus, 50)
		waitStarted(name)
		return r
	}
	// queue submits a job that finds no room; each is blocked before the
	// next comes, so the order their evaluations were made in is the
	// order they queued.
	queue := func(name string, gpus, priority int) *run {
		t.Helper()
		r := submit(name, gpus, priority)
		mustWait(0, name)
		return r
	}
	fill("nq-f1", 7)
	f4 := fill("nq-f4", 1)
	f2 := fill("nq-f2", 6)
	f3 := fill("nq-f3", 2)
	queue("nq-l1", 1, 30)
	h := queue("nq-h", 2, 70)
	queue("nq-l2", 1, 30)

	stop(f3)
	waitStarted("nq-h")
	mustWait(window, "nq-l1", "nq-l2")

	stop(f4)
	waitStarted("nq-l1")
	mustWait(window, "nq-l2")

	queue("nq-h4", 4, 70)
	stop(h)
	waitStarted("nq-l2")
	mustWait(window, "nq-h4")

	stop(f2)
	waitStarted("nq-h4")
	end := time.Now()

	// The same run in the simulator: submits and stops at the seconds
	// they came, priorities as tiers.
	secs := func(at time.Time) int64 { return int64(at.Sub(t0) / time.Second) }
	var jobs []trace.Job
	stops := []int64{}
	for _, r := range runs {
		tier := map[int]string{70: "high", 50: "normal", 30: "scavenger"}[r.priority]
		s, _ := nativeStarted(c.Agent.Get, r.name)
		dur := int64(1 << 20)
		if !r.stop.IsZero() {
			// A stop frees the GPUs once the task has exited: the replay
			// ends the job then.
			dur = max(1, secs(r.stop)-secs(s)) // from its start in the real run
			stops = append(stops, secs(r.stop))
		}
		no := false
		jobs = append(jobs, trace.Job{ID: r.name, Submit: secs(r.submit), Duration: dur, GPUs: r.gpus, Project: "p", Tier: tier, Preemptible: &no, Walltime: dur})
	}
	sort.Slice(jobs, func(a, b int) bool { return jobs[a].Submit < jobs[b].Submit })
	sort.Slice(stops, func(a, b int) bool { return stops[a] < stops[b] })
	cl, err := sim.UniformCluster(2, 8, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	native, err := baseline.New(baseline.NomadNative)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(jobs, native, sim.Options{Cluster: cl, Model: sim.DefaultModel(), WindowStart: 0, WindowEnd: secs(end) + 1})
	if err != nil {
		t.Fatal(err)
	}
	// after is the number of stops at or before at (whole seconds: a start
	// in the second of the stop that freed its GPUs follows it): which
	// stop a start followed.
	after := func(at int64) int {
		k := 0
		for k < len(stops) && stops[k] <= at {
			k++
		}
		return k
	}
	simStart := map[string]int64{}
	for _, j := range res.Jobs {
		simStart[j.ID] = j.FirstStart
	}
	for _, name := range []string{"nq-h", "nq-l1", "nq-l2", "nq-h4"} {
		s, _ := nativeStarted(c.Agent.Get, name)
		real, replay := after(secs(s)), after(simStart[name])
		t.Logf("%s: started %ds in, after stop %d; the replay started it at %ds, after stop %d", name, secs(s), real, simStart[name], replay)
		if real != replay {
			t.Errorf("%s started after stop %d on Nomad, after stop %d in nomad-native's replay", name, real, replay)
		}
	}
}

// nativeWaitBlocked waits until Nomad has evaluated name and blocked
// it: an evaluation of it blocked, none pending.
func nativeWaitBlocked(t *testing.T, get func(string, any) error, name string) {
	t.Helper()
	eventually(t, 60*time.Second, name+": evaluated and blocked", func() (bool, string) {
		var evs []struct{ Status string }
		if err := get("/v1/job/"+name+"/evaluations", &evs); err != nil {
			return false, err.Error()
		}
		blocked := false
		var seen []string
		for _, e := range evs {
			seen = append(seen, e.Status)
			if e.Status == "pending" {
				return false, "an evaluation pending"
			}
			blocked = blocked || e.Status == "blocked"
		}
		return blocked, strings.Join(seen, ",")
	})
}

// nativeStarted is when name's first task started (zero: not yet).
func nativeStarted(get func(string, any) error, name string) (time.Time, error) {
	var as []struct {
		TaskStates map[string]struct {
			Events []struct {
				Type string
				Time int64
			}
		}
	}
	if err := get("/v1/job/"+name+"/allocations", &as); err != nil {
		return time.Time{}, err
	}
	var first int64
	for _, a := range as {
		for _, ev := range a.TaskStates["t"].Events {
			if ev.Type == "Started" && (first == 0 || ev.Time < first) {
				first = ev.Time
			}
		}
	}
	if first == 0 {
		return time.Time{}, nil
	}
	return time.Unix(0, first), nil
}
