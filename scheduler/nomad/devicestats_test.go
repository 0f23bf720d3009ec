package nomad

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/device"
)

// The fixture is GET /v1/client/stats?node_id=<id> of a Nomad 2.0.6 dev
// agent running impact-gpu on the fake two-island topology, after
// "stats 1 utilization=77 memory_used_mib=4096 power_w=287.5
// temperature_c=66" and "stats 5 utilization=12 memory_used_mib=1024" in
// its control file (CPU and disk lists cut to one entry).
const statsFixture = "testdata/client-stats-impact-gpu.json"

const (
	gpu1 = "GPU-45d200ea-6b70-1952-1687-a9fab9fc72f8" // index 1, island 0
	gpu5 = "GPU-fabd7575-d325-17aa-a8d9-c0121ecffbac" // index 5, island 1
)

// statsServer answers /v1/client/stats like Nomad: the fixture for known
// nodes, 404 "Unknown node <id>" for others; per-node overrides replace
// the handler.
type statsServer struct {
	t        *testing.T
	body     []byte
	nodes    map[string]bool
	override map[string]http.HandlerFunc

	mu       sync.Mutex
	inFlight int
	maxIn    int
	seen     []string
}

func newStatsServer(t *testing.T, nodes ...string) (*statsServer, *Client) {
	t.Helper()
	body, err := os.ReadFile(statsFixture)
	if err != nil {
		t.Fatal(err)
	}
	s := &statsServer{t: t, body: body, nodes: map[string]bool{}, override: map[string]http.HandlerFunc{}}
	for _, n := range nodes {
		s.nodes[n] = true
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c, err := NewClient(Config{Address: srv.URL}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func (s *statsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/client/stats" || r.Method != http.MethodGet {
		http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
		return
	}
	id := r.URL.Query().Get("node_id")
	s.mu.Lock()
	s.seen = append(s.seen, id)
	s.inFlight++
	s.maxIn = max(s.maxIn, s.inFlight)
	h := s.override[id]
	s.mu.Unlock()
	// A request stops counting as in flight when its answer starts, not
	// when the handler returns: the client may read the answer and send
	// its next request before this goroutine gets to its deferred calls,
	// so counting until then saw 3 in flight under a bound of 2 (a flake
	// on a loaded machine).
	done := &answerWriter{ResponseWriter: w, end: func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}}
	defer done.finish()
	w = done
	if h != nil {
		h(w, r)
		return
	}
	if !s.nodes[id] {
		http.Error(w, "Unknown node "+id, http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(s.body)
}

// answerWriter calls end once, when the answer starts (or the handler
// returns without one).
type answerWriter struct {
	http.ResponseWriter
	end  func()
	once sync.Once
}

func (a *answerWriter) finish() { a.once.Do(a.end) }

func (a *answerWriter) WriteHeader(code int) {
	a.finish()
	a.ResponseWriter.WriteHeader(code)
}

func (a *answerWriter) Write(b []byte) (int, error) {
	a.finish()
	return a.ResponseWriter.Write(b)
}

func byDevice(p DeviceStatsPoll) map[string]GPUStats {
	m := map[string]GPUStats{}
	for _, g := range p.GPUs {
		m[g.NodeID+"/"+g.DeviceID] = g
	}
	return m
}

func TestDeviceStatsFromRecordedNomadAnswer(t *testing.T) {
	_, c := newStatsServer(t, "n1")
	r := NewDeviceStatsReader(c, DeviceStatsConfig{}, testLogger(t))
	p := r.Poll(context.Background(), []string{"n1"})
	if len(p.Failed) != 0 {
		t.Fatalf("failed: %v", p.Failed)
	}
	if len(p.GPUs) != 8 {
		t.Fatalf("got %d GPUs, want the topology's 8", len(p.GPUs))
	}
	m := byDevice(p)
	g1 := m["n1/"+gpu1]
	want := GPUStats{NodeID: "n1", DeviceID: gpu1, Device: "nvidia/gpu/NVIDIA A100-SXM4-80GB (island 0)",
		UtilizationPct: 77, HasUtilization: true, MemoryUsedMiB: 4096, MemoryTotalMiB: 81920, HasMemory: true,
		PowerW: 287.5, HasPower: true, TemperatureC: 66, HasTemperature: true, At: g1.At}
	if g1 != want {
		t.Errorf("GPU 1:\n got %+v\nwant %+v", g1, want)
	}
	if g1.At.IsZero() {
		t.Error("GPU 1: no sample time")
	}
	if g5 := m["n1/"+gpu5]; g5.UtilizationPct != 12 || g5.MemoryUsedMiB != 1024 || !g5.HasUtilization {
		t.Errorf("GPU 5: %+v", g5)
	}
	for i := 1; i < len(p.GPUs); i++ {
		if p.GPUs[i-1].DeviceID >= p.GPUs[i].DeviceID {
			t.Fatalf("not ordered by device ID: %s then %s", p.GPUs[i-1].DeviceID, p.GPUs[i].DeviceID)
		}
	}
}

// A stat the plugin could not read ("N/A", as impact-gpu sends for MIG
// instances or a failed NVML call) is reported as missing, not as zero;
// groups of other device types are skipped.
func TestDeviceStatsMissingValues(t *testing.T) {
	na := "N/A"
	hs := &api.HostStats{DeviceStats: []*api.DeviceGroupStats{
		{Vendor: "nvidia", Type: "gpu", Name: "a100", InstanceStats: map[string]*api.DeviceStats{
			"GPU-x": {
				Summary: &api.StatValue{StringVal: &na, Unit: "%"},
				Stats: &api.StatObject{Attributes: map[string]*api.StatValue{
					"GPU utilization": {StringVal: &na, Unit: "%"},
					"Memory state":    {StringVal: &na, Unit: "MiB"},
				}},
			},
		}},
		{Vendor: "acme", Type: "fpga", Name: "f1", InstanceStats: map[string]*api.DeviceStats{
			"FPGA-1": {Summary: &api.StatValue{IntNumeratorVal: ptr(int64(50)), Unit: "%"}},
		}},
	}}
	r := &DeviceStatsReader{cfg: DeviceStatsConfig{DeviceType: "gpu"}}
	got := r.convert("n", hs)
	if len(got) != 1 {
		t.Fatalf("got %d devices, want the one GPU: %+v", len(got), got)
	}
	g := got[0]
	if g.HasUtilization || g.HasMemory || g.HasPower || g.HasTemperature {
		t.Errorf("N/A stats read as values: %+v", g)
	}
	// Without the attribute, the summary counts when it is a percentage.
	hs.DeviceStats[0].InstanceStats["GPU-x"] = &api.DeviceStats{Summary: &api.StatValue{FloatNumeratorVal: ptr(41.5), Unit: "%"}}
	if g := r.convert("n", hs)[0]; !g.HasUtilization || g.UtilizationPct != 41.5 {
		t.Errorf("summary utilisation: %+v", g)
	}
	hs.DeviceStats[0].InstanceStats["GPU-x"] = &api.DeviceStats{Summary: &api.StatValue{FloatNumeratorVal: ptr(300.0), Unit: "W"}}
	if g := r.convert("n", hs)[0]; g.HasUtilization {
		t.Errorf("a summary in watts read as utilisation: %+v", g)
	}
}

func ptr[T any](v T) *T { return &v }

// One node failing (unknown to Nomad, a server error, a client that does
// not answer) is reported and counted; the other nodes are still read.
func TestDeviceStatsNodeFailuresAreNotFatal(t *testing.T) {
	s, c := newStatsServer(t, "ok1", "ok2")
	s.override["broken"] = func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "rpc error: no path to node", http.StatusInternalServerError)
	}
	s.override["hung"] = func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	s.override["garbage"] = func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{not json")) }
	r := NewDeviceStatsReader(c, DeviceStatsConfig{NodeTimeout: 300 * time.Millisecond}, testLogger(t))
	start := time.Now()
	p := r.Poll(context.Background(), []string{"ok1", "missing", "broken", "hung", "garbage", "ok2"})
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("poll took %s; the hung node should cost one timeout", el)
	}
	if len(p.GPUs) != 16 {
		t.Errorf("got %d GPUs, want 8 from each healthy node", len(p.GPUs))
	}
	for _, n := range []string{"missing", "broken", "hung", "garbage"} {
		err := p.Failed[n]
		if err == nil {
			t.Errorf("node %s: no failure reported", n)
			continue
		}
		if !strings.Contains(err.Error(), "node "+n) {
			t.Errorf("node %s: error does not name the node: %v", n, err)
		}
	}
	if !errors.Is(p.Failed["hung"], context.DeadlineExceeded) {
		t.Errorf("hung node: %v, want a deadline", p.Failed["hung"])
	}
	if len(p.Failed) != 4 {
		t.Errorf("failed: %v", p.Failed)
	}
	if got := r.Failures(); got != 4 {
		t.Errorf("Failures() = %d, want 4", got)
	}
}

// At most Concurrency nodes are asked at once.
func TestDeviceStatsBoundedConcurrency(t *testing.T) {
	nodes := []string{"a", "b", "c", "d", "e", "f", "g"}
	s, c := newStatsServer(t, nodes...)
	// Each request waits until two are in flight (or the first wave has
	// passed), so the poll must run requests side by side to finish.
	var released sync.Once
	gate := make(chan struct{})
	for _, n := range nodes {
		s.override[n] = func(w http.ResponseWriter, r *http.Request) {
			s.mu.Lock()
			full := s.inFlight >= 2
			s.mu.Unlock()
			if full {
				released.Do(func() { close(gate) })
			}
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
			_, _ = w.Write(s.body)
		}
	}
	r := NewDeviceStatsReader(c, DeviceStatsConfig{Concurrency: 2, NodeTimeout: 20 * time.Second}, testLogger(t))
	p := r.Poll(context.Background(), nodes)
	if len(p.Failed) != 0 {
		t.Fatalf("failed: %v", p.Failed)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.maxIn != 2 {
		t.Errorf("at most %d requests in flight, want exactly the bound 2", s.maxIn)
	}
	if len(s.seen) != len(nodes) {
		t.Errorf("asked %d nodes, want %d", len(s.seen), len(nodes))
	}
}

// A poll ends with its context: nodes not yet asked are reported.
func TestDeviceStatsPollCancelled(t *testing.T) {
	_, c := newStatsServer(t, "a")
	r := NewDeviceStatsReader(c, DeviceStatsConfig{}, testLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := r.Poll(ctx, []string{"a", "b"})
	if len(p.GPUs) != 0 || len(p.Failed) != 2 {
		t.Fatalf("cancelled poll: %d GPUs, failed %v", len(p.GPUs), p.Failed)
	}
	if !errors.Is(p.Failed["a"], context.Canceled) {
		t.Errorf("node a: %v", p.Failed["a"])
	}
}

// The stat names read here are the ones impact-gpu publishes.
func TestDeviceStatNamesMatchThePlugin(t *testing.T) {
	for _, c := range []struct{ here, plugin string }{
		{StatGPUUtilization, device.StatGPUUtil},
		{StatMemoryState, device.StatMemory},
		{StatPowerUsage, device.StatPower},
		{StatTemperature, device.StatTemperature},
	} {
		if c.here != c.plugin {
			t.Errorf("stat %q here, %q in device/stats.go", c.here, c.plugin)
		}
	}
	// And the fixture carries them (it was recorded from the plugin).
	var hs api.HostStats
	b, err := os.ReadFile(statsFixture)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &hs); err != nil {
		t.Fatal(err)
	}
	for _, ds := range hs.DeviceStats[0].InstanceStats {
		for _, name := range []string{StatGPUUtilization, StatMemoryState, StatPowerUsage, StatTemperature} {
			if ds.Stats.Attributes[name] == nil {
				t.Errorf("fixture lacks stat %q", name)
			}
		}
		break
	}
}
