package engine

import (
	"fmt"
	"math/bits"
	"sort"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
)

// explainRejectionsUpTo: jobs this far down the queue get a per-node
// rejection summary even when the pool is plainly too full (the summary is
// cheap, but 10,000 of them are not free).
const explainRejectionsUpTo = 32

// explainer is the explain step: it words why a job waits, each
// distinct sentence once per cycle (thousands of waiting jobs share a
// few), and notes which young gangs a job could preempt later. It owns
// the caches of those sentences, and the plan's explanations and queue
// (explanation, indexExplanations). Decisions never read what it says.
type explainer struct {
	c *cycle
	// exps are the plan's explanations, in queue order (begin); scratch
	// stands in for them when the plan carries none.
	exps    []Explanation
	scratch Explanation
	reasons map[reasonKey]string
	// lastReasonKey/lastReason: the reason given last (consecutive
	// waiting jobs mostly share it).
	lastReasonKey reasonKey
	lastReason    string
	// cats memoizes cat; catSlots are its recent answers.
	cats     map[catKey]string
	catSlots [16]catSlot
	// reasonSlots: reason's recent answers by GPU count (before its map).
	reasonSlots [16]reasonSlot
	// resNotes: the reservation note after each reservation of the cycle
	// (see reservationNote); the last one is current.
	resNotes []string
	// young: preemptible running gangs still within their min runtime
	// (the policy's or their impact_min_runtime), earliest preemptible first (built only with
	// explanations on, for youngNote).
	young []youngHolder
	// youngNotes caches youngNote by tier and pool (thousands of waiting
	// jobs share a few); claim clears it.
	youngNotes map[tierPool]youngChance
	// lastYoung...: youngNote's last answer (claim forgets it).
	lastYoung     tierPool
	lastYoungNote youngChance
	lastYoungOK   bool
}

// youngChance is a waiting job's chance to preempt a gang once that
// gang's min runtime has passed: the gang's job, from when, and the note
// the job's reason carries for it (all zero when there is none).
type youngChance struct {
	job  string
	from time.Time
	note string
}

// begin makes room for the explanations of a queue n jobs long.
func (w *explainer) begin(n int) {
	if w.c.explain {
		w.exps = make([]Explanation, n)
	}
}

// explanation is the job's explanation in the plan, or a scratch one
// when the plan carries none.
func (w *explainer) explanation(q *queued, pos int) *Explanation {
	if !w.c.explain {
		// Decisions never read what explanations say: a scratch one
		// takes what is written.
		w.scratch = Explanation{}
		return &w.scratch
	}
	// indexExplanations writes what the queue alone says, on the
	// other goroutine: decide writes only the other fields.
	return &w.exps[pos-1]
}

// indexExplanations writes into exps what the queue says of each job
// (ID, position, score, tier, project, GPUs) and fills the plan's Queue
// and Explanations (pointers into exps) in queue order. It reads only
// the queue and writes only fields decide never reads nor writes, so it
// runs while the jobs are decided, off the decisions' path.
func (w *explainer) indexExplanations(lay *queueLayout) {
	if !w.c.explain {
		return
	}
	n := lay.len()
	for i := range n {
		q, exp := lay.filled(i), &w.exps[i]
		exp.JobID, exp.Position, exp.GPUs = q.id, i+1, q.gpus
		if !q.parked {
			exp.Score, exp.Tier, exp.Project = w.c.order.scoreOf(q), q.f.tier, q.f.project
		}
	}
	w.c.plan.Queue = make([]string, n)
	w.c.plan.Explanations = make(map[string]*Explanation, n)
	for i := range n {
		id := w.exps[i].JobID
		w.c.plan.Queue[i] = id
		w.c.plan.Explanations[id] = &w.exps[i]
	}
}

// addYoung records a gang protected by its min runtime (judge step).
func (w *explainer) addYoung(y youngHolder) { w.young = append(w.young, y) }

// sortYoung orders the young gangs earliest preemptible first, then by
// job ID.
func (w *explainer) sortYoung(holders []placement.Holder) {
	sort.SliceStable(w.young, func(a, b int) bool {
		ya, yb := w.young[a], w.young[b]
		if !ya.from.Equal(yb.from) {
			return ya.from.Before(yb.from)
		}
		return holders[ya.h].JobID < holders[yb.h].JobID
	})
}

// hasYoung: some gang is protected by its min runtime only.
func (w *explainer) hasYoung() bool { return len(w.young) > 0 }

// forgetYoung drops youngNote's answers (a gang was claimed).
func (w *explainer) forgetYoung() {
	clear(w.youngNotes)
	w.lastYoungOK = false
}

// addReservationNote makes note the current reservation note (noteFor).
func (w *explainer) addReservationNote(note string) { w.resNotes = append(w.resNotes, note) }

// youngNote says, for a job that is not preempting, which gang it could
// preempt once that gang's min runtime has passed, and from when, naming
// where the min runtime comes from (its impact_min_runtime or the policy's
// min_runtime):
// otherwise an operator sees a critical job wait beside preemptible work
// and cannot tell why. It names the earliest such gang of a tier the job
// may preempt, in its pool, and whose min runtime holds it from q (not
// one that the pool's headroom lets q preempt young); the zero chance
// when there is none. Explanations only.
func (w *explainer) youngNote(q *queued) youngChance {
	key := tierPool{q.f.tier, q.pool}
	if w.lastYoungOK && key == w.lastYoung {
		return w.lastYoungNote
	}
	if note, ok := w.youngNotes[key]; ok {
		w.lastYoung, w.lastYoungNote, w.lastYoungOK = key, note, true
		return note
	}
	if w.youngNotes == nil {
		w.youngNotes = map[tierPool]youngChance{}
	}
	var chance youngChance
	for _, y := range w.young {
		// A gang q's tier may preempt young (its pool's headroom
		// waives the min runtime, hrCycle.waives) is no chance for
		// later: the search already weighed it.
		if w.c.claimed[y.h] || !w.c.mayPreempt(q.f.tier, y.tier) || w.c.hr.waives(q, y.h) {
			continue
		}
		if q.pool != "" && !w.c.holderInPool(y.h, q.pool) {
			continue
		}
		job := w.c.st.Holders()[y.h].JobID
		chance = youngChance{job: job, from: y.from, note: fmt.Sprintf("; could preempt %s from %s (%s)",
			job, y.from.UTC().Format(time.RFC3339), w.c.pol.MinRuntimeSource(jobspec.Spec{MinRuntime: y.own}))}
		break
	}
	w.youngNotes[key] = chance
	w.lastYoung, w.lastYoungNote, w.lastYoungOK = key, chance, true
	return chance
}

// lostBasis says, for explanations, what a victim's work lost is counted
// from: Nomad reports no checkpoints, so unless the job declares
// impact_checkpoint_interval (or the model knows a checkpoint) the whole
// run since its start is assumed lost. That is an upper bound, and says
// so: a job that saves a checkpoint on its signal (and exits with its
// requeue code) loses only the work since that checkpoint, which the
// scheduler cannot see (a run that checkpointed on its signal was once
// reported to lose 0.47 GPU-hours where nothing was lost).
func lostBasis(allocs []*cluster.Alloc, interval time.Duration) string {
	if basis, known := checkpointBasis(allocs, interval); known {
		return basis
	}
	return "its start (no checkpoint known, so an upper bound: a job that checkpoints on its signal loses only the work since; set impact_checkpoint_interval to count from the last one)"
}

// lastSaveBasis names what a stop's unsaved work counts from, for the
// reason of a victim taken back by how little it has unsaved: lostBasis
// without the caveat, which the amount it names makes moot.
func lastSaveBasis(allocs []*cluster.Alloc, interval time.Duration) string {
	basis, _ := checkpointBasis(allocs, interval)
	return basis
}

// checkpointBasis is the checkpoint a run's lost work counts from, in
// words, and whether one is known (else "its start").
func checkpointBasis(allocs []*cluster.Alloc, interval time.Duration) (string, bool) {
	if interval > 0 {
		return fmt.Sprintf("its last expected checkpoint (impact_checkpoint_interval %s)", interval), true
	}
	for _, a := range allocs {
		if !a.LastCheckpoint.IsZero() {
			return "its last checkpoint", true
		}
	}
	return "its start", false
}

// reason formats a waiting job's reason, "needs N GPUs, M free" or "no
// placement for the whole gang", with the note on reservations appended:
// thousands of waiting jobs share a handful of distinct sentences, so each
// is formatted once per cycle.
func (w *explainer) reason(k reasonKey) string {
	if w.lastReason != "" && k == w.lastReasonKey {
		return w.lastReason
	}
	slot := &w.reasonSlots[bits.Len(uint(k.gpus))%len(w.reasonSlots)]
	if slot.r != "" && slot.k == k {
		w.lastReasonKey, w.lastReason = k, slot.r
		return slot.r
	}
	if r, ok := w.reasons[k]; ok {
		w.lastReasonKey, w.lastReason = k, r
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
	r += k.kept
	if k.note >= 0 {
		r += w.resNotes[k.note]
	}
	if w.reasons == nil {
		w.reasons = map[reasonKey]string{}
	}
	w.reasons[k] = r
	w.lastReasonKey, w.lastReason = k, r
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
func (w *explainer) cat(a, b string) string {
	if b == "" {
		return a
	}
	k := catKey{a, b}
	slot := &w.catSlots[(len(a)*31+len(b))%len(w.catSlots)]
	if slot.r != "" && slot.k == k {
		return slot.r
	}
	r, ok := w.cats[k]
	if !ok {
		if w.cats == nil {
			w.cats = map[catKey]string{}
		}
		r = a + b
		w.cats[k] = r
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
func (w *explainer) noteFor(backfill bool) int {
	if w.c.place.count() == 0 || backfill {
		return -1
	}
	return len(w.resNotes) - 1
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
	// kept: the headroom's note on GPUs it withheld (hrCycle.withheldNote).
	kept string
	note int
}

func poolSuffix(pool string) string {
	if pool == "" {
		return ""
	}
	return fmt.Sprintf(" in pool %q", pool)
}
