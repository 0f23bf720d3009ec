package engine

// A queue entry: what a cycle keeps of a waiting job, read by ordering
// and deciding, and how it keeps the job's times.

import (
	"math"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// queued is a waiting job as the queue cache keeps it.
type queued struct {
	// The fields decide reads of every waiting job come first. The queue
	// cache keeps entries by shard; the cycle decides them in queue
	// order, as copies laid out so or where they lie (queueLayout). The
	// struct is 120 bytes (TestQueuedEntrySize): an engine allocates one
	// per waiting job when it reads every job, and copies one per job
	// each cycle after, so every field is here because a cycle reads it
	// of most jobs; what is the same for every job of a tier and project
	// is behind f, shared.
	job *cluster.Job
	// f is what the policy says of the job's tier and project (for a
	// parked job: the engine's blank facts, or its bad spec's).
	f    *specFacts
	id   string
	gpus int
	pool string
	// total is the job's score this cycle (scoreOf gives its terms).
	total float64
	// maxAlloc and maxNVLink are the most GPUs one allocation of the job
	// asks, of any group and of groups asking NVLink topology, and
	// maxBlock the most one device block asks (tooBig; see also
	// devCons); clamped to int32.
	maxAlloc, maxNVLink, maxBlock int32
	// rank is the job's position in the previous cycle's order (-1: new).
	rank int32
	// walltime is the run the job is expected to need from its next
	// start (jobspec.Spec.Left: its impact_walltime less the work it
	// saved; 0: none).
	walltime time.Duration
	// tie is the job's priority and submit second packed (tieOf; tieOK:
	// they fit).
	tie uint64
	// The job's submit time and deadline in Unix nanoseconds (see
	// submitTime and deadlineTime: times says which of them are so, the
	// job's own being read where they would not say exactly what it
	// does). Priority (Nomad's are at most 32,766) is copied too, so
	// that scoring and sorting read the queue's slices, not the jobs.
	submitNs, deadlineNs int64
	prio                 int32
	// parked: bad metadata (parkedReason says what). devCons: a device
	// block of the job has constraints of its own on the device group
	// (tooBig then reads its groups).
	parked, tieOK, devCons bool
	times                  timeFlags
}

// timeFlags say how a queue entry keeps its job's times (setTimes).
type timeFlags uint8

const (
	// submitOK: submitNs is the submit time.
	submitOK timeFlags = 1 << iota
	// deadlineOK: deadlineNs is the deadline.
	deadlineOK
	// noDeadline: the job has none.
	noDeadline
)

// nanosOf is t in Unix nanoseconds, and whether they say exactly what t
// does to Sub and Compare: not for the zero time or one out of their
// range, nor for one with a monotonic clock reading (Sub between two
// such reads the clock).
func nanosOf(t time.Time) (int64, bool) {
	ns := t.UnixNano()
	return ns, !t.IsZero() && time.Unix(0, ns).Equal(t) && t == t.Round(0)
}

// setTimes copies j's submit time and deadline.
func (q *queued) setTimes(j *cluster.Job) {
	q.times = 0
	var ok bool
	if q.submitNs, ok = nanosOf(j.Submit); ok {
		q.times |= submitOK
	}
	if j.Spec.Deadline.IsZero() {
		q.times |= noDeadline
	} else if q.deadlineNs, ok = nanosOf(j.Spec.Deadline); ok {
		q.times |= deadlineOK
	}
}

// submitTime is the job's submit time.
func (q *queued) submitTime() time.Time {
	if q.times&submitOK == 0 {
		return q.job.Submit
	}
	return time.Unix(0, q.submitNs)
}

// deadlineTime is the job's deadline (zero: none).
func (q *queued) deadlineTime() time.Time {
	switch {
	case q.times&noDeadline != 0:
		return time.Time{}
	case q.times&deadlineOK == 0:
		return q.job.Spec.Deadline
	}
	return time.Unix(0, q.deadlineNs)
}

// parkedReason says why a parked job's metadata is bad: every problem at
// once, an unknown tier among them (pol.SpecError).
func (q *queued) parkedReason(pol *policy.Policy) string {
	if q.job.SpecErr != nil {
		return "bad impact metadata: " + pol.SpecError(q.job.Spec, q.job.SpecErr).Error()
	}
	return q.f.bad
}

// clamp32 is n within int32: a size beyond it is too big for any node
// either way.
func clamp32(n int) int32 { return int32(min(max(n, math.MinInt32), math.MaxInt32)) }
