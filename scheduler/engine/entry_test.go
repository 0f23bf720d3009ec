package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// A queue entry stays small: a new engine allocates and copies one per
// waiting job (the cache's, then the layout's copy), so every byte is
// paid 20,000 times a cycle on BenchmarkDecide's queue.
func TestQueuedEntrySize(t *testing.T) {
	if n := unsafe.Sizeof(queued{}); n > 120 {
		t.Fatalf("queued is %d bytes, want at most 120", n)
	}
}

// The times a queue entry keeps as nanoseconds give what the job's own
// do to scoring and ordering (Sub, Compare, IsZero), for every kind of
// time: zero, ordinary, with a monotonic reading, outside the range of
// int64 nanoseconds, in another location.
func TestQueuedTimesSayWhatTheJobsDo(t *testing.T) {
	now := time.Now() // has a monotonic reading
	times := []time.Time{
		{},
		t0,
		t0.Add(time.Nanosecond),
		now,
		now.Add(-time.Hour),
		now.Round(0),
		time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC),
		t0.In(time.FixedZone("x", 3600)),
	}
	for _, at := range []time.Time{now, t0} {
		for i, sub := range times {
			for k, dl := range times {
				j := &cluster.Job{ID: "j", Submit: sub}
				j.Spec.Deadline = dl
				q := &queued{job: j}
				q.setTimes(j)
				if got := q.submitTime(); at.Sub(got) != at.Sub(sub) || got.Compare(sub) != 0 {
					t.Errorf("submit %d: %v gives %v (now.Sub %v, want %v)", i, sub, got, at.Sub(got), at.Sub(sub))
				}
				got := q.deadlineTime()
				if got.IsZero() != dl.IsZero() || got.Sub(at) != dl.Sub(at) {
					t.Errorf("deadline %d: %v gives %v", k, dl, got)
				}
				// Ordering by submit time agrees with the jobs' times.
				other := &cluster.Job{ID: "k", Submit: dl}
				o := &queued{job: other, id: "k"}
				o.setTimes(other)
				q.id = "j"
				want := sub.Compare(dl)
				if want == 0 {
					want = -1 // "j" < "k"
				}
				if c := cmpQueued(q, o); c != want {
					t.Errorf("submit %v against %v: cmpQueued %d, want %d", sub, dl, c, want)
				}
			}
		}
	}
}

// specFacts answers every spec with its own key's facts, the same object
// whether its names are the interned ones or copies, among many keys.
func TestSpecFactsByKey(t *testing.T) {
	e := mustEngine(t, nil)
	c := &cycle{e: e, pol: e.pol}
	const n = 1024
	specs := make([]jobspec.Spec, 0, 2*n)
	for i := range n {
		p := fmt.Sprintf("proj-%d", i)
		specs = append(specs, jobspec.Spec{Tier: "normal", Project: p, PreemptibleSet: i%3 == 0, Preemptible: i%2 == 0})
		specs = append(specs, jobspec.Spec{Tier: strings.Clone("normal"), Project: strings.Clone(p), PreemptibleSet: i%3 == 0, Preemptible: i%2 == 0})
	}
	first := map[specKey]*specFacts{}
	for round := range 3 {
		for i := range specs {
			s := &specs[(i*7+round)%len(specs)]
			f := c.specFacts(s)
			if f.project != s.Project {
				t.Fatalf("spec %+v: facts of project %q", *s, f.project)
			}
			k := specKey{s.Tier, s.Project, s.PreemptibleSet, s.Preemptible}
			if want, ok := first[k]; ok && want != f {
				t.Fatalf("spec %+v: facts %p, earlier %p", *s, f, want)
			}
			first[k] = f
			if s.PreemptibleSet && f.preemptible != s.Preemptible {
				t.Fatalf("spec %+v: preemptible %t", *s, f.preemptible)
			}
		}
	}
}
