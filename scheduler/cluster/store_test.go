package cluster

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"
	"unsafe"

	"pgregory.net/rapid"
)

func node(id string, gpus int) *Node {
	n := &Node{ID: id, Pool: "gpu", Eligible: true, Ready: true}
	for i := range gpus {
		n.GPUs = append(n.GPUs, GPU{ID: fmt.Sprintf("%s-g%d", id, i), Index: i, Healthy: true})
	}
	return n
}

func TestSnapshotIsImmutable(t *testing.T) {
	s := NewStore()
	if err := s.UpsertNode(node("n1", 8)); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertJob(&Job{ID: "j1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertAlloc(&Alloc{ID: "a1", JobID: "j1", NodeID: "n1", GPUs: []string{"n1-g0"}}); err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	s.DeleteAlloc("a1")
	s.DeleteJob("j1")
	_ = s.UpsertJob(&Job{ID: "j2"})
	_ = s.UpsertNode(node("n1", 4))
	if _, ok := snap.Job("j1"); !ok {
		t.Fatal("snapshot lost j1 after a later delete")
	}
	if _, ok := snap.Job("j2"); ok {
		t.Fatal("snapshot sees a later insert")
	}
	if n, _ := snap.Node("n1"); len(n.GPUs) != 8 {
		t.Fatal("snapshot sees a later node update")
	}
	if got := snap.JobAllocs("j1"); len(got) != 1 || got[0].ID != "a1" {
		t.Fatalf("JobAllocs = %v", got)
	}
	now := s.Snapshot()
	if now.NumJobs() != 1 || now.NumAllocs() != 0 || len(now.JobAllocs("j1")) != 0 {
		t.Fatalf("new snapshot: jobs %d allocs %d", now.NumJobs(), now.NumAllocs())
	}
	if snap.Version() >= now.Version() {
		t.Fatalf("versions %d, %d: want increasing", snap.Version(), now.Version())
	}
}

func TestInvalidUpdates(t *testing.T) {
	s := NewStore()
	dup := node("n1", 2)
	dup.GPUs[1].ID = dup.GPUs[0].ID
	cases := map[string]error{
		"node without ID":    s.UpsertNode(&Node{}),
		"GPU without ID":     s.UpsertNode(&Node{ID: "x", GPUs: []GPU{{}}}),
		"duplicate GPU":      s.UpsertNode(dup),
		"job without ID":     s.UpsertJob(&Job{}),
		"negative count":     s.UpsertJob(&Job{ID: "j", Groups: []TaskGroup{{Name: "g", Count: -1}}}),
		"alloc without ID":   s.UpsertAlloc(&Alloc{JobID: "j", NodeID: "n"}),
		"alloc without node": s.UpsertAlloc(&Alloc{ID: "a", JobID: "j"}),
	}
	for name, err := range cases {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
	if s.Version() != 0 {
		t.Fatalf("rejected updates changed the store (version %d)", s.Version())
	}
}

// FinishAlloc removes the allocation like DeleteAlloc and logs its GPU
// time for usage charging; snapshots keep the log as it was, readers
// resume by sequence number, and the log stays bounded.
func TestFinishAllocLog(t *testing.T) {
	s := NewStore()
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	_ = s.UpsertNode(node("n1", 8))
	_ = s.UpsertJob(&Job{ID: "j1"})
	_ = s.UpsertJob(&Job{ID: "bad", SpecErr: errors.New("bad meta")})
	for _, a := range []*Alloc{
		{ID: "a1", JobID: "j1", NodeID: "n1", GPUs: []string{"n1-g0", "n1-g1"}, Start: t0},
		{ID: "a2", JobID: "j1", NodeID: "n1", Start: t0},                                 // no GPUs
		{ID: "a3", JobID: "bad", NodeID: "n1", GPUs: []string{"n1-g2"}, Start: t0},       // bad meta
		{ID: "a4", JobID: "unmanaged", NodeID: "n1", GPUs: []string{"n1-g3"}, Start: t0}, // job unknown
	} {
		if err := s.UpsertAlloc(a); err != nil {
			t.Fatal(err)
		}
	}
	before := s.Snapshot()
	for _, id := range []string{"a1", "a2", "a3", "a4"} {
		if !s.FinishAlloc(id, t0.Add(time.Hour)) {
			t.Fatalf("FinishAlloc(%s) = false for a known allocation", id)
		}
	}
	if s.FinishAlloc("a1", t0) {
		t.Fatal("FinishAlloc of a removed allocation reported true")
	}
	if recs, next := before.FinishedSince(0); len(recs) != 0 || next != 0 {
		t.Fatalf("earlier snapshot sees %d records (next %d)", len(recs), next)
	}
	snap := s.Snapshot()
	if snap.NumAllocs() != 0 || len(snap.JobAllocs("j1")) != 0 {
		t.Fatalf("finished allocations still in the model: %d", snap.NumAllocs())
	}
	recs, next := snap.FinishedSince(0)
	want := Finished{AllocID: "a1", JobID: "j1", GPUs: 2, NodeID: "n1", Start: t0, End: t0.Add(time.Hour)}
	if len(recs) != 1 || recs[0] != want || next != 1 {
		t.Fatalf("FinishedSince(0) = %+v, %d; want [%+v], 1", recs, next, want)
	}
	if recs, next := snap.FinishedSince(next); len(recs) != 0 || next != 1 {
		t.Fatalf("FinishedSince(1) = %v, %d; want nothing new", recs, next)
	}
	// An allocation that ran to its end is recorded as completed.
	if err := s.UpsertAlloc(&Alloc{ID: "c1", JobID: "j1", NodeID: "n1", GPUs: []string{"n1-g0"}, Start: t0}); err != nil {
		t.Fatal(err)
	}
	if !s.CompleteAlloc("c1", t0.Add(2*time.Hour)) {
		t.Fatal("CompleteAlloc = false for a known allocation")
	}
	recs, next = s.Snapshot().FinishedSince(next)
	if want := (Finished{AllocID: "c1", JobID: "j1", GPUs: 1, NodeID: "n1", Start: t0, End: t0.Add(2 * time.Hour), Completed: true}); len(recs) != 1 || recs[0] != want || next != 2 {
		t.Fatalf("after CompleteAlloc: %+v, %d; want [%+v], 2", recs, next, want)
	}
	// Bounded: past MaxFinished the oldest records are dropped and a
	// reader that fell behind gets what is left, in order.
	for i := range MaxFinished + 10 {
		id := fmt.Sprintf("b%d", i)
		_ = s.UpsertAlloc(&Alloc{ID: id, JobID: "j1", NodeID: "n1", GPUs: []string{"n1-g0"}, Start: t0})
		s.FinishAlloc(id, t0.Add(time.Duration(i)*time.Second))
	}
	recs, next = s.Snapshot().FinishedSince(0)
	if next != MaxFinished+12 || len(recs) > MaxFinished || recs[len(recs)-1].AllocID != fmt.Sprintf("b%d", MaxFinished+9) {
		t.Fatalf("after overflow: %d records, next %d", len(recs), next)
	}
	for i := 1; i < len(recs); i++ {
		if !recs[i].End.After(recs[i-1].End) {
			t.Fatalf("records out of order at %d", i)
		}
	}
}

// The store behaves like a plain map under any sequence of updates, and
// every snapshot keeps exactly the state at the time it was taken.
func TestStoreMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := NewStore()
		model := map[string]*Alloc{}
		type taken struct {
			snap  *Snapshot
			state map[string]*Alloc
		}
		var snaps []taken
		// Enough IDs that some share a shard group (32 shards each) and
		// some a shard, few enough that deletes mostly hit.
		var names []string
		for i := range 60 {
			names = append(names, fmt.Sprintf("a%d", i))
		}
		ids := rapid.SampledFrom(names)
		jobs := rapid.SampledFrom([]string{"j1", "j2", "j3"})
		for i := range rapid.IntRange(1, 200).Draw(t, "ops") {
			switch rapid.IntRange(0, 2).Draw(t, fmt.Sprint("op", i)) {
			case 0:
				a := &Alloc{ID: ids.Draw(t, "id"), JobID: jobs.Draw(t, "job"), NodeID: "n"}
				if err := s.UpsertAlloc(a); err != nil {
					t.Fatal(err)
				}
				model[a.ID] = a
			case 1:
				id := ids.Draw(t, "del")
				_, want := model[id]
				if got := s.DeleteAlloc(id); got != want {
					t.Fatalf("delete %s reported %v, want %v", id, got, want)
				}
				delete(model, id)
			case 2:
				cp := map[string]*Alloc{}
				for k, v := range model {
					cp[k] = v
				}
				snaps = append(snaps, taken{s.Snapshot(), cp})
			}
		}
		snaps = append(snaps, taken{s.Snapshot(), model})
		for _, tk := range snaps {
			if tk.snap.NumAllocs() != len(tk.state) {
				t.Fatalf("snapshot has %d allocs, model %d", tk.snap.NumAllocs(), len(tk.state))
			}
			byJob := map[string][]string{}
			for id, a := range tk.state {
				got, ok := tk.snap.Alloc(id)
				if !ok || got != a {
					t.Fatalf("alloc %s: snapshot has %v", id, got)
				}
				byJob[a.JobID] = append(byJob[a.JobID], id)
			}
			list := tk.snap.Allocs()
			if !sort.SliceIsSorted(list, func(i, j int) bool { return list[i].ID < list[j].ID }) || len(list) != len(tk.state) {
				t.Fatalf("Allocs() not the sorted state")
			}
			for _, j := range []string{"j1", "j2", "j3"} {
				want := byJob[j]
				sort.Strings(want)
				var got []string
				for _, a := range tk.snap.JobAllocs(j) {
					got = append(got, a.ID)
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("JobAllocs(%s) = %v, want %v", j, got, want)
				}
			}
		}
	})
}

// BenchmarkStoreUpdates measures model updates per second as the adapter
// applies them: a mix of job, allocation and node events, with a snapshot
// taken every 100 events (a debounced cycle), on a model of 20,000 jobs.
// Target: >= 100,000 events/s.
func BenchmarkStoreUpdates(b *testing.B) {
	s := NewStore()
	for i := range 2000 {
		_ = s.UpsertNode(node(fmt.Sprintf("node-%05d", i), 8))
	}
	jobs := make([]*Job, 20000)
	for i := range jobs {
		jobs[i] = &Job{ID: fmt.Sprintf("default/job-%06d", i), Groups: []TaskGroup{{Name: "main", Count: 1, GPUs: 1}}}
		_ = s.UpsertJob(jobs[i])
	}
	allocs := make([]*Alloc, 20000)
	for i := range allocs {
		allocs[i] = &Alloc{ID: fmt.Sprintf("%08x-alloc", i*2654435761), JobID: jobs[i].ID, NodeID: fmt.Sprintf("node-%05d", i%2000), GPUs: []string{"g"}}
	}
	nodes := make([]*Node, 2000)
	for i := range nodes {
		nodes[i] = node(fmt.Sprintf("node-%05d", i), 8)
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		k := i % 20000
		switch i % 4 {
		case 0:
			_ = s.UpsertJob(jobs[k])
		case 1:
			_ = s.UpsertAlloc(allocs[k])
		case 2:
			s.DeleteAlloc(allocs[(k+7919)%20000].ID)
		case 3:
			_ = s.UpsertNode(nodes[k%2000])
		}
		if i%100 == 99 {
			_ = s.Snapshot()
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkMemory100kJobs measures the heap held by a model of 100,000
// queued jobs (each with a task group and a full impact spec) plus 2,000
// nodes. Target: < 1 GiB.
func BenchmarkMemory100kJobs(b *testing.B) {
	for i := 0; i < b.N; i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := NewStore()
		for n := range 2000 {
			_ = s.UpsertNode(node(fmt.Sprintf("node-%05d", n), 8))
		}
		for j := range 100000 {
			_ = s.UpsertJob(&Job{
				ID: fmt.Sprintf("default/job-%06d", j), Namespace: "default", Name: fmt.Sprintf("job-%06d", j),
				Priority: 50, Submit: time.Unix(int64(j), 0),
				Groups: []TaskGroup{{Name: "train", Count: 2, GPUs: 8}},
				Spec:   specFor(j),
			})
		}
		snap := s.Snapshot()
		runtime.GC()
		runtime.ReadMemStats(&after)
		if snap.NumJobs() != 100000 {
			b.Fatal("jobs missing")
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB")
		runtime.KeepAlive(s)
	}
}

// A shard's key changes exactly when its contents do: snapshots taken with
// no write to a shard in between share its key (and objects), and a write
// gives the shard a new key without touching the older snapshot's.
func TestShardKeys(t *testing.T) {
	s := NewStore()
	for i := range 50 {
		if err := s.UpsertJob(&Job{ID: fmt.Sprintf("j%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.UpsertNode(&Node{ID: "n1"}); err != nil {
		t.Fatal(err)
	}
	a := s.Snapshot()
	b := s.Snapshot()
	if !a.NodesKey().Equal(b.NodesKey()) {
		t.Fatal("node tables of snapshots with no write between differ")
	}
	for i := range a.NumShards() {
		ka, ja := a.JobShard(i)
		kb, _ := b.JobShard(i)
		if ka != kb {
			t.Fatalf("shard %d: keys differ with no write between", i)
		}
		if (ka == ShardKey{}) != (len(ja) == 0) {
			t.Fatalf("shard %d: key %v for %d jobs", i, ka, len(ja))
		}
		if a.JobShardKey(i) != ka {
			t.Fatalf("shard %d: JobShardKey differs from JobShard's key", i)
		}
	}
	if a.JobsKey() != b.JobsKey() || a.AllocsKey() != b.AllocsKey() {
		t.Fatal("table keys of snapshots with no write between differ")
	}
	if a.JobsKey() == (TableKey{}) || a.AllocsKey() == (TableKey{}) {
		t.Fatal("a snapshot's table key equals the zero key")
	}
	changed := a.ShardOf("j7")
	before, jobsBefore := a.JobShard(changed)
	n := len(jobsBefore)
	if err := s.UpsertJob(&Job{ID: "j7", Priority: 9}); err != nil {
		t.Fatal(err)
	}
	c := s.Snapshot()
	for i := range c.NumShards() {
		ka, _ := a.JobShard(i)
		kc, jc := c.JobShard(i)
		if (ka == kc) == (i == changed) {
			t.Fatalf("shard %d: key changed=%v after a write to shard %d", i, ka != kc, changed)
		}
		if i == changed {
			found := false
			for _, j := range jc {
				found = found || (j.ID == "j7" && j.Priority == 9)
			}
			if !found || len(jc) != n {
				t.Fatalf("written shard holds %d jobs (want %d), updated j7 found: %v", len(jc), n, found)
			}
		}
	}
	if k, jobs := a.JobShard(changed); k != before || len(jobs) != n {
		t.Fatal("a write changed an older snapshot's shard")
	}
	if a.JobsKey() == c.JobsKey() {
		t.Fatal("a job write left the job table's key unchanged")
	}
	if a.AllocsKey() != c.AllocsKey() {
		t.Fatal("a job write changed the allocation table's key")
	}
	if !a.NodesKey().Equal(c.NodesKey()) {
		t.Fatal("a job write changed the node table's key")
	}
	if err := s.UpsertNode(&Node{ID: "n2"}); err != nil {
		t.Fatal(err)
	}
	if a.NodesKey().Equal(s.Snapshot().NodesKey()) {
		t.Fatal("a node write left the node table's key unchanged")
	}
}

// An allocation upserted after its node shares the node's copies of its
// node ID and GPU IDs (what placement compares by address); its values
// are unchanged, and an ID the node does not list is kept as given.
func TestUpsertAllocSharesNodeStrings(t *testing.T) {
	s := NewStore()
	n := &Node{ID: "node-1", GPUs: []GPU{{ID: "gpu-a"}, {ID: "gpu-b"}}}
	if err := s.UpsertNode(n); err != nil {
		t.Fatal(err)
	}
	a := &Alloc{ID: "a1", JobID: "j", NodeID: strings.Clone("node-1"), GPUs: []string{strings.Clone("gpu-b"), "gpu-z"}}
	if err := s.UpsertAlloc(a); err != nil {
		t.Fatal(err)
	}
	if a.NodeID != "node-1" || a.GPUs[0] != "gpu-b" || a.GPUs[1] != "gpu-z" {
		t.Fatalf("values changed: %q %q", a.NodeID, a.GPUs)
	}
	if unsafe.StringData(a.NodeID) != unsafe.StringData(n.ID) || unsafe.StringData(a.GPUs[0]) != unsafe.StringData(n.GPUs[1].ID) {
		t.Fatal("the allocation does not share its node's strings")
	}
}
