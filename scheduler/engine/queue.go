package engine

import (
	"cmp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/internal/buffer"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// queueCache keeps, per shard of the snapshot's job table, what a cycle
// derives from the shard's jobs that does not depend on the instant: the
// queued jobs with their tier, project, pool, GPUs and parking reason, and
// the projects with work. The store copies a shard before changing it
// (cluster.ShardKey), so a cycle redoes only the shards whose key changed
// since the previous one: with thousands of running and waiting jobs and a
// few updates between cycles, the queue is rebuilt from a handful of
// shards. Scores depend on now and on usage, so they are computed every
// cycle.
type queueCache struct {
	// table is the job table the shards were last brought up to: equal,
	// no shard changed.
	table cluster.TableKey
	keys  []cluster.ShardKey
	// queued: the JobQueued jobs of each shard (score not filled).
	queued [][]queued
	// running: the JobRunning jobs of each shard (for watchGangs and
	// runningFacts).
	running [][]*cluster.Job
	// runFacts: per shard, the spec facts of each job in running (nil:
	// invalid metadata); managedFacts finds a job's by its shard and
	// place there (runningFacts), not by spec key.
	runFacts [][]*specFacts
	// projs: the distinct projects (indexes) of each shard's jobs with
	// valid metadata, running or queued.
	projs [][]int32
	// projIdx interns project names; projNames[i] is project i.
	projIdx   map[string]int32
	projNames []string
	// projShards counts, per project, the shards with jobs of it in projs
	// (kept by refreshShard): the projects with work are those counted.
	projShards []int32
	// queuedLen is the number of queued jobs in all shards.
	queuedLen int
	// sortBuf is the queue sort's scratch space, kept across cycles.
	sortBuf radixBuf
	// facts memoizes the policy's answers per spec key (specFacts).
	facts map[specKey]*specFacts
	// prevLen is the number of valid queued jobs ordered last cycle (their
	// rank fields index that order).
	prevLen int
	// oneArray: every queued entry is in one array (refreshQueue redid
	// every shard that has any, in shared arrays), so the cycle reads
	// them in place (layOut).
	oneArray bool
	// blank is the facts of a job whose metadata does not parse (no tier,
	// no project).
	blank specFacts
}

// runningFacts returns the spec facts refreshShard kept for a running
// job of the job table, and false for a job object the table does not
// hold (or holds as not running).
func (qc *queueCache) runningFacts(snap *cluster.Snapshot, j *cluster.Job) (*specFacts, bool) {
	si := snap.ShardOf(j.ID)
	if si >= len(qc.running) {
		return nil, false
	}
	for k, rj := range qc.running[si] {
		if rj == j {
			return qc.runFacts[si][k], true
		}
	}
	return nil, false
}

func (qc *queueCache) project(name string) int32 {
	if i, ok := qc.projIdx[name]; ok {
		return i
	}
	if qc.projIdx == nil {
		qc.projIdx = map[string]int32{}
	}
	i := int32(len(qc.projNames))
	qc.projIdx[name] = i
	qc.projNames = append(qc.projNames, name)
	qc.projShards = append(qc.projShards, 0)
	return i
}

// refresh rebuilds the cache of one shard from its jobs, in memory
// taken from sl.
func (o *orderer) refreshShard(i int, key cluster.ShardKey, jobs []*cluster.Job, sl *shardSlab) {
	qc := &o.c.e.queue
	qc.keys[i] = key
	n, r := 0, 0
	for _, j := range jobs {
		switch j.State {
		case cluster.JobQueued:
			n++
		case cluster.JobRunning:
			r++
		}
	}
	q := buffer.Window(&sl.queued, n, 0)
	projs := sl.projBuf[:0]
	var run []*cluster.Job
	var runFacts []*specFacts
	if r > 0 {
		run, runFacts = buffer.Window(&sl.running, r, 0), buffer.Window(&sl.runFacts, r, 0)
	}
	for _, j := range jobs {
		var f *specFacts
		if j.SpecErr == nil {
			f = o.c.specFacts(&j.Spec)
			if !slices.Contains(projs, f.proj) {
				projs = append(projs, f.proj)
			}
		}
		if j.State == cluster.JobRunning {
			run = append(run, j)
			runFacts = append(runFacts, f)
		}
		if j.State != cluster.JobQueued {
			continue
		}
		q = append(q, queued{job: j, f: f, gpus: j.GPUs(), rank: -1})
		e := &q[len(q)-1]
		e.tie, e.tieOK = tieOf(j)
		e.id, e.prio, e.walltime = j.ID, int32(j.Priority), j.Spec.Left()
		e.setTimes(j)
		switch {
		case j.SpecErr != nil:
			e.parked, e.f = true, &qc.blank
		case f.bad != "":
			e.parked = true
		default:
			for gi := range j.Groups {
				g := &j.Groups[gi]
				if g.GPUs == 0 || g.Count == 0 {
					continue
				}
				e.maxAlloc = max(e.maxAlloc, clamp32(g.GPUs))
				for _, d := range g.Devices {
					e.maxBlock = max(e.maxBlock, clamp32(d.Count))
					e.devCons = e.devCons || len(d.Constraints) > 0
				}
				topo := g.Spec.Topology
				if topo == jobspec.TopologyUnset {
					topo = j.Spec.Topology
				}
				if topo == jobspec.TopologyNVLink {
					e.maxNVLink = max(e.maxNVLink, clamp32(g.GPUs))
				}
			}
			e.pool = j.Spec.Pool
			if e.pool == "" {
				e.pool = o.c.e.opts.defaultPool
			}
		}
	}
	for _, p := range qc.projs[i] {
		qc.projShards[p]--
	}
	for _, p := range projs {
		qc.projShards[p]++
	}
	sl.projBuf = projs
	projs = append(buffer.Window(&sl.projs, len(projs), 0), projs...)
	qc.queuedLen += len(q) - len(qc.queued[i])
	qc.queued[i] = q
	qc.projs[i] = projs
	qc.running[i] = run
	qc.runFacts[i] = runFacts
}

// qkey is a queued job's sort key, kept in a flat slice of small values
// so that sorting thousands of jobs compares in place: the total, then
// (ties are common: equal tier, project and submit minute) the Nomad
// priority and submit second packed in tie, and only then the job itself
// (nanoseconds, ID).
type qkey struct {
	total float64
	tie   uint64
	q     *queued
}

// tieOf packs priority (higher first) and submit second (earlier first)
// into one ascending number; ok is false out of range (priorities beyond
// 2^20, submit times before 1970), when the caller must leave ties to
// cmpQueued.
func tieOf(j *cluster.Job) (uint64, bool) {
	const prioBits, secBits = 20, 43
	sec := j.Submit.Unix()
	if j.Priority < 0 || j.Priority >= 1<<prioBits || sec < 0 || sec >= 1<<secBits {
		return 0, false
	}
	return uint64(1<<prioBits-1-j.Priority)<<secBits | uint64(sec), true
}

// cmpQkey orders keys as cmpQueued after the totals would.
func cmpQkey(x, y qkey) int {
	if x.total != y.total {
		if x.total > y.total {
			return -1
		}
		return 1
	}
	if x.tie != y.tie {
		if x.tie < y.tie {
			return -1
		}
		return 1
	}
	return cmpQueued(x.q, y.q)
}

// cmpQueued orders jobs of equal score: Nomad priority, then submit time,
// then ID.
func cmpQueued(x, y *queued) int {
	if x.prio != y.prio {
		return int(y.prio) - int(x.prio)
	}
	if x.times&y.times&submitOK != 0 {
		if x.submitNs != y.submitNs {
			return cmp.Compare(x.submitNs, y.submitNs)
		}
	} else if c := x.submitTime().Compare(y.submitTime()); c != 0 {
		return c
	}
	return strings.Compare(x.id, y.id)
}

// orderer is the order-the-queue step: it brings the queue cache (on
// the engine: it outlives the cycle) up to the snapshot, scores the
// queued jobs at now and sorts them (buildQueue), and lays them out for
// deciding (layOut). It owns the cycle's scorer.
type orderer struct {
	c *cycle
	// scorer scores the queue at now, with each project's fair-share
	// deficit by project index (buildQueue).
	scorer   *policy.Scorer
	deficits []float64
	// oldest is, per pool and tier, the submit time of the oldest valid
	// job waiting: where the shortest-first term's overdue line lies
	// (buildQueue; nil while the policy's shortest_first is off).
	oldest map[poolTier]time.Time
}

// poolTier is a tier's queue in one pool.
type poolTier struct{ pool, tier string }

// oldestWaiting finds, per pool and tier, the submit time of the oldest
// valid job among the queue cache's entries.
func oldestWaiting(shards [][]queued) map[poolTier]time.Time {
	out := map[poolTier]time.Time{}
	for _, sh := range shards {
		for k := range sh {
			q := &sh[k]
			if q.parked {
				continue
			}
			key, t := poolTier{q.pool, q.f.tier}, q.submitTime()
			if old, ok := out[key]; !ok || t.Before(old) {
				out[key] = t
			}
		}
	}
	return out
}

// run orders the queue and lays it out for deciding, the headroom step
// counting its tiers' arrivals on the way. Judging the running gangs
// runs beside it: both read the same state and write disjoint parts of
// the cycle, and the spec facts both need are worked out before
// (managedFacts; the queue's came with refreshQueue).
func (o *orderer) run(facts []*specFacts) *queueLayout {
	queue := o.buildQueue()
	o.c.hr = newHeadroom(o.c, queue, facts)
	return o.layOut(queue, o.c.e.queue.oneArray)
}

// refreshQueue brings the queue cache up to the snapshot: the shards
// whose key changed are derived again (refreshShard). It touches only the
// queue cache and reads only the snapshot and the policy, so run lets it
// overlap with building the placement state.
func (o *orderer) refreshQueue() {
	qc := &o.c.e.queue
	if table := o.c.snap.JobsKey(); table == qc.table {
		return
	} else {
		qc.table = table
	}
	n := o.c.snap.NumShards()
	if len(qc.keys) != n {
		qc.keys = make([]cluster.ShardKey, n)
		qc.blank.proj = -1
		qc.queued = make([][]queued, n)
		qc.projs = make([][]int32, n)
		qc.running = make([][]*cluster.Job, n)
		qc.runFacts = make([][]*specFacts, n)
	}
	changed, kept := 0, 0
	for i := 0; i < n; i++ {
		if o.c.snap.JobShardKey(i) != qc.keys[i] {
			changed++
		} else if len(qc.queued[i]) > 0 {
			kept++
		}
	}
	var sl shardSlab
	qc.oneArray = changed >= slabFromShards && kept == 0
	if changed >= slabFromShards {
		// Many shards to redo (a new engine: all of them): their entries
		// are windows of one array each, sized by a first pass over the
		// jobs' states (which also brings the jobs into the processor's
		// cache for the second).
		nq, nr := 0, 0
		for i := 0; i < n; i++ {
			if o.c.snap.JobShardKey(i) == qc.keys[i] {
				continue
			}
			_, jobs := o.c.snap.JobShard(i)
			for _, j := range jobs {
				switch j.State {
				case cluster.JobQueued:
					nq++
				case cluster.JobRunning:
					nr++
				}
			}
		}
		// Projects: a few per shard; a shard with more gets a slice of
		// its own (buffer.Window).
		sl = shardSlab{queued: make([]queued, nq), running: make([]*cluster.Job, nr), runFacts: make([]*specFacts, nr),
			projs: make([]int32, changed*4)}
	}
	for i := 0; i < n; i++ {
		if o.c.snap.JobShardKey(i) != qc.keys[i] {
			key, jobs := o.c.snap.JobShard(i)
			o.refreshShard(i, key, jobs, &sl)
		}
	}
}

// slabFromShards is the number of changed shards from which refreshQueue
// lays their entries out in shared arrays: a new engine refreshes every
// shard, over a thousand small allocations each of entries, running jobs
// and their facts, and projects; a warm cycle a few, each in slices of
// its own. An array lives while any window of it does: a new engine's
// stays until every shard it holds has been redone, so the queue cache
// holds at most one such array beside its current entries.
const slabFromShards = 64

// shardSlab is the memory refreshShard takes its slices from: windows
// of shared arrays (empty ones: slices of their own).
type shardSlab struct {
	queued   []queued
	running  []*cluster.Job
	runFacts []*specFacts
	projs    []int32
	// projBuf collects a shard's projects before they are copied out.
	projBuf []int32
}

// buildQueue scores the queued jobs and sorts them: score, then Nomad
// priority, then submit time, then ID (so equal input gives equal order).
// It returns the queue cache's entries in that order (layOut copies them
// so). The queue cache is refreshed (refreshQueue) before.
func (o *orderer) buildQueue() []*queued {
	qc := &o.c.e.queue
	total := qc.queuedLen
	var names []string
	for p, n := range qc.projShards {
		if n > 0 {
			names = append(names, qc.projNames[p])
		}
	}
	sort.Strings(names)
	o.scorer = o.c.pol.NewScorer(o.c.mem.usage(), o.c.now, names)
	o.deficits = make([]float64, len(qc.projNames))
	for _, name := range names {
		o.deficits[qc.projIdx[name]] = o.scorer.Deficit(name)
	}
	o.oldest = nil
	if o.c.pol.ShortestFirst.Weight > 0 {
		o.oldest = oldestWaiting(qc.queued)
	}
	// Scores move little between cycles, so the jobs are laid out in the
	// previous cycle's order (new ones last) before sorting: a short queue's
	// insertion sort then mostly confirms runs already in order (a long
	// queue's radix sort costs the same either way; see sortQueue).
	prev := qc.prevLen
	keys := buffer.Zeroed(&o.c.e.scratch.keys, total+prev)[:prev]
	var parked []*queued
	packed := true
	for i := range qc.queued {
		sh := qc.queued[i]
		for k := range sh {
			q := &sh[k]
			if q.parked {
				parked = append(parked, q)
				continue
			}
			packed = packed && q.tieOK
			q.total = o.scoreOf(q).Total
			if q.rank >= 0 && q.rank < int32(prev) && keys[q.rank].q == nil {
				keys[q.rank] = qkey{total: q.total, tie: q.tie, q: q}
			} else {
				keys = append(keys, qkey{total: q.total, tie: q.tie, q: q})
			}
		}
	}
	keys = slices.DeleteFunc(keys, func(k qkey) bool { return k.q == nil })
	if !packed {
		for i := range keys {
			keys[i].tie = 0
		}
	}
	// IDs are unique, so this is a total order: no stable sort needed.
	sortQueue(keys, &qc.sortBuf, prev > 0)
	// Parked jobs (bad metadata) come last, score zero.
	slices.SortFunc(parked, cmpQueued)
	qc.prevLen = len(keys)
	out := make([]*queued, 0, len(keys)+len(parked))
	for i := range keys {
		keys[i].q.rank = int32(i)
		out = append(out, keys[i].q)
	}
	return append(out, parked...)
}

// scoreOf is a valid queued job's score at the cycle's instant, every
// term of it: the queue keeps only the total (the terms are worked out
// again, exactly so, for the few readers of them: the explanations and
// admissions).
func (o *orderer) scoreOf(q *queued) policy.Score {
	w := policy.Waiting{Submit: q.submitTime(), Deadline: q.deadlineTime(), Walltime: q.walltime}
	if o.oldest != nil {
		w.Oldest = o.oldest[poolTier{q.pool, q.f.tier}]
	}
	return o.scorer.ScoreAt(w, q.f.impact, o.deficits[q.f.proj])
}
