package nomad

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// runCycles is the agent's loop in miniature: on every model change,
// decide and act.
func runCycles(ctx context.Context, t testing.TB, w *Watcher, x *Executor, ew *ExplainWriter) {
	eng, err := engine.New(policy.Default(), engine.WithDefaultPool("gpu"))
	if err != nil {
		t.Error(err)
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.Changes():
		}
		plan := eng.Decide(w.Snapshot(), time.Now())
		x.Apply(ctx, plan)
		if ew != nil {
			// The agent renders its own items; the engine's status and
			// reason are enough to watch a cycle here.
			for id, ex := range plan.Explanations {
				_ = ew.WriteItems(ctx, id, map[string]string{"status": string(ex.Status), "reason": ex.Reason}, plan.Now)
			}
		}
		x.CheckDeadlines(ctx)
	}
}

// TestCycleWithEngine runs watcher, engine and executor together on the
// fake: jobs are admitted whole in impact order as capacity frees.
func TestCycleWithEngine(t *testing.T) {
	e := newEnv(t, 1) // one node, 2 islands x 4 GPUs
	// Three 8-GPU jobs: only one fits at a time; the critical one first.
	e.register(gpuJob("low", map[string]string{"impact_tier": "scavenger"}, [2]int{2, 4}))
	e.register(gpuJob("crit", map[string]string{"impact_tier": "critical"}, [2]int{2, 4}))
	e.register(gpuJob("mid", map[string]string{"impact_tier": "normal"}, [2]int{2, 4}))
	// Bad metadata: never admitted, the reason shown in its Variable.
	e.register(gpuJob("typo", map[string]string{"impact_tier": "critical", "impact_grace": "-5m"}, [2]int{1, 1}))
	e.startWatcher(WatcherConfig{})
	x := e.executor(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runCycles(ctx, t, e.w, x, NewExplainWriter(e.c, e.log))
	}()
	defer func() { cancel(); <-done; x.Wait() }()
	order := []string{}
	for len(order) < 3 {
		var running string
		deadline := time.Now().Add(5 * time.Second)
		for running == "" {
			for _, id := range []string{"low", "crit", "mid"} {
				if contains(order, id) {
					continue
				}
				as := e.fake.Allocations(id)
				live := 0
				for _, a := range as {
					if a.ClientStatus == "running" {
						live++
					}
				}
				if live == 2 {
					running = id
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no job admitted after %v; explain: %v", order, e.fake.Variable("nomad/jobs/mid/impact"))
			}
			time.Sleep(10 * time.Millisecond)
		}
		order = append(order, running)
		for _, a := range e.fake.Allocations(running) {
			if a.ClientStatus == "running" {
				_ = e.fake.FinishAlloc(a.ID, false)
			}
		}
	}
	if fmt.Sprint(order) != "[crit mid low]" {
		t.Errorf("admission order = %v, want [crit mid low]", order)
	}
	if n := len(e.fake.Allocations("typo")); n != 0 || *e.fake.Job("typo").NodePool != parking {
		t.Errorf("job with bad meta left the parking pool (%d allocs)", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		v := e.fake.Variable("nomad/jobs/typo/impact")
		if v != nil && v["status"] == "parked" && strings.Contains(v["reason"], "impact_grace") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("explain Variable of the bad-meta job = %v, want status parked and a reason naming impact_grace", v)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func recordedStream(tb testing.TB) [][]byte {
	f, err := os.Open(filepath.Join("..", "internal", "nomadfake", "testdata", "events.ndjson"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var lines [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) > 0 {
			lines = append(lines, append([]byte(nil), sc.Bytes()...))
		}
	}
	return lines
}

// TestRecordedStreamApplies checks the real agent's stream decodes and
// yields the expected model: train-a parked, then admitted, then parked.
func TestRecordedStreamApplies(t *testing.T) {
	lines := recordedStream(t)
	w := NewWatcher(nil, WatcherConfig{ParkingPool: parking}, nil)
	var b wireBatch
	states := []string{}
	for _, l := range lines {
		if err := decodeBatch(l, &b, nil); err != nil {
			t.Fatalf("decode: %v", err)
		}
		if err := w.applyBatch(&b, time.Now()); err != nil {
			t.Fatal(err)
		}
		if j, ok := w.Snapshot().Job(cluster.JobKey("default", "train-a")); ok {
			st := j.State.String()
			if len(states) == 0 || states[len(states)-1] != st {
				states = append(states, st)
			}
		}
	}
	if got := fmt.Sprint(states); got != "[queued running queued]" {
		t.Errorf("train-a states = %s, want [queued running queued]", got)
	}
	total := 0
	for _, l := range lines {
		var b wireBatch
		_ = decodeBatch(l, &b, nil)
		total += len(b.Events)
	}
	if st := w.Stats(); st.EventsApplied != uint64(total) || st.LastIndex != 75 {
		t.Errorf("applied %d of the recording's %d events (stats %+v)", st.EventsApplied, total, st)
	}
	// Replaying the recording again from the start (as a reconnect at
	// index 0 would) applies nothing twice, and resuming at index 75
	// (inclusive, as Nomad does) neither.
	before := w.Stats().EventsApplied
	w.seenAtLast = map[eventKey]int{}
	for _, l := range lines {
		_ = decodeBatch(l, &b, nil)
		_ = w.applyBatch(&b, time.Now())
	}
	if st := w.Stats(); st.EventsApplied != before {
		t.Errorf("replay applied %d events again", st.EventsApplied-before)
	}
}

// BenchmarkApplyRecordedStream measures events applied per second from
// the stream recorded on Nomad 2.0.6, through the watcher's real read path
// (read lines, decode in parallel, apply in order to the mirror and the
// model). The recording is replayed as one long stream: each pass has its
// Raft indexes shifted past the previous one, so that every pass updates
// the same jobs, allocations and nodes again instead of being skipped as a
// replay.
func BenchmarkApplyRecordedStream(b *testing.B) {
	const passes = 20
	lines := recordedStream(b)
	indexRe := regexp.MustCompile(`("[A-Za-z]*Index":)([0-9]+)`)
	var body []byte
	perPass := 0
	for _, l := range lines {
		var batch wireBatch
		if err := decodeBatch(l, &batch, nil); err != nil {
			b.Fatal(err)
		}
		perPass += len(batch.Events)
	}
	for p := range passes {
		for _, l := range lines {
			shifted := indexRe.ReplaceAllFunc(l, func(m []byte) []byte {
				sub := indexRe.FindSubmatch(m)
				n, _ := strconv.ParseUint(string(sub[2]), 10, 64)
				return append(append([]byte(nil), sub[1]...), strconv.FormatUint(n+uint64(p)*1_000_000, 10)...)
			})
			body = append(append(body, shifted...), '\n')
		}
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	start := time.Now()
	for i := 0; i < b.N; i++ {
		w := NewWatcher(nil, WatcherConfig{ParkingPool: parking}, nil)
		err := w.consume(context.Background(), io.NopCloser(bytes.NewReader(body)), 0)
		if !errors.Is(err, io.EOF) {
			b.Fatalf("consume ended with %v, want the end of the recording", err)
		}
		if got := w.Stats().EventsApplied; got != uint64(passes*perPass) {
			b.Fatalf("applied %d events of %d", got, passes*perPass)
		}
	}
	b.ReportMetric(float64(b.N*passes*perPass)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkFreedCapacityToAdmission measures the time from Nomad freeing
// GPUs (a running job's allocations complete) to the register request that
// admits the waiting job, with the cycle run on every model change.
func BenchmarkFreedCapacityToAdmission(b *testing.B) {
	e := newEnv(b, 1)
	w := NewWatcher(e.c, WatcherConfig{ParkingPool: parking, MinBackoff: 5 * time.Millisecond}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = w.Run(ctx) }()
	<-w.Ready()
	x := NewExecutor(e.c, NewStateStore(e.c, StateConfig{}, nil), ExecutorConfig{ParkingPool: parking}, nil)
	var mu sync.Mutex
	admittedAt := map[string]time.Time{}
	e.fake.OnRegister(func(j *api.Job) {
		if *j.NodePool == "gpu" {
			mu.Lock()
			admittedAt[*j.ID] = time.Now()
			mu.Unlock()
		}
	})
	done := make(chan struct{})
	go func() { defer close(done); runCycles(ctx, b, w, x, nil) }()
	defer func() { cancel(); <-done }()

	reg := func(id string) {
		if _, _, err := e.c.api.Jobs().Register(gpuJob(id, nil, [2]int{2, 4}), nil); err != nil {
			b.Fatal(err)
		}
	}
	waitRunning := func(id string) []*api.Allocation {
		deadline := time.Now().Add(10 * time.Second)
		for {
			var live []*api.Allocation
			for _, a := range e.fake.Allocations(id) {
				if a.ClientStatus == "running" {
					live = append(live, a)
				}
			}
			if len(live) == 2 {
				return live
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s never ran", id)
			}
			time.Sleep(time.Millisecond)
		}
	}
	reg("job-0")
	running := waitRunning("job-0")
	var lat []time.Duration
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		b.StopTimer()
		id := fmt.Sprintf("job-%d", i)
		reg(id)
		// Let the model see it waiting (no capacity) before freeing.
		deadline := time.Now().Add(10 * time.Second)
		for {
			j, ok := w.Snapshot().Job(cluster.JobKey("default", id))
			if ok && j.State == cluster.JobQueued {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s not queued", id)
			}
			time.Sleep(time.Millisecond)
		}
		x.CheckDeadlines(ctx)
		b.StartTimer()
		freed := time.Now()
		for _, a := range running {
			_ = e.fake.FinishAlloc(a.ID, false)
		}
		running = waitRunning(id)
		mu.Lock()
		at := admittedAt[id]
		mu.Unlock()
		lat = append(lat, at.Sub(freed))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	}
}
