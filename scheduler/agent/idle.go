package agent

import (
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// The utilisation layer acts: each device stats poll (utilization.go)
// becomes one utilisation sample per running allocation, queued here and
// handed to the engine at the start of the next cycle, on the cycle's
// goroutine (the engine is not safe for concurrent use). The engine decides
// what is idle or hung and what to do (engine/idle.go); the executor
// carries the reclaims out; this file also serves what was decided as
// metrics.

// maxPendingPolls bounds the polls queued between two cycles (a cycle
// stuck on Nomad must not let them pile up; the oldest are dropped, which
// only shortens the history the engine sees).
const maxPendingPolls = 256

// utilPoll is one poll's samples.
type utilPoll struct {
	at      time.Time
	samples []engine.AllocUtilization
}

// allocSamples turns a poll into per-allocation samples: the mean
// utilisation of each allocation's GPUs, unknown (-1) when any of them has
// no stats (missing stats never count as idle).
func allocSamples(snap *cluster.Snapshot, stats []GPUStat) []engine.AllocUtilization {
	type key struct{ node, dev string }
	known := make(map[key]float64, len(stats))
	for _, s := range stats {
		known[key{s.NodeID, s.DeviceID}] = s.Utilization
	}
	var out []engine.AllocUtilization
	for _, a := range snap.Allocs() {
		if len(a.GPUs) == 0 {
			continue
		}
		sum, ok := 0.0, true
		for _, g := range a.GPUs {
			u, has := known[key{a.NodeID, g}]
			if !has || u < 0 {
				ok = false
				break
			}
			sum += u
		}
		s := engine.AllocUtilization{AllocID: a.ID, JobID: a.JobID, GPUs: len(a.GPUs), Percent: -1}
		if ok {
			s.Percent = sum / float64(len(a.GPUs))
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AllocID < out[j].AllocID })
	return out
}

// utilQueue holds the device stats polls not yet handed to the engine:
// the poller adds them in its goroutine, the cycle feeds them in its own.
type utilQueue struct {
	mu    sync.Mutex
	polls []utilPoll
}

// add keeps a poll for the next cycle.
func (q *utilQueue) add(at time.Time, samples []engine.AllocUtilization) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.polls) >= maxPendingPolls {
		q.polls = append(q.polls[:0], q.polls[1:]...)
	}
	q.polls = append(q.polls, utilPoll{at: at, samples: samples})
}

// feed hands the queued polls to the engine, oldest first.
func (q *utilQueue) feed(eng *engine.Engine) {
	q.mu.Lock()
	polls := q.polls
	q.polls = nil
	q.mu.Unlock()
	for _, p := range polls {
		eng.ObserveUtilization(p.at, p.samples)
	}
}

// idleCollector serves the idle gauges of the last cycle: per job the
// seconds its GPUs have been below its tier's threshold, per pool the GPUs
// of jobs idle past their tier's duration. Like gpuCollector it is a
// collector so that a job's series disappears with the job.
type idleCollector struct {
	jobIdle, poolIdle *prometheus.Desc

	mu   sync.Mutex
	jobs map[string]float64
	gpus map[string]int
	set  bool
}

func newIdleCollector() *idleCollector {
	return &idleCollector{
		jobIdle:  prometheus.NewDesc("impact_job_idle_seconds", "Seconds the mean utilisation of a running job's GPUs has stayed below its tier's idle threshold (0: not below; absent: no utilisation known).", []string{"job"}, nil),
		poolIdle: prometheus.NewDesc("impact_idle_gpus", "GPUs held by running jobs idle for at least their tier's idle duration, by node pool.", []string{"pool"}, nil),
	}
}

func (c *idleCollector) update(running []engine.RunningJob) {
	jobs := map[string]float64{}
	gpus := map[string]int{}
	for _, r := range running {
		if r.Utilization < 0 {
			continue
		}
		jobs[r.JobID] = r.IdleFor.Seconds()
		if _, ok := gpus[r.Pool]; !ok {
			gpus[r.Pool] = 0
		}
		if r.Idle {
			gpus[r.Pool] += r.GPUs
		}
	}
	c.mu.Lock()
	c.jobs, c.gpus, c.set = jobs, gpus, true
	c.mu.Unlock()
}

func (c *idleCollector) clear() {
	c.mu.Lock()
	c.jobs, c.gpus, c.set = nil, nil, false
	c.mu.Unlock()
}

func (c *idleCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.jobIdle
	ch <- c.poolIdle
}

func (c *idleCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.set {
		return
	}
	for j, v := range c.jobs {
		ch <- prometheus.MustNewConstMetric(c.jobIdle, prometheus.GaugeValue, v, j)
	}
	for p, n := range c.gpus {
		ch <- prometheus.MustNewConstMetric(c.poolIdle, prometheus.GaugeValue, float64(n), p)
	}
}

// RecordIdle publishes a cycle's utilisation view of the running jobs
// (leader only; a standby has no samples and serves no idle series).
func (m *Metrics) RecordIdle(running []engine.RunningJob, leader bool) {
	if !leader {
		m.idle.clear()
		return
	}
	m.idle.update(running)
}

// RecordReclaimed counts GPU-hours freed from idle jobs (a reclaim or an
// idle preemption carried out): their GPUs x the rest of their
// impact_walltime less their impact_progress.
func (m *Metrics) RecordReclaimed(gpuHours float64) {
	m.m.IncrCounter(mIdleReclaimed, float32(gpuHours))
}

// withUtilization shows a running job's utilisation state in its entry.
func withUtilization(e *agentapi.Explanation, r *engine.RunningJob) {
	e.IdleAction = string(r.Action)
	if r.Utilization < 0 {
		return
	}
	u := r.Utilization
	e.Utilization = &u
	e.IdleSeconds = r.IdleFor.Seconds()
	e.IdleSince = r.IdleSince
	e.Idle, e.Hung, e.IdleNote = r.Idle, r.Hung, r.Note
}
