package engine

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// explainRejectionsUpTo: jobs this far down the queue get a per-node
// rejection summary even when the pool is plainly too full (the summary is
// cheap, but 10,000 of them are not free).
const explainRejectionsUpTo = 32

// youngNote says, for a job that is not preempting, which gang it could
// preempt once that gang's min runtime has passed, and from when, naming
// where the min runtime comes from (its impact_min_runtime or the policy's
// min_runtime):
// otherwise an operator sees a critical job wait beside preemptible work
// and cannot tell why. It names the earliest such gang of a tier the job
// may preempt, in its pool; "" when there is none. Explanations only.
func (c *cycle) youngNote(q *queued) string {
	key := tierPool{q.f.tier, q.pool}
	if c.lastYoungOK && key == c.lastYoung {
		return c.lastYoungNote
	}
	if note, ok := c.youngNotes[key]; ok {
		c.lastYoung, c.lastYoungNote, c.lastYoungOK = key, note, true
		return note
	}
	if c.youngNotes == nil {
		c.youngNotes = map[tierPool]string{}
	}
	note := ""
	for _, y := range c.young {
		if c.claimed[y.h] || !c.mayPreempt(q.f.tier, y.tier) {
			continue
		}
		if q.pool != "" && !c.holderInPool(y.h, q.pool) {
			continue
		}
		note = fmt.Sprintf("; could preempt %s from %s (%s)",
			c.st.Holders()[y.h].JobID, y.from.UTC().Format(time.RFC3339), c.pol.MinRuntimeSource(policy.Spec{MinRuntime: y.own}))
		break
	}
	c.youngNotes[key] = note
	c.lastYoung, c.lastYoungNote, c.lastYoungOK = key, note, true
	return note
}

// lostBasis says, for explanations, what a victim's work lost is counted
// from: Nomad reports no checkpoints, so unless the job declares
// impact_checkpoint_interval (or the model knows a checkpoint) the whole
// run since its start is assumed lost. That is an upper bound, and says
// so: a job that saves a checkpoint on its signal (and exits with its
// requeue code) loses only the work since that checkpoint, which the
// scheduler cannot see (issue 35 measured 0.47 GPU-hours "lost" where
// nothing was).
func lostBasis(allocs []*cluster.Alloc, interval time.Duration) string {
	if interval > 0 {
		return fmt.Sprintf("its last expected checkpoint (impact_checkpoint_interval %s)", interval)
	}
	for _, a := range allocs {
		if !a.LastCheckpoint.IsZero() {
			return "its last checkpoint"
		}
	}
	return "its start (no checkpoint known, so an upper bound: a job that checkpoints on its signal loses only the work since; set impact_checkpoint_interval to count from the last one)"
}

// reason formats a waiting job's reason, "needs N GPUs, M free" or "no
// placement for the whole gang", with the note on reservations appended:
// thousands of waiting jobs share a handful of distinct sentences, so each
// is formatted once per cycle.
func (c *cycle) reason(k reasonKey) string {
	if c.lastReason != "" && k == c.lastReasonKey {
		return c.lastReason
	}
	slot := &c.reasonSlots[bits.Len(uint(k.gpus))%len(c.reasonSlots)]
	if slot.r != "" && slot.k == k {
		c.lastReasonKey, c.lastReason = k, slot.r
		return slot.r
	}
	if r, ok := c.reasons[k]; ok {
		c.lastReasonKey, c.lastReason = k, r
		*slot = reasonSlot{k, r}
		return r
	}
	var r string
	switch k.kind {
	case reasonNeeds:
		r = fmt.Sprintf("needs %d GPUs, %d free%s", k.gpus, k.free, poolSuffix(k.pool))
	default:
		r = fmt.Sprintf("no placement for the whole gang (%d GPUs) on free GPUs", k.gpus)
	}
	if k.note >= 0 {
		r += c.resNotes[k.note]
	}
	if c.reasons == nil {
		c.reasons = map[reasonKey]string{}
	}
	c.reasons[k] = r
	c.lastReasonKey, c.lastReason = k, r
	*slot = reasonSlot{k, r}
	return r
}

// cat returns a+b. Waiting jobs' reasons are a few shared sentences with
// a few shared notes appended, so each distinct pair is concatenated once
// per cycle rather than once per job. A few pairs recur all cycle long: a
// slot per pair, chosen by the two lengths, answers them before the map.
// The sentences are themselves memoized (reason, youngNote, earlier cats),
// so a pair recurs as the same two strings in memory, and comparing a
// string with itself stops at its address (runtime memequal) instead of
// reading its bytes.
func (c *cycle) cat(a, b string) string {
	if b == "" {
		return a
	}
	k := catKey{a, b}
	slot := &c.catSlots[(len(a)*31+len(b))%len(c.catSlots)]
	if slot.r != "" && slot.k == k {
		return slot.r
	}
	r, ok := c.cats[k]
	if !ok {
		if c.cats == nil {
			c.cats = map[catKey]string{}
		}
		r = a + b
		c.cats[k] = r
	}
	slot.k, slot.r = k, r
	return r
}

// catSlot is one of cat's recent answers.
type catSlot struct {
	k catKey
	r string
}

// catKey is the pair cat joins.
type catKey struct{ a, b string }

// noteFor returns the index of the reservation note a waiting job's reason
// ends with (-1: none): jobs that may not backfill are told why reserved
// GPUs are not theirs.
func (c *cycle) noteFor(backfill bool) int {
	if len(c.reservations) == 0 || backfill {
		return -1
	}
	return len(c.resNotes) - 1
}

const (
	reasonNeeds = iota
	reasonNoPlacement
)

type reasonSlot struct {
	k reasonKey
	r string
}

type reasonKey struct {
	kind       int
	gpus, free int
	pool       string
	note       int
}

func poolSuffix(pool string) string {
	if pool == "" {
		return ""
	}
	return fmt.Sprintf(" in pool %q", pool)
}
