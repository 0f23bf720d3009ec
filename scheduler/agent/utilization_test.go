package agent

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// utilNomad is a fakeNomad with two 4-GPU nodes, one running an allocation
// on GPUs 0 and 1 of node-a.
func utilNomad(t *testing.T) *fakeNomad {
	t.Helper()
	n := newFakeNomad(newTestClock().Now)
	n.addNode("node-a", 4, 1, "gpu")
	n.addNode("node-b", 4, 1, "gpu")
	if err := n.store.UpsertAlloc(&cluster.Alloc{ID: "al-1", JobID: "default/other", NodeID: "node-a",
		GPUs: []string{"node-a-gpu0", "node-a-gpu1"}}); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestUtilizationOf(t *testing.T) {
	n := utilNomad(t)
	got := utilizationOf(n.store.Snapshot(), []GPUStat{
		{NodeID: "node-a", DeviceID: "node-a-gpu0", Utilization: 90, MemoryUsedMiB: 1000, MemoryTotalMiB: 80000},
		{NodeID: "node-a", DeviceID: "node-a-gpu1", Utilization: -1, MemoryUsedMiB: -1, MemoryTotalMiB: -1}, // allocated, unknown
		{NodeID: "node-a", DeviceID: "node-a-gpu2", Utilization: 10, MemoryUsedMiB: 0, MemoryTotalMiB: 80000},
		{NodeID: "node-b", DeviceID: "node-b-gpu3", Utilization: 40, MemoryUsedMiB: 5, MemoryTotalMiB: 80000},
		{NodeID: "node-b", DeviceID: "not-managed", Utilization: 100}, // unknown to the model: ignored
		{NodeID: "node-z", DeviceID: "node-a-gpu0", Utilization: 100}, // wrong node: ignored
	})
	want := UtilizationStats{
		GPUs: []GPUUtilization{
			{Node: "node-a", DeviceID: "node-a-gpu0", Index: 0, Allocated: true, Utilization: 90, MemoryUsedMiB: 1000, MemoryTotalMiB: 80000},
			{Node: "node-a", DeviceID: "node-a-gpu1", Index: 1, Allocated: true, Utilization: -1, MemoryUsedMiB: -1, MemoryTotalMiB: -1},
			{Node: "node-a", DeviceID: "node-a-gpu2", Index: 2, Utilization: 10, MemoryUsedMiB: 0, MemoryTotalMiB: 80000},
			{Node: "node-b", DeviceID: "node-b-gpu3", Index: 3, Utilization: 40, MemoryUsedMiB: 5, MemoryTotalMiB: 80000},
		},
		Nodes:          map[string]float64{"node-a": 50, "node-b": 40},
		AllocatedMean:  90,
		AllocatedKnown: 1,
		Jobs:           map[string]float64{"default/other": 90},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if ids := statsNodes(n.store.Snapshot()); !reflect.DeepEqual(ids, []string{"node-a", "node-b"}) {
		t.Errorf("nodes polled: %v", ids)
	}
}

// scriptedStats answers GPUStats from a function the test swaps, and
// signals every call.
type scriptedStats struct {
	mu    sync.Mutex
	fn    func(nodes []string) ([]GPUStat, map[string]error)
	calls chan []string
}

func (s *scriptedStats) GPUStats(_ context.Context, nodes []string) ([]GPUStat, map[string]error) {
	s.mu.Lock()
	fn := s.fn
	s.mu.Unlock()
	g, f := fn(nodes)
	select {
	case s.calls <- nodes:
	default:
	}
	return g, f
}

func (s *scriptedStats) set(fn func([]string) ([]GPUStat, map[string]error)) {
	s.mu.Lock()
	s.fn = fn
	s.mu.Unlock()
}

func scrape(t *testing.T, a *Agent) string {
	t.Helper()
	return scrapeMetrics(t, a.Metrics())
}

// The agent polls the stats of its nodes on its own schedule and publishes
// per-GPU, per-node, per-job and cluster gauges; a node that cannot be read is
// counted, and its series disappear rather than freeze at their last value.
func TestUtilizationMetricsFollowPolls(t *testing.T) {
	n := utilNomad(t)
	src := &scriptedStats{calls: make(chan []string, 1)}
	src.set(func(nodes []string) ([]GPUStat, map[string]error) {
		return []GPUStat{
			{NodeID: "node-a", DeviceID: "node-a-gpu0", Utilization: 80, MemoryUsedMiB: 2048, MemoryTotalMiB: 81920},
			{NodeID: "node-a", DeviceID: "node-a-gpu1", Utilization: 60, MemoryUsedMiB: 1024, MemoryTotalMiB: 81920},
		}, map[string]error{"node-b": errors.New("rpc error: no path to node")}
	})
	opts := fakeOptions(t, n, &fakeExec{n: n, agent: "a1"}, nil)
	opts.Interval, opts.Utilization, opts.StatsInterval = time.Hour, src, 5*time.Millisecond
	a := runTestAgent(t, opts)

	if nodes := <-src.calls; !reflect.DeepEqual(nodes, []string{"node-a", "node-b"}) {
		t.Errorf("polled %v, want both ready GPU nodes", nodes)
	}
	waitFor(t, "utilisation gauges", func() bool {
		out := scrape(t, a)
		for _, want := range []string{
			`impact_gpu_utilization_percent{gpu="node-a-gpu0",index="0",node="node-a"} 80`,
			`impact_gpu_utilization_percent{gpu="node-a-gpu1",index="1",node="node-a"} 60`,
			`impact_gpu_memory_used_mib{gpu="node-a-gpu0",index="0",node="node-a"} 2048`,
			`impact_gpu_memory_total_mib{gpu="node-a-gpu1",index="1",node="node-a"} 81920`,
			`impact_node_gpu_utilization_percent{node="node-a"} 70`,
			`impact_job_gpu_utilization_percent{job="default/other"} 70`,
			"impact_gpus_utilization_percent 70",
			"impact_gpus_allocated_with_stats 2",
		} {
			if !strings.Contains(out, want) {
				return false
			}
		}
		return strings.Contains(out, "impact_gpu_stats_errors_total ")
	})

	// Every node fails now: the series of the last good poll go away.
	src.set(func(nodes []string) ([]GPUStat, map[string]error) {
		f := map[string]error{}
		for _, id := range nodes {
			f[id] = errors.New("timeout")
		}
		return nil, f
	})
	waitFor(t, "stale utilisation series removed", func() bool {
		out := scrape(t, a)
		return !strings.Contains(out, "impact_gpu_utilization_percent{") &&
			!strings.Contains(out, "impact_job_gpu_utilization_percent{") &&
			!strings.Contains(out, "impact_gpus_utilization_percent ") &&
			strings.Contains(out, "impact_gpus_allocated_with_stats 0")
	})
}

// Without a source, no utilisation series exist (absent, not 0%).
func TestNoUtilizationSourceNoSeries(t *testing.T) {
	m, err := NewMetrics()
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.Contains(mf.GetName(), "utilization") {
			t.Errorf("series %s present without device stats", mf.GetName())
		}
	}
}

// A standby does not poll (the leader does, once for the cluster) and
// serves no utilisation series.
func TestStandbyDoesNotPollStats(t *testing.T) {
	n := utilNomad(t)
	src := &scriptedStats{calls: make(chan []string, 1)}
	src.set(func([]string) ([]GPUStat, map[string]error) { return nil, nil })
	ex := &fakeExec{n: n, agent: "standby"}
	opts := fakeOptions(t, n, ex, nil)
	opts.Elector, opts.Utilization, opts.StatsInterval = neverElected{ex}, src, 5*time.Millisecond
	a := runTestAgent(t, opts)
	waitCycles(t, 3, a)
	select {
	case nodes := <-src.calls:
		t.Fatalf("a standby polled %v", nodes)
	default:
	}
	if out := scrape(t, a); strings.Contains(out, "impact_gpus_allocated_with_stats") {
		t.Error("a standby serves utilisation series")
	}
}
