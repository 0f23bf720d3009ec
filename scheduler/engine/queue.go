package engine

import (
	"slices"
	"sort"
	"strings"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
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
	keys []cluster.ShardKey
	// queued: the JobQueued jobs of each shard (score not filled).
	queued [][]queued
	// running: the JobRunning jobs of each shard (for watchGangs).
	running [][]*cluster.Job
	// projs: the distinct projects (indexes) of each shard's jobs with
	// valid metadata, running or queued.
	projs [][]int32
	// projIdx interns project names; projNames[i] is project i.
	projIdx   map[string]int32
	projNames []string
	// mark and gen give each cycle a fresh set of active projects.
	mark []uint64
	gen  uint64
	// prevLen is the number of valid queued jobs ordered last cycle (their
	// rank fields index that order).
	prevLen int
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
	qc.mark = append(qc.mark, 0)
	return i
}

// refresh rebuilds the cache of one shard from its jobs.
func (c *cycle) refreshShard(i int, key cluster.ShardKey, jobs []*cluster.Job) {
	qc := &c.e.queue
	qc.keys[i] = key
	var q []queued
	var projs []int32
	var run []*cluster.Job
	for _, j := range jobs {
		if j.State == cluster.JobRunning {
			run = append(run, j)
		}
		if j.SpecErr == nil {
			p := qc.project(c.pol.ProjectName(j.Spec))
			if !slices.Contains(projs, p) {
				projs = append(projs, p)
			}
		}
		if j.State != cluster.JobQueued {
			continue
		}
		e := queued{job: j, gpus: j.GPUs(), proj: -1, rank: -1}
		switch {
		case j.SpecErr != nil:
			e.parked = "bad impact metadata: " + j.SpecErr.Error()
		case c.pol.CheckSpec(j.Spec) != nil:
			e.parked = "bad impact metadata: " + c.pol.CheckSpec(j.Spec).Error()
		default:
			e.tier = c.pol.TierOf(j.Spec).Name
			e.project = c.pol.ProjectName(j.Spec)
			e.proj = qc.project(e.project)
			e.impact = c.pol.Impact(j.Spec)
			e.preemptible = c.pol.IsPreemptible(j.Spec)
			for gi := range j.Groups {
				g := &j.Groups[gi]
				if g.GPUs == 0 || g.Count == 0 {
					continue
				}
				e.maxAlloc = max(e.maxAlloc, g.GPUs)
				for _, d := range g.Devices {
					e.maxBlock = max(e.maxBlock, d.Count)
				}
				topo := g.Spec.Topology
				if topo == policy.TopologyUnset {
					topo = j.Spec.Topology
				}
				if topo == policy.TopologyNVLink {
					e.maxNVLink = max(e.maxNVLink, g.GPUs)
				}
			}
			e.quota = c.pol.ProjectOf(j.Spec).GPUQuota
			e.pool = j.Spec.Pool
			if e.pool == "" {
				e.pool = c.e.opts.defaultPool
			}
		}
		q = append(q, e)
	}
	qc.queued[i] = q
	qc.projs[i] = projs
	qc.running[i] = run
}

// qkey is a queued job's sort key, kept in a flat slice of small values
// so that sorting thousands of jobs compares in place; ties on the total
// (rare: ages differ) fall back to the job.
type qkey struct {
	total float64
	q     *queued
}

// cmpQueued orders jobs of equal score: Nomad priority, then submit time,
// then ID.
func cmpQueued(x, y *queued) int {
	if x.job.Priority != y.job.Priority {
		return y.job.Priority - x.job.Priority
	}
	if c := x.job.Submit.Compare(y.job.Submit); c != 0 {
		return c
	}
	return strings.Compare(x.job.ID, y.job.ID)
}

// buildQueue scores the queued jobs and sorts them: score, then Nomad
// priority, then submit time, then ID (so equal input gives equal order).
func (c *cycle) buildQueue() []*queued {
	qc := &c.e.queue
	n := c.snap.NumShards()
	if len(qc.keys) != n {
		qc.keys = make([]cluster.ShardKey, n)
		qc.queued = make([][]queued, n)
		qc.projs = make([][]int32, n)
		qc.running = make([][]*cluster.Job, n)
	}
	qc.gen++
	total := 0
	for i := 0; i < n; i++ {
		key, jobs := c.snap.JobShard(i)
		if key != qc.keys[i] {
			c.refreshShard(i, key, jobs)
		}
		total += len(qc.queued[i])
		for _, p := range qc.projs[i] {
			qc.mark[p] = qc.gen
		}
	}
	var names []string
	for p, g := range qc.mark {
		if g == qc.gen {
			names = append(names, qc.projNames[p])
		}
	}
	sort.Strings(names)
	scorer := c.pol.NewScorer(c.e.usage, c.now, names)
	deficits := make([]float64, len(qc.projNames))
	for _, name := range names {
		deficits[qc.projIdx[name]] = scorer.Deficit(name)
	}
	// Scores move little between cycles, so the jobs are laid out in the
	// previous cycle's order (new ones last) before sorting: the sort then
	// mostly confirms runs that are already in order.
	prev := qc.prevLen
	keys := make([]qkey, prev, total+prev)
	var parked []*queued
	for i := range qc.queued {
		sh := qc.queued[i]
		for k := range sh {
			q := &sh[k]
			if q.parked != "" {
				parked = append(parked, q)
				continue
			}
			q.score = scorer.ScoreWith(q.job.Spec, q.job.Submit, q.impact, deficits[q.proj])
			if q.rank >= 0 && q.rank < int32(prev) && keys[q.rank].q == nil {
				keys[q.rank] = qkey{q.score.Total, q}
			} else {
				keys = append(keys, qkey{q.score.Total, q})
			}
		}
	}
	keys = slices.DeleteFunc(keys, func(k qkey) bool { return k.q == nil })
	// IDs are unique, so this is a total order: no stable sort needed.
	slices.SortFunc(keys, func(x, y qkey) int {
		if x.total != y.total {
			if x.total > y.total {
				return -1
			}
			return 1
		}
		return cmpQueued(x.q, y.q)
	})
	// Parked jobs (bad metadata) come last, score zero.
	slices.SortFunc(parked, cmpQueued)
	qc.prevLen = len(keys)
	out := make([]*queued, 0, len(keys)+len(parked))
	for i := range keys {
		keys[i].q.rank = int32(i)
		out = append(out, keys[i].q)
	}
	out = append(out, parked...)
	return out
}
