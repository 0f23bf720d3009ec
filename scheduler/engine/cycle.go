package engine

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
	"github.com/impact-sched/nomad-impact/scheduler/preempt"
)

// maxPreemptAttemptsPerSuccess bounds the victim searches of one cycle
// (successful or not) to this many per job the policy lets preempt in a
// cycle (Preemption.MaxPerCycle), so a long queue of jobs that may preempt
// but cannot gain enough does not turn a cycle into a scan of the cluster
// per job.
const maxPreemptAttemptsPerSuccess = 4

// explainRejectionsUpTo: jobs this far down the queue get a per-node
// rejection summary even when the pool is plainly too full (the summary is
// cheap, but 10,000 of them are not free).
const explainRejectionsUpTo = 32

type queued struct {
	job     *cluster.Job
	tier    string
	project string
	score   policy.Score
	gpus    int
	parked  string
	pool    string
	// impact is the policy's Impact of the job's spec, quota its
	// project's GPU quota (0: none), proj its project's index in the
	// engine's queueCache: fixed for a job object, kept across cycles.
	impact float64
	quota  int
	proj   int32
	// preemptible is the policy's IsPreemptible of the job's spec.
	preemptible bool
	// maxAlloc and maxNVLink are the most GPUs one allocation of the job
	// asks, of any group and of groups asking NVLink topology, and
	// maxBlock the most one device block asks (tooBig).
	maxAlloc, maxNVLink, maxBlock int
	// rank is the job's position in the previous cycle's order (-1: new).
	rank int32
	// tie is the job's priority and submit second packed (tieOf; tieOK:
	// they fit).
	tie   uint64
	tieOK bool
	// The job's ID, priority, submit time, deadline and walltime, copied
	// so that scoring, sorting and most decisions read the queue's
	// slices, not the jobs.
	id               string
	prio             int
	submit, deadline time.Time
	walltime         time.Duration
}

type reservation struct {
	jobID string
	tier  string
	until time.Time // zero: unknown (running work without walltime)
}

// victimInfo is what the cycle knows about a running gang as a possible
// victim.
type victimInfo struct {
	ok bool // preemptible at all (policy, min runtime, not stopping)
	// young: preemptible but within its minimum runtime, a victim only
	// for the tiers of its pool's headroom (headroomWaives).
	young  bool
	tier   string
	cost   float64
	lost   float64
	grace  time.Duration
	signal string
	// requeue is the victim's requeue exit code.
	requeue int
	// idle: a victim on its tier's preemptible idle action (see
	// idleVictim); weight is its tier's weight.
	idle      bool
	idleSince time.Time
	idleNote  string
	weight    float64
	idleGPUh  float64
	reclaimed float64
}

type cycle struct {
	e    *Engine
	pol  *policy.Policy
	snap *cluster.Snapshot
	now  time.Time
	st   *placement.State
	plan *Plan

	projectGPUs  map[string]int
	reservations []reservation
	// claimed: holders already chosen as victims (or stopping ones counted
	// for a preemptor) in this cycle.
	claimed         map[int]bool
	victims         []victimInfo
	preemptors      int
	preemptAttempts int
	endOrder        *endOrder // holders by expected end, for reservations
	stopping        []int     // holders stopping, not yet counted for a preemptor
	// stoppingGPUs: the GPUs of the unclaimed holders in stopping (-1:
	// to count again; claim resets it).
	stoppingGPUs int
	candCache    map[tierPool]*candList
	exps         []Explanation
	// explain: build the plan's explanations and queue (see
	// WithoutExplanations); scratch stands in for them when not.
	explain bool
	scratch Explanation
	reasons map[reasonKey]string
	// lastReasonKey/lastReason: the reason given last (consecutive
	// waiting jobs mostly share it).
	lastReasonKey reasonKey
	lastReason    string
	// cats memoizes cat; lastCat is its last answer (a, b, a+b) and
	// catSlots its recent ones by length (checked before the map, whose
	// keys are long strings to hash).
	cats     map[[2]string]string
	lastCat  [3]string
	catSlots [32][3]string
	// reasonSlots: reason's recent answers by GPU count (before its map).
	reasonSlots [16]reasonSlot
	// resNotes: the reservation note after each reservation of the cycle
	// (see reservationNote); the last one is current.
	resNotes     []string
	claimVersion int
	poolMax      map[string][3]int
	// lastPool...: poolMax's last answer (most jobs share a pool).
	lastPool      string
	lastPoolMax   [3]int
	lastPoolMaxOK bool
	// young: preemptible running gangs still within their
	// impact_min_runtime, earliest preemptible first (built only with
	// explanations on, for youngNote).
	young []youngHolder
	// youngNotes caches youngNote by tier and pool (thousands of waiting
	// jobs share a few); claim clears it.
	youngNotes map[tierPool]string
	// lastYoung...: youngNote's last answer (claim forgets it).
	lastYoung     tierPool
	lastYoungNote string
	lastYoungOK   bool
	// hr is the headroom state (headroom.go); nil without headroom blocks.
	hr *hrCycle
	// bound: preemptor job ID -> the free GPUs of its binding this cycle
	// withheld from everyone else (holdBindings); released for it alone.
	bound map[string][]placement.Slot
	// claimedFor: the victims of the preemptor being decided (for bind).
	claimedFor []int
	// idleVictims: some gang is a victim by its idle action (any tier
	// may then preempt, see mayPreemptVictim).
	idleVictims bool
}

// tierPool keys what the cycle works out once per tier and pool.
type tierPool struct{ tier, pool string }

// youngHolder is a gang that would be a preemption candidate but for its
// impact_min_runtime.
type youngHolder struct {
	h          int
	tier       string
	from       time.Time
	minRuntime time.Duration
}

func newCycle(e *Engine, snap *cluster.Snapshot, now time.Time) *cycle {
	return &cycle{
		e:    e,
		pol:  e.pol,
		snap: snap,
		now:  now,
		plan: &Plan{
			Now:             now,
			SnapshotVersion: snap.Version(),
			Explanations:    map[string]*Explanation{},
		},
		explain:     !e.opts.noExplain,
		projectGPUs: map[string]int{},
		claimed:     map[int]bool{},
		poolMax:     map[string][3]int{},
	}
}

func (c *cycle) run() {
	c.e.expireInflight(c.snap, c.now)
	var stopping func(*cluster.Alloc) bool
	if len(c.e.inflight) > 0 {
		stopping = func(a *cluster.Alloc) bool {
			_, ok := c.e.inflight[a.ID]
			return ok
		}
	}
	c.st = placement.New(c.snap, stopping, c.e.cache)
	c.e.accrue(c.snap, c.st.Holders(), c.now)
	c.holdPending()
	c.holdBindings()
	c.assessHolders()
	queue := c.buildQueue()
	c.headroomBegin(queue)
	c.watchGangs()
	if c.explain {
		c.plan.Queue = make([]string, 0, len(queue))
		c.plan.Explanations = make(map[string]*Explanation, len(queue))
		c.exps = make([]Explanation, len(queue))
	}
	for i, q := range queue {
		c.decide(q, i+1)
	}
	c.st.Commit()
	c.plan.Headroom = c.headroomStatus()
	if c.e.logger.IsDebug() {
		c.e.logger.Debug("cycle decided", "snapshot", c.snap.Version(), "queued", len(queue),
			"admitted", len(c.plan.Admissions), "preempted", len(c.plan.Preemptions),
			"reservations", len(c.reservations), "free_gpus", c.st.FreeGPUs(""))
	}
}

// holdPending keeps the GPUs of admissions planned by earlier cycles whose
// allocations have not appeared yet, and forgets those that did appear,
// whose job is gone, or that outlived the TTL.
func (c *cycle) holdPending() {
	ids := make([]string, 0, len(c.e.pending))
	for id := range c.e.pending {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		p := c.e.pending[id]
		j, ok := c.snap.Job(id)
		appeared := c.snap.JobAllocs(id)
		// Held until every planned allocation is there: Nomad may place a
		// gang's members one by one.
		if !ok || c.now.Sub(p.at) > c.e.opts.admissionTTL || len(appeared) >= len(p.allocs) {
			delete(c.e.pending, id)
			continue
		}
		for _, a := range p.allocs {
			c.st.Hold(a.NodeID, a.GPUs)
		}
		if j.SpecErr == nil {
			// Members already running are charged to the quota as
			// holders (assessHolders); only the rest is added here.
			held := j.GPUs()
			for _, a := range appeared {
				held -= len(a.GPUs)
			}
			c.projectGPUs[c.pol.ProjectName(j.Spec)] += max(0, held)
		}
	}
	c.st.Commit()
}

// watchGangs replaces running jobs their users re-submitted (Job.Parked:
// the old allocations are stopped through a Requeue at once, the new
// version then waits its turn), and finds running gangs missing a member:
// once one has been
// missing for the policy's gangs missing_member_grace, plans to stop the
// gang whole (checkpoint signal, grace, park, stop: a Requeue) so that it
// is requeued whole. A member is missing when its allocation is gone
// without having completed (lost, failed, stopped), was told to stop by
// someone else, sits on a node that is down or draining, or
// is a replacement Nomad placed (a later generation than its peers: a
// replacement waiting at a gang barrier for peers that are gone, or peers
// of an older generation running beside it). Members that completed on
// their own are done, not missing. Gangs with an admission still under
// way (the adapter rolls those back) or a stop already ordered are left
// alone.
func (c *cycle) watchGangs() {
	grace := c.pol.Gangs.MissingMemberGrace
	holders := c.st.Holders()
	seen := map[string]bool{}
	for _, run := range c.e.queue.running {
		for _, j := range run {
			if _, ok := c.e.pending[j.ID]; ok {
				continue
			}
			h, hasHolder := c.holderOf(j.ID)
			var allocs []*cluster.Alloc
			var slots []placement.Slot
			if hasHolder {
				allocs, slots = holders[h].Allocs, holders[h].Slots
				if c.ordered(allocs) {
					continue // a stop we ordered is under way
				}
			}
			if j.Parked && hasHolder && c.anyRunning(allocs) {
				// Re-submitted by its user while running: Nomad's meaning
				// is a destructive update (the new version replaces the
				// old allocations). Through the queue: the old ones are
				// stopped now (checkpoint signal and grace first) and the
				// new version waits its turn like any queued job.
				r := Preemption{
					JobID: j.ID, GPUs: holders[h].GPUs, Grace: j.Spec.Grace, CheckpointSignal: j.Spec.CheckpointSignal,
					RequeueExitCode: j.Spec.RequeueCode(), Update: true,
					Reason: "re-submitted by its user while running: the old version's allocations are stopped (Nomad's destructive update) and the new version waits its turn in the queue",
				}
				for _, a := range allocs {
					r.Allocs = append(r.Allocs, a.ID)
					c.e.inflight[a.ID] = inflightStop{job: j.ID, decided: c.now, expires: c.now.Add(j.Spec.Grace)}
				}
				c.claim(h)
				c.plan.Requeues = append(c.plan.Requeues, r)
				c.e.logger.Info("running job updated by its user; replacing it through the queue", "job", j.ID)
				delete(c.e.broken, j.ID)
				continue
			}
			if grace <= 0 {
				continue // the watch is off
			}
			why := c.missing(j, allocs, slots)
			if why == "" {
				continue
			}
			seen[j.ID] = true
			since, ok := c.e.broken[j.ID]
			if !ok {
				since = c.now
				c.e.broken[j.ID] = since
				c.e.logger.Info("gang missing a member", "job", j.ID, "why", why, "grace", grace)
			}
			if c.now.Sub(since) < grace {
				continue
			}
			r := Preemption{
				JobID:            j.ID,
				Grace:            j.Spec.Grace,
				CheckpointSignal: j.Spec.CheckpointSignal,
				RequeueExitCode:  j.Spec.RequeueCode(),
				Reason: fmt.Sprintf("gang incomplete for %s (gangs missing_member_grace %s): %s; stopped whole and requeued",
					c.now.Sub(since).Round(time.Second), grace, why),
			}
			if hasHolder {
				r.GPUs = holders[h].GPUs
				for _, a := range allocs {
					r.Allocs = append(r.Allocs, a.ID)
					c.e.inflight[a.ID] = inflightStop{job: j.ID, decided: c.now, expires: c.now.Add(j.Spec.Grace)}
				}
				c.claim(h)
			}
			c.plan.Requeues = append(c.plan.Requeues, r)
			c.e.logger.Warn("requeuing incomplete gang whole", "job", j.ID, "why", why, "missing_for", c.now.Sub(since))
			delete(c.e.broken, j.ID)
		}
	}
	for id := range c.e.broken {
		if !seen[id] {
			delete(c.e.broken, id)
		}
	}
}

// anyRunning reports whether some allocation is not told to stop.
func (c *cycle) anyRunning(allocs []*cluster.Alloc) bool {
	for _, a := range allocs {
		if !a.Stopping {
			return true
		}
	}
	return false
}

// holderOf finds the holder of a job's allocations.
func (c *cycle) holderOf(jobID string) (int, bool) {
	holders := c.st.Holders()
	i := sort.Search(len(holders), func(i int) bool { return holders[i].JobID >= jobID })
	return i, i < len(holders) && holders[i].JobID == jobID
}

// ordered reports whether the engine ordered a stop of any of the allocs.
func (c *cycle) ordered(allocs []*cluster.Alloc) bool {
	for _, a := range allocs {
		if _, ok := c.e.inflight[a.ID]; ok {
			return true
		}
	}
	return false
}

// missing says which members of a running gang are missing, "" when none.
// slots are the holder's slots of allocs (nil without a holder): a
// member's node is read from the cycle's state by ordinal, not looked up
// by ID, and the common complete gang allocates nothing.
func (c *cycle) missing(j *cluster.Job, allocs []*cluster.Alloc, slots []placement.Slot) string {
	type count struct {
		group string
		n     int
	}
	var present []count
	var why []string
	for i, a := range allocs {
		var n *cluster.Node
		ok := false
		if i < len(slots) {
			n, ok = c.st.Node(slots[i].Node), true
		} else {
			n, ok = c.snap.Node(a.NodeID)
		}
		switch {
		case a.Replacement:
			why = append(why, fmt.Sprintf("allocation %s of group %s is a replacement Nomad placed for a lost or stopped member", a.ID, a.Group))
		case a.Stopping:
			why = append(why, fmt.Sprintf("allocation %s of group %s was told to stop", a.ID, a.Group))
		case !ok || !n.Ready:
			why = append(why, fmt.Sprintf("allocation %s of group %s is on node %s, which is down or draining", a.ID, a.Group, a.NodeID))
		default:
			k := 0
			for k < len(present) && present[k].group != a.Group {
				k++
			}
			if k == len(present) {
				present = append(present, count{group: a.Group})
			}
			present[k].n++
		}
	}
	for _, g := range j.Groups {
		if g.GPUs == 0 {
			// Only GPU groups are gang members the scheduler placed (an
			// admission places every group with GPUs).
			continue
		}
		have := 0
		for _, p := range present {
			if p.group == g.Name {
				have = p.n
			}
		}
		if short := g.Count - have - j.Completed[g.Name]; short > 0 && len(why) == 0 {
			why = append(why, fmt.Sprintf("group %s has %d of %d members (the others lost, failed or stopped)", g.Name, g.Count-short, g.Count))
		}
	}
	return strings.Join(why, "; ")
}

// holdBindings withholds the GPUs bound to preemptors (Engine.bindings)
// that are free now from every job but their preemptor, and drops the
// bindings whose preemptor was admitted or left the queue, or that
// expired.
func (c *cycle) holdBindings() {
	if len(c.e.bindings) == 0 {
		return
	}
	ids := make([]string, 0, len(c.e.bindings))
	for id := range c.e.bindings {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		b := c.e.bindings[id]
		j, ok := c.snap.Job(id)
		_, pending := c.e.pending[id]
		if !ok || j.State != cluster.JobQueued || pending || c.now.After(b.expires) {
			delete(c.e.bindings, id)
			continue
		}
		for _, ap := range b.gpus {
			sl, ok := c.slotOf(ap)
			if !ok {
				continue
			}
			sl.Mask &= c.st.Free(sl.Node)
			if sl.Mask == 0 {
				continue
			}
			c.st.Take(sl)
			if c.bound == nil {
				c.bound = map[string][]placement.Slot{}
			}
			c.bound[id] = append(c.bound[id], sl)
		}
	}
	c.st.Commit()
}

// slotOf maps a placement by node and GPU IDs to the state's slot.
func (c *cycle) slotOf(ap AllocPlacement) (placement.Slot, bool) {
	ord, ok := c.st.Ordinal(ap.NodeID)
	if !ok {
		return placement.Slot{}, false
	}
	n := c.st.Node(ord)
	var m uint64
	for _, id := range ap.GPUs {
		for gi := range min(len(n.GPUs), cluster.MaxGPUsPerNode) {
			if n.GPUs[gi].ID == id {
				m |= 1 << gi
				break
			}
		}
	}
	return placement.Slot{Node: ord, Mask: m}, m != 0
}

// bind records the GPUs a preemptor's placement takes as bound to it.
// An existing binding keeps its expiry (refreshing it each cycle the
// preemptor waits would hold the GPUs for ever).
func (c *cycle) bind(q *queued, res placement.Result) {
	var gpus []AllocPlacement
	for _, g := range res.Groups {
		for _, sl := range g {
			gpus = append(gpus, AllocPlacement{NodeID: c.st.Node(sl.Node).ID, GPUs: c.st.GPUIDs(sl)})
		}
	}
	b, ok := c.e.bindings[q.job.ID]
	if !ok {
		maxGrace := time.Duration(0)
		for _, h := range c.claimedFor {
			maxGrace = max(maxGrace, c.victims[h].grace)
		}
		b.expires = c.now.Add(maxGrace + c.e.opts.admissionTTL)
	}
	b.gpus = gpus
	c.e.bindings[q.job.ID] = b
}

// assessHolders charges running gangs to their projects (for quotas) and
// works out, once per cycle, which may be victims and at what cost.
func (c *cycle) assessHolders() {
	holders := c.st.Holders()
	c.victims = make([]victimInfo, len(holders))
	idle := c.judgeRunning()
	for h := range holders {
		hd := &holders[h]
		if hd.Job == nil {
			continue
		}
		c.projectGPUs[c.pol.ProjectName(hd.Job.Spec)] += hd.GPUs
		j := hd.Job
		if hd.Stopping || c.claimed[h] || j.SpecErr != nil || j.State != cluster.JobRunning {
			continue
		}
		f := c.specFacts(j.Spec)
		if f.bad != "" {
			continue
		}
		if st := idle[h]; st.idle && !st.ignored && st.cfg.Action == policy.IdlePreemptible {
			c.victims[h] = c.idleVictim(&holders[h], st)
			c.idleVictims = true
			continue
		}
		if !f.preemptible {
			continue
		}
		start := earliestStart(hd.Allocs)
		young := false
		if minRT := c.pol.MinRuntime(j.Spec); c.now.Sub(start) < minRT {
			if c.explain {
				c.young = append(c.young, youngHolder{h: h, tier: f.tier, from: start.Add(minRT), minRuntime: minRT})
			}
			if len(c.pol.Headrooms) == 0 {
				continue
			}
			young = true // a victim only for a headroom's tiers (headroomWaives)
		}
		lost := preempt.WorkLost(hd.Allocs, j.Spec.CheckpointInterval, c.now)
		restart := float64(hd.GPUs) * c.pol.Preemption.RestartCost.Hours()
		c.victims[h] = victimInfo{
			ok:      !young,
			young:   young,
			tier:    f.tier,
			cost:    f.impact * (lost + restart),
			lost:    lost,
			grace:   j.Spec.Grace,
			signal:  j.Spec.CheckpointSignal,
			requeue: j.Spec.RequeueCode(),
		}
	}
	sort.SliceStable(c.young, func(a, b int) bool {
		ya, yb := c.young[a], c.young[b]
		if !ya.from.Equal(yb.from) {
			return ya.from.Before(yb.from)
		}
		return holders[ya.h].JobID < holders[yb.h].JobID
	})
}

// youngNote says, for a job that is not preempting, which gang it could
// preempt once that gang's impact_min_runtime has passed, and from when:
// otherwise an operator sees a critical job wait beside preemptible work
// and cannot tell why. It names the earliest such gang of a tier the job
// may preempt, in its pool; "" when there is none. Explanations only.
func (c *cycle) youngNote(q *queued) string {
	key := tierPool{q.tier, q.pool}
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
		if c.claimed[y.h] || !c.pol.MayPreempt(q.tier, y.tier) {
			continue
		}
		if q.pool != "" && !c.holderInPool(y.h, q.pool) {
			continue
		}
		note = fmt.Sprintf("; could preempt %s from %s (impact_min_runtime %s)",
			c.st.Holders()[y.h].JobID, y.from.UTC().Format(time.RFC3339), y.minRuntime)
		break
	}
	c.youngNotes[key] = note
	c.lastYoung, c.lastYoungNote, c.lastYoungOK = key, note, true
	return note
}

// lostBasis says, for explanations, what a victim's work lost is counted
// from: Nomad reports no checkpoints, so unless the job declares
// impact_checkpoint_interval (or the model knows a checkpoint) the whole
// run since its start is assumed lost.
func lostBasis(allocs []*cluster.Alloc, interval time.Duration) string {
	if interval > 0 {
		return fmt.Sprintf("its last expected checkpoint (impact_checkpoint_interval %s)", interval)
	}
	for _, a := range allocs {
		if !a.LastCheckpoint.IsZero() {
			return "its last checkpoint"
		}
	}
	return "its start (no checkpoint known; set impact_checkpoint_interval to count from the last one)"
}

func earliestStart(allocs []*cluster.Alloc) time.Time {
	var t time.Time
	for _, a := range allocs {
		if t.IsZero() || a.Start.Before(t) {
			t = a.Start
		}
	}
	return t
}

func (c *cycle) request(q *queued, allowReserved bool) placement.Request {
	req := placement.Request{Pool: q.pool, AllowReserved: allowReserved, LocalityLabels: c.e.opts.localityLabels, DistinctHosts: q.job.DistinctHosts}
	for gi := range q.job.Groups {
		g := &q.job.Groups[gi]
		topo := g.Spec.Topology
		if topo == policy.TopologyUnset {
			topo = q.job.Spec.Topology
		}
		pg := placement.Group{Name: g.Name, Count: g.Count, GPUs: g.GPUs, Topology: topo,
			DistinctHosts: g.DistinctHosts, Constraints: g.Constraints}
		if len(g.Devices) > 0 {
			pg.Blocks = make([]placement.Block, len(g.Devices))
			for i, d := range g.Devices {
				pg.Blocks[i] = placement.BlockOf(d)
			}
		}
		req.Groups = append(req.Groups, pg)
	}
	return req
}

func (c *cycle) decide(q *queued, pos int) {
	var exp *Explanation
	if c.explain {
		// c.exps is fresh (zero): only the non-zero fields are written.
		exp = &c.exps[pos-1]
		exp.JobID, exp.Position, exp.Score, exp.Tier, exp.Project, exp.GPUs = q.id, pos, q.score, q.tier, q.project, q.gpus
		c.plan.Explanations[q.id] = exp
		c.plan.Queue = append(c.plan.Queue, q.id)
	} else {
		// Decisions never read what explanations say: a scratch one
		// takes what is written.
		exp = &c.scratch
		*exp = Explanation{}
	}
	if q.parked != "" {
		exp.Status, exp.Reason = StatusParked, q.parked
		return
	}
	if p, ok := c.e.pending[q.id]; ok {
		exp.Status, exp.Reason = StatusAdmitted, "admitted; waiting for its allocations to start"
		exp.Placement, exp.Warnings = p.groups, p.warnings
		return
	}
	if d, ok := c.e.deferred[q.id]; ok {
		if c.now.Before(d.until) {
			exp.Status = StatusWaiting
			if c.explain {
				exp.Reason = fmt.Sprintf("held back until %s: %s", d.until.UTC().Format(time.RFC3339), d.why)
			}
			return
		}
		delete(c.e.deferred, q.id)
	}
	if why := c.tooBig(q); why != "" {
		exp.Status, exp.Reason = StatusParked, why
		return
	}
	if q.quota > 0 && c.projectGPUs[q.project]+q.gpus > q.quota {
		exp.Status = StatusWaiting
		if c.explain {
			exp.Reason = fmt.Sprintf("project %q quota: holds %d of %d GPUs, job needs %d", q.project, c.projectGPUs[q.project], q.quota, q.gpus)
		}
		return
	}
	if why := c.headroomBlocks(q); why != "" {
		exp.Status, exp.Reason = StatusWaiting, why
		return
	}
	if give := c.headroomProtect(q); give != nil {
		defer give()
	}
	if slots := c.bound[q.id]; len(slots) > 0 {
		// The GPUs bound to this job are its own: free for it alone.
		for _, sl := range slots {
			c.st.Release(sl)
		}
		defer func() {
			if exp.Status != StatusAdmitted {
				for _, sl := range slots {
					if sl.Mask&c.st.Free(sl.Node) == sl.Mask {
						c.st.Take(sl)
					}
				}
			}
			delete(c.bound, q.id)
		}()
	}
	backfill := c.mayBackfill(q)
	free := c.st.FreeGPUs(q.pool)
	if backfill {
		free += c.st.ReservedFreeGPUs(q.pool)
	}
	if q.gpus <= free {
		var rej placement.Rejections
		if c.explain {
			rej = placement.Rejections{}
		}
		if res, ok := c.st.Place(c.request(q, backfill), rej); ok {
			c.admit(q, exp, res, backfill && len(c.reservations) > 0)
			return
		}
		if c.explain {
			exp.Rejected = rej
			exp.Reason = c.reason(reasonKey{kind: reasonNoPlacement, gpus: q.gpus, note: c.noteFor(backfill)})
		}
	} else if c.explain {
		exp.Reason = c.reason(reasonKey{kind: reasonNeeds, gpus: q.gpus, free: free, pool: q.pool, note: c.noteFor(backfill)})
		if pos <= explainRejectionsUpTo {
			exp.Rejected = placement.Rejections{}
			c.st.Explain(c.request(q, backfill), exp.Rejected)
		}
	}
	exp.Status = StatusWaiting
	if c.tryPreempt(q, exp) {
		return
	}
	if len(c.reservations) < c.pol.Backfill.Reservations {
		c.reserve(q, exp)
	}
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
// per cycle rather than once per job.
func (c *cycle) cat(a, b string) string {
	if b == "" {
		return a
	}
	if a == c.lastCat[0] && b == c.lastCat[1] && c.lastCat[2] != "" {
		return c.lastCat[2] // consecutive jobs mostly share both
	}
	slot := &c.catSlots[(len(a)+7*len(b))%len(c.catSlots)]
	if slot[2] != "" && slot[0] == a && slot[1] == b {
		c.lastCat = *slot
		return slot[2]
	}
	k := [2]string{a, b}
	r, ok := c.cats[k]
	if !ok {
		if c.cats == nil {
			c.cats = map[[2]string]string{}
		}
		r = a + b
		c.cats[k] = r
	}
	c.lastCat = [3]string{a, b, r}
	*slot = c.lastCat
	return r
}

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

// tooBig parks a job no node set of its pool could ever hold.
func (c *cycle) tooBig(q *queued) string {
	mx, ok := c.lastPoolMax, c.lastPoolMaxOK && q.pool == c.lastPool
	if !ok {
		mx, ok = c.poolMax[q.pool]
	}
	if !ok {
		n, isl := c.st.MaxNodeGPUs(q.pool)
		mx = [3]int{n, isl, c.st.MaxDeviceGroup(q.pool)}
		c.poolMax[q.pool] = mx
	}
	c.lastPool, c.lastPoolMax, c.lastPoolMaxOK = q.pool, mx, true
	if q.maxAlloc <= mx[0] && q.maxNVLink <= mx[1] && q.maxBlock <= mx[2] {
		return "" // the common case, without reading the job's groups
	}
	for gi := range q.job.Groups {
		g := &q.job.Groups[gi]
		if g.GPUs == 0 || g.Count == 0 {
			continue
		}
		topo := g.Spec.Topology
		if topo == policy.TopologyUnset {
			topo = q.job.Spec.Topology
		}
		if g.GPUs > mx[0] {
			return fmt.Sprintf("group %q asks %d GPUs per allocation; the largest schedulable node%s has %d", g.Name, g.GPUs, poolSuffix(q.pool), mx[0])
		}
		if topo == policy.TopologyNVLink && g.GPUs > mx[1] {
			return fmt.Sprintf("group %q asks %d NVLink-connected GPUs; the largest NVLink island%s has %d", g.Name, g.GPUs, poolSuffix(q.pool), mx[1])
		}
		for _, d := range g.Devices {
			if d.Count <= mx[2] {
				continue
			}
			if most, by := c.st.MaxBlockGPUs(q.pool, placement.BlockOf(d)); d.Count > most {
				return fmt.Sprintf("group %q task %q asks %d GPUs in one device block (%q), and no schedulable node%s has a device group of more than %d that it matches (%s%s)",
					g.Name, d.Task, d.Count, d.Name, poolSuffix(q.pool), most, cluster.DeviceGroupRule, placement.GroupByHint(by))
			}
		}
	}
	return ""
}

// mayBackfill: may the job use GPUs reserved for blocked jobs ahead of it?
// Only if, for every reservation, it ends (by walltime) before the
// reservation is needed, or it is preemptible by the reserving job.
func (c *cycle) mayBackfill(q *queued) bool {
	if len(c.reservations) == 0 || !c.pol.Backfill.Enabled {
		return false
	}
	wall := q.walltime
	pre := q.preemptible
	for _, r := range c.reservations {
		endsBefore := wall > 0 && !r.until.IsZero() && !c.now.Add(wall).After(r.until)
		preemptibleByIt := pre && c.pol.MayPreempt(r.tier, q.tier)
		if !endsBefore && !preemptibleByIt {
			return false
		}
	}
	return true
}

func (c *cycle) admit(q *queued, exp *Explanation, res placement.Result, backfilled bool) {
	j := q.job
	adm := Admission{JobID: j.ID, ModifyIndex: j.ModifyIndex, Pool: q.pool, Score: q.score, Backfilled: backfilled}
	pools := map[string]bool{}
	req := c.request(q, false)
	for gi, g := range j.Groups {
		gp := GroupPlacement{Group: g.Name}
		for _, sl := range res.Groups[gi] {
			n := c.st.Node(sl.Node)
			pools[n.Pool] = true
			ap := AllocPlacement{NodeID: n.ID, GPUs: c.st.GPUIDs(sl)}
			for m := sl.Mask; m != 0; m &= m - 1 {
				ap.Islands = append(ap.Islands, n.GPUs[bits.TrailingZeros64(m)].Island)
			}
			if len(g.Devices) > 0 {
				split, ok := c.st.SplitBlocks(sl, req.Groups[gi])
				if !ok {
					// Place only returns slots its blocks can split;
					// never pin what a block cannot get.
					c.e.logger.Error("placement without a device-block split; not admitting", "job", j.ID, "group", g.Name)
					return
				}
				for bi, d := range g.Devices {
					ap.Blocks = append(ap.Blocks, BlockPlacement{Task: d.Task, Index: d.Index,
						GPUs: c.st.GPUIDs(placement.Slot{Node: sl.Node, Mask: split[bi]})})
				}
			}
			gp.Allocs = append(gp.Allocs, ap)
		}
		adm.Groups = append(adm.Groups, gp)
	}
	adm.Warnings = blockWarnings(j)
	if adm.Pool == "" {
		if len(pools) == 1 {
			for p := range pools {
				adm.Pool = p
			}
		} else if len(pools) > 1 {
			adm.Pool = "all"
		}
	}
	c.plan.Admissions = append(c.plan.Admissions, adm)
	var held []AllocPlacement
	for _, g := range adm.Groups {
		held = append(held, g.Allocs...)
	}
	c.e.pending[j.ID] = pendingAdmission{at: c.now, allocs: held, groups: adm.Groups, warnings: adm.Warnings}
	delete(c.e.bindings, j.ID)
	c.projectGPUs[q.project] += q.gpus
	c.headroomAdmit(q, res)
	exp.Status, exp.Reason, exp.Rejected = StatusAdmitted, "", nil
	exp.Placement, exp.Warnings = adm.Groups, adm.Warnings
	for _, w := range adm.Warnings {
		c.e.logger.Warn("admitting a task that will not see all its GPUs", "job", j.ID, "warning", w)
	}
	if backfilled {
		exp.Reason = "backfilled ahead of a reservation"
	}
}

// ExecDriver is the task driver that gives a task the GPUs of all its
// device blocks (see device.EnvBlockPrefix).
const ExecDriver = "impact-exec"

// blockWarnings names the tasks of a job with several GPU device blocks
// whose driver is not impact-exec: Nomad merges the blocks' visibility
// variables last-wins, so such a task sees only its last block's GPUs in
// CUDA_VISIBLE_DEVICES (its device nodes are all mounted).
func blockWarnings(j *cluster.Job) []string {
	var out []string
	for _, g := range j.Groups {
		blocks := map[string]int{}
		driver := map[string]string{}
		var tasks []string
		for _, d := range g.Devices {
			if blocks[d.Task] == 0 {
				tasks = append(tasks, d.Task)
			}
			blocks[d.Task]++
			driver[d.Task] = d.Driver
		}
		for _, t := range tasks {
			if blocks[t] > 1 && driver[t] != ExecDriver {
				out = append(out, fmt.Sprintf("group %q task %q has %d GPU device blocks and driver %q: Nomad merges their CUDA_VISIBLE_DEVICES last-wins, so the task sees only the last block's GPUs (impact-exec lists them all; or use one device block)",
					g.Name, t, blocks[t], driver[t]))
			}
		}
	}
	return out
}

// tryPreempt looks for victims for a job that does not fit. It first
// counts the GPUs of gangs already stopping (preemptions under way): if
// they suffice, the job waits for them instead of preempting more.
func (c *cycle) tryPreempt(q *queued, exp *Explanation) (preempting bool) {
	tier := c.pol.Tiers[q.tier]
	if tier == nil || (len(tier.MayPreempt) == 0 && !c.idleVictims) {
		return false
	}
	holders := c.st.Holders()
	var req placement.Request
	reqBuilt := false
	request := func() placement.Request {
		if !reqBuilt {
			req, reqBuilt = c.request(q, false), true
		}
		return req
	}

	// Preemptions under way.
	if c.stopping == nil {
		c.stopping = []int{}
		for h := range holders {
			if holders[h].Stopping {
				c.stopping = append(c.stopping, h)
			}
		}
		c.stoppingGPUs = -1
	}
	if c.stoppingGPUs < 0 {
		c.stoppingGPUs = 0
		for _, h := range c.stopping {
			if !c.claimed[h] {
				c.stoppingGPUs += holders[h].GPUs
			}
		}
	}
	cp := c.st.Checkpoint()
	var stopping []int
	// Releasing the stopping gangs frees at most their GPUs: when that
	// cannot make room, placing is not tried (most waiting jobs).
	if c.stoppingGPUs > 0 && c.st.FreeGPUs(q.pool)+c.stoppingGPUs >= q.gpus {
		for _, h := range c.stopping {
			if !c.claimed[h] {
				stopping = append(stopping, h)
				c.st.ReleaseHolder(h)
			}
		}
	}
	if len(stopping) > 0 {
		if res, ok := c.st.Place(request(), nil); ok {
			c.st.Rollback(cp)
			c.reserveSlots(res)
			used := c.slotsUse(res, stopping)
			c.claimedFor = c.claimedFor[:0]
			for _, h := range used {
				c.claim(h)
				c.claimedFor = append(c.claimedFor, h)
				exp.Victims = append(exp.Victims, holders[h].JobID)
			}
			c.bind(q, res)
			c.stopping = nil
			exp.Status = StatusPreempting
			exp.Reason = "waiting for preempted gangs to stop"
			exp.Rejected = nil
			return true
		}
	}
	c.st.Rollback(cp)

	if !c.pol.Preemption.Enabled {
		return false
	}
	if c.explain && len(c.young) > 0 {
		defer func() {
			if !preempting {
				exp.Reason = c.cat(exp.Reason, c.youngNote(q))
			}
		}()
	}
	if c.preemptors >= c.pol.Preemption.MaxPerCycle {
		if c.explain {
			exp.Reason = c.cat(exp.Reason, "; preemption budget of this cycle spent")
		}
		return false
	}
	if c.preemptAttempts >= maxPreemptAttemptsPerSuccess*c.pol.Preemption.MaxPerCycle {
		return false
	}
	cl := c.candidates(q)
	if c.st.FreeGPUs(q.pool)+cl.gpus < q.gpus {
		return false
	}
	gain := c.pol.Impact(q.job.Spec) * float64(q.gpus) * c.pol.Preemption.GainHorizon.Hours()
	if short := q.gpus - c.st.FreeGPUs(q.pool); short > 0 && gain <= cl.minPerGPU*float64(short) {
		// Even the cheapest victims, per GPU, would cost more than the
		// gain: no need to search.
		if c.explain {
			exp.Reason += fmt.Sprintf("; preemption would cost at least %.1f, more than its gain %.1f", cl.minPerGPU*float64(short), gain)
		}
		return false
	}
	if cl.index == nil {
		cl.index = preempt.NewIndex(c.st, q.pool, cl.cands)
		for _, cd := range cl.cands {
			if !cl.member[cd.Holder] {
				cl.index.Exclude(cd.Holder) // claimed before the index existed
			}
		}
	}
	c.preemptAttempts++
	cp = c.st.Checkpoint()
	victims, res, ok := cl.index.Select(c.st, request())
	c.st.Rollback(cp)
	if !ok {
		if c.explain {
			exp.Reason += "; preempting eligible gangs would not make room"
		}
		return false
	}
	victims, res = c.minimalVictims(request(), victims, res)
	if isGang(request()) {
		victims, res = c.replaceGang(request(), victims, res)
	}
	cost, lost := 0.0, 0.0
	for _, h := range victims {
		cost += c.victims[h].cost
		lost += c.victims[h].lost
	}
	if gain <= cost {
		if c.explain {
			exp.Reason += fmt.Sprintf("; preemption would cost %.1f, more than its gain %.1f", cost, gain)
		}
		return false
	}
	budget, mx := c.e.budgetOf(q.tier)
	if mx > 0 {
		if already := c.e.lostFrom(budget, c.now); already+lost > mx {
			if c.explain {
				which := "shared"
				if budget != "" {
					which = fmt.Sprintf("tier %q", budget)
				}
				exp.Reason += fmt.Sprintf("; preemption limit (%s budget): %.1f GPU-hours lost in the last hour, %.1f more would exceed %.1f", which, already, lost, mx)
			}
			return false
		}
	}
	c.preemptors++
	c.reserveSlots(res)
	c.claimedFor = append(c.claimedFor[:0], victims...)
	c.bind(q, res)
	for _, h := range victims {
		c.claim(h)
		hd := holders[h]
		v := c.victims[h]
		p := Preemption{
			JobID:            hd.JobID,
			GPUs:             hd.GPUs,
			Grace:            v.grace,
			CheckpointSignal: v.signal,
			RequeueExitCode:  v.requeue,
			Preemptor:        q.job.ID,
			Cost:             v.cost,
			LostGPUHours:     v.lost,
			Reason: fmt.Sprintf("preempted for %s (tier %s, score %.1f): gain %.1f > cost %.1f; %.2f GPU-hours of its work lost, counted from %s",
				q.job.ID, q.tier, q.score.Total, gain, cost, v.lost, lostBasis(hd.Allocs, hd.Job.Spec.CheckpointInterval)),
		}
		if v.idle {
			p.Idle, p.IdleGPUHours, p.ReclaimedGPUHours = true, v.idleGPUh, v.reclaimed
			p.Reason += fmt.Sprintf(" up to going idle; %s, preemptible by its tier's idle action", v.idleNote)
			c.e.logger.Info("preempting idle job", "victim", hd.JobID, "preemptor", q.job.ID, "gpus", hd.GPUs,
				"idle_since", v.idleSince, "idle_gpu_hours", v.idleGPUh, "reclaimed_gpu_hours", v.reclaimed, "cost", v.cost, "gain", gain)
		}
		for _, a := range hd.Allocs {
			p.Allocs = append(p.Allocs, a.ID)
			c.e.inflight[a.ID] = inflightStop{job: hd.JobID, decided: c.now, expires: c.now.Add(v.grace)}
		}
		c.plan.Preemptions = append(c.plan.Preemptions, p)
		c.e.logger.Debug("preempting gang", "victim", hd.JobID, "preemptor", q.job.ID, "gpus", hd.GPUs,
			"cost", v.cost, "lost_gpu_hours", v.lost, "gain", gain)
		c.e.losses = append(c.e.losses, loss{at: c.now, gpuHours: v.lost, job: hd.JobID, budget: budget})
		exp.Victims = append(exp.Victims, hd.JobID)
	}
	exp.Status = StatusPreempting
	if c.explain {
		exp.Reason = fmt.Sprintf("preempting %d gang(s): %s", len(victims), strings.Join(exp.Victims, ", "))
	}
	exp.Rejected = nil
	return true
}

// minimalVictims drops the victims that later choices of the search made
// unnecessary: the search frees room one allocation at a time, cheapest
// first, so a cheap gang taken for the first allocation may be useless
// once a bigger one is released for the next (a 2x8 preemptor taking a
// 3x8 and a 2x4 gang where the 3x8 alone frees enough). Each victim,
// costliest first, is given back its GPUs; if the whole request still
// places on what the others free, it stays running. The result is
// minimal: no victim left could be spared. The preemptor is then placed
// as an admission would place it on what the remaining victims free.
func (c *cycle) minimalVictims(req placement.Request, victims []int, res placement.Result) ([]int, placement.Result) {
	if len(victims) < 2 {
		return victims, res
	}
	holders := c.st.Holders()
	cp := c.st.Checkpoint()
	defer c.st.Rollback(cp)
	for _, h := range victims {
		c.st.ReleaseHolder(h)
	}
	order := slices.Clone(victims)
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(c.victims[b].cost, c.victims[a].cost), cmp.Compare(holders[b].GPUs, holders[a].GPUs),
			strings.Compare(holders[a].JobID, holders[b].JobID))
	})
	spared := map[int]bool{}
	for _, h := range order {
		if len(spared) == len(victims)-1 {
			break
		}
		back := c.st.Checkpoint()
		for _, sl := range holders[h].Slots {
			c.st.Take(sl)
		}
		fit := c.st.Checkpoint()
		if _, ok := c.st.Place(req, nil); ok {
			c.st.Rollback(fit)
			spared[h] = true
			continue
		}
		c.st.Rollback(back)
	}
	if len(spared) == 0 {
		return victims, res
	}
	whole, ok := c.st.Place(req, nil)
	if !ok {
		return victims, res // cannot happen: the last check placed it
	}
	var kept []int
	for _, h := range victims {
		if !spared[h] {
			kept = append(kept, h)
		}
	}
	// The placement may not touch every remaining victim (it could sit on
	// GPUs that were free anyway): those are spared too.
	if used := c.slotsUse(whole, kept); len(used) > 0 {
		kept = used
	}
	return kept, whole
}

// isGang: does the request place some group as more than one allocation?
func isGang(req placement.Request) bool {
	for _, g := range req.Groups {
		if g.Count > 1 && g.GPUs > 0 {
			return true
		}
	}
	return false
}

// replaceGang re-places a gang on the GPUs the chosen victims free (and
// those already free) as a whole, the way an admission is placed: fewest
// nodes, then a shared switch or rack, best fit. The victim search places
// one allocation at a time, cheapest node first, which scatters a
// multi-node gang. Victims the new placement does not touch are spared.
// When the whole-gang placement fails or is no better, the search's own
// stands.
func (c *cycle) replaceGang(req placement.Request, victims []int, res placement.Result) ([]int, placement.Result) {
	cp := c.st.Checkpoint()
	defer c.st.Rollback(cp)
	for _, h := range victims {
		c.st.ReleaseHolder(h)
	}
	whole, ok := c.st.Place(req, nil)
	if !ok {
		return victims, res
	}
	// Only an improvement is taken: fewer victims, or fewer nodes. An
	// equal one would just move the preemptor's reservation around.
	spared := c.slotsUse(whole, victims)
	if len(spared) < len(victims) || resultNodes(whole) < resultNodes(res) {
		return spared, whole
	}
	return victims, res
}

// resultNodes counts the distinct nodes of a placement.
func resultNodes(res placement.Result) int {
	var seen []int
	for _, g := range res.Groups {
		for _, sl := range g {
			if !slices.Contains(seen, sl.Node) {
				seen = append(seen, sl.Node)
			}
		}
	}
	return len(seen)
}

// candidates lists the gangs a job may preempt (by its tier and pool), and
// their GPUs. Lists are built once per cycle per tier and pool; claim
// removes a victim from all of them.
func (c *cycle) candidates(q *queued) *candList {
	keptOut := c.headroomKeepsOut(q)
	key := tierPool{q.tier, q.pool}
	if keptOut {
		// Headroom nodes shield their holders from this job: its own list.
		key.pool += "\x00kept-out"
	}
	if cl, ok := c.candCache[key]; ok {
		return cl
	}
	holders := c.st.Holders()
	var cands []preempt.Candidate
	gpus := 0
	minPer := 0.0
	for h, v := range c.victims {
		if !(v.ok || v.young && c.headroomWaives(q, h)) || c.claimed[h] || !c.mayPreemptVictim(q.tier, &c.victims[h]) {
			continue
		}
		if q.pool != "" && !c.holderInPool(h, q.pool) {
			continue
		}
		if keptOut && c.headroomShields(q, h) {
			continue
		}
		cands = append(cands, preempt.Candidate{Holder: h, Cost: v.cost})
		gpus += holders[h].GPUs
		if per := v.cost / float64(max(1, holders[h].GPUs)); len(cands) == 1 || per < minPer {
			minPer = per
		}
	}
	if c.candCache == nil {
		c.candCache = map[tierPool]*candList{}
	}
	// minPerGPU stays a valid lower bound as victims are claimed (the
	// minimum over fewer candidates can only be higher).
	cl := &candList{cands: cands, gpus: gpus, minPerGPU: minPer, member: map[int]bool{}}
	for _, cd := range cands {
		cl.member[cd.Holder] = true
	}
	c.candCache[key] = cl
	return cl
}

// claim marks a gang as taken for a preemptor in this cycle: it is no
// longer a candidate for anyone else.
func (c *cycle) claim(h int) {
	if c.claimed[h] {
		return
	}
	c.claimed[h] = true
	c.stoppingGPUs = -1
	clear(c.youngNotes)
	c.lastYoungOK = false
	for _, cl := range c.candCache {
		if cl.member[h] {
			delete(cl.member, h)
			cl.gpus -= c.st.Holders()[h].GPUs
			if cl.index != nil {
				cl.index.Exclude(h)
			}
		}
	}
}

type candList struct {
	cands  []preempt.Candidate
	member map[int]bool
	gpus   int
	// minPerGPU is the lowest cost per GPU among the candidates: a lower
	// bound on what freeing n GPUs costs.
	minPerGPU float64
	index     *preempt.Index // built on first victim search
}

func (c *cycle) holderInPool(h int, pool string) bool {
	for _, sl := range c.st.Holders()[h].Slots {
		if c.st.PoolOf(sl.Node) == pool {
			return true
		}
	}
	return false
}

// slotsUse returns the holders among hs whose GPUs the result uses.
func (c *cycle) slotsUse(res placement.Result, hs []int) []int {
	var out []int
	holders := c.st.Holders()
	for _, h := range hs {
		hit := false
		for _, hsl := range holders[h].Slots {
			for _, g := range res.Groups {
				for _, sl := range g {
					if sl.Node == hsl.Node && sl.Mask&hsl.Mask != 0 {
						hit = true
					}
				}
			}
		}
		if hit {
			out = append(out, h)
		}
	}
	return out
}

func (c *cycle) reserveSlots(res placement.Result) {
	for _, g := range res.Groups {
		for _, sl := range g {
			c.st.Reserve(sl)
		}
	}
}

// reserve gives a blocked job a reservation: the GPUs it would get at the
// earliest time running work is expected to end (by walltime). It releases
// running gangs in order of expected end in a scratch transaction until the
// job fits; the GPUs of that placement are withheld from later jobs unless
// they may backfill.
func (c *cycle) reserve(q *queued, exp *Explanation) {
	if c.endOrder == nil {
		c.endOrder = c.holdersByEnd()
	}
	holders := c.st.Holders()
	req := c.request(q, false)
	cp := c.st.Checkpoint()
	next := q.gpus
	var found placement.Result
	var until time.Time
	ok := false
	for i := 0; ; i++ {
		h, more := c.endOrder.at(i)
		if !more {
			break
		}
		if c.claimed[h] {
			continue
		}
		c.st.ReleaseHolder(h)
		free := c.st.FreeGPUs(q.pool)
		if free < next {
			continue
		}
		if res, fit := c.st.Place(req, nil); fit {
			found, ok = res, true
			until = c.expectedEnd(&holders[h])
			break
		}
		// Fragmented: try again only once noticeably more is free, so the
		// shadow schedule costs a few placements, not one per gang.
		next = free + max(1, q.gpus/4)
	}
	c.st.Rollback(cp)
	if !ok {
		// Every holder was released and it still does not fit: the job's
		// own constraints or size rule the pool's nodes out, or earlier
		// reservations this cycle hold what would fit.
		if c.explain {
			exp.Reason += "; no reservation possible: it does not fit even once all running work has ended (its constraints or size rule out the pool's nodes, or earlier reservations hold them)"
		}
		return
	}
	c.reserveSlots(found)
	c.reservations = append(c.reservations, reservation{jobID: q.job.ID, tier: q.tier, until: until})
	if c.explain {
		c.resNotes = append(c.resNotes, c.reservationNote())
	}
	exp.Status = StatusReserved
	exp.ReservedUntil = until
	if !c.explain {
		return
	}
	if until.IsZero() {
		exp.Reason += "; GPUs reserved (time unknown: running work has no walltime)"
	} else {
		exp.Reason += fmt.Sprintf("; GPUs reserved, expected free by %s", until.UTC().Format(time.RFC3339))
	}
}

// reservationNote tells jobs that may not backfill why reserved GPUs are
// not theirs; built once per reservation, shared by every waiting job.
func (c *cycle) reservationNote() string {
	var b strings.Builder
	b.WriteString("; some GPUs are reserved for ")
	for i, r := range c.reservations {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(r.jobID)
		if !r.until.IsZero() {
			fmt.Fprintf(&b, " (needed by %s)", r.until.UTC().Format(time.RFC3339))
		}
	}
	b.WriteString(": a job may use them only if its impact_walltime ends before they are needed, or it is preemptible by the reserving job")
	return b.String()
}

// expectedEnd of a gang: now when stopping, start + walltime when known
// (never before now), zero when unknown.
func (c *cycle) expectedEnd(hd *placement.Holder) time.Time {
	if hd.Stopping {
		return c.now
	}
	if hd.Job == nil || hd.Job.Spec.Walltime <= 0 {
		return time.Time{}
	}
	end := earliestStart(hd.Allocs).Add(hd.Job.Spec.Walltime)
	if end.Before(c.now) {
		return c.now
	}
	return end
}

// endKey is a holder's place in the order of expected ends.
type endKey struct {
	h     int
	known bool
	end   int64
	start int64
}

// endOrder yields the holders by expected end (known ends first, earliest
// first; unknown ends oldest first; then job ID). A reservation releases
// holders in that order only until the job fits, mostly a few of
// thousands, so the order is drawn from a heap as far as it is read
// rather than sorted whole.
type endOrder struct {
	holders []placement.Holder
	heap    []endKey
	sorted  []int
}

func (c *cycle) holdersByEnd() *endOrder {
	holders := c.st.Holders()
	o := &endOrder{holders: holders, heap: make([]endKey, len(holders))}
	for i := range holders {
		end := c.expectedEnd(&holders[i])
		o.heap[i] = endKey{h: i, known: !end.IsZero(), end: end.UnixNano(), start: earliestStart(holders[i].Allocs).UnixNano()}
	}
	for i := len(o.heap)/2 - 1; i >= 0; i-- {
		o.down(i)
	}
	return o
}

// at returns the i-th holder by expected end; false past the last.
func (o *endOrder) at(i int) (int, bool) {
	for len(o.sorted) <= i {
		n := len(o.heap)
		if n == 0 {
			return 0, false
		}
		o.sorted = append(o.sorted, o.heap[0].h)
		o.heap[0] = o.heap[n-1]
		o.heap = o.heap[:n-1]
		o.down(0)
	}
	return o.sorted[i], true
}

func (o *endOrder) less(a, b endKey) bool {
	if a.known != b.known {
		return a.known
	}
	if a.known && a.end != b.end {
		return a.end < b.end
	}
	// Unknown ends: oldest first is the best guess.
	if a.start != b.start {
		return a.start < b.start
	}
	return o.holders[a.h].JobID < o.holders[b.h].JobID
}

func (o *endOrder) down(i int) {
	h := o.heap
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && o.less(h[r], h[l]) {
			m = r
		}
		if !o.less(h[m], h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// accrue charges each project the GPU time its allocations used since the
// previous cycle: the running ones (from the snapshot) up to now, and the
// ones that finished meanwhile (the store's finished log) up to their end,
// so that an allocation that started and ended between two cycles is
// charged too. The first cycle charges nothing: usage before it is what
// WithUsage or WithMemory restored.
func (e *Engine) accrue(snap *cluster.Snapshot, holders []placement.Holder, now time.Time) {
	last := e.lastCycle
	finished, next := snap.FinishedSince(e.finishedSeq)
	e.finishedSeq = next
	if last.IsZero() {
		e.lastCycle = now
		return
	}
	if !now.After(last) {
		return
	}
	type key struct {
		project  string
		from, to int64
	}
	sums := map[key]int{}
	charge := func(project string, gpus int, start, end time.Time) {
		from := last
		if start.After(from) {
			from = start
		}
		if end.After(now) {
			end = now
		}
		if gpus > 0 && end.After(from) {
			sums[key{project, from.UnixNano(), end.UnixNano()}] += gpus
		}
	}
	for i := range holders {
		hd := &holders[i]
		if hd.Job == nil || hd.Job.SpecErr != nil {
			continue
		}
		project := e.pol.ProjectName(hd.Job.Spec)
		for _, a := range hd.Allocs {
			charge(project, len(a.GPUs), a.Start, now)
		}
	}
	for _, f := range finished {
		charge(e.pol.ProjectName(policy.Spec{Project: f.Project}), f.GPUs, f.Start, f.End)
	}
	keys := make([]key, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(strings.Compare(a.project, b.project), cmp.Compare(a.from, b.from), cmp.Compare(a.to, b.to))
	})
	for _, k := range keys {
		e.usage.AddInterval(k.project, sums[k], time.Unix(0, k.from), time.Unix(0, k.to))
	}
	e.lastCycle = now
}

// expireInflight forgets ordered preemptions whose allocations are gone, or
// that the adapter never carried out within the TTL.
func (e *Engine) expireInflight(snap *cluster.Snapshot, now time.Time) {
	for id, st := range e.inflight {
		if _, ok := snap.Alloc(id); !ok || now.Sub(st.expires) > e.opts.inflightTTL {
			delete(e.inflight, id)
		}
	}
	keep := e.losses[:0]
	for _, l := range e.losses {
		if now.Sub(l.at) < time.Hour {
			keep = append(keep, l)
		}
	}
	e.losses = keep
}
