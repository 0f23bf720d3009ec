package agent

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// The utilisation layer: a goroutine of its own polls the device stats of
// the nodes with GPUs (through the UtilizationSource) every StatsInterval
// and publishes per-GPU, per-node and cluster gauges. It is apart from the
// scheduling loop on purpose: reading stats goes through Nomad's servers to
// every client, and a slow client must never delay a decision. It runs when
// Options.Utilization is set (production: nomad.DeviceStatsReader, the
// config's device_stats) and polls only while this agent leads, only ready
// nodes with GPUs; a node that cannot be read is logged and counted, and
// its series disappear instead of freezing.

// UtilizationStats is one poll's view of GPU utilisation.
type UtilizationStats struct {
	// GPUs with stats, by node name then GPU index.
	GPUs []GPUUtilization
	// Nodes maps a node name to the mean utilisation of its GPUs with
	// stats.
	Nodes map[string]float64
	// AllocatedMean is the mean utilisation of the GPUs held by
	// allocations, over AllocatedKnown of them whose stats are known; it
	// is meaningless when AllocatedKnown is 0.
	AllocatedMean  float64
	AllocatedKnown int
	// Jobs maps a job (cluster.JobKey) to the mean utilisation of the GPUs
	// its allocations hold, over those with stats: whether a job keeps the
	// GPUs it was given busy. Nomad's task-stats protocol has no GPU field,
	// so this is where per-job GPU use is reported.
	Jobs map[string]float64
}

// GPUUtilization is one GPU's stats, placed in the model.
type GPUUtilization struct {
	Node     string // node name (the ID when the node has none)
	DeviceID string
	Index    int
	// Allocated is true when an allocation holds the GPU.
	Allocated bool
	// Utilization in percent, memory in MiB; negative when unknown.
	Utilization                   float64
	MemoryUsedMiB, MemoryTotalMiB float64
}

// utilizationOf places the stats read in the snapshot: only GPUs the model
// knows count (a device the scheduler does not manage is not its business),
// and the cluster mean is over allocated GPUs, which is what says whether
// admitted work uses what it was given.
func utilizationOf(snap *cluster.Snapshot, stats []GPUStat) UtilizationStats {
	holder := map[gpuKey]string{} // GPU -> job holding it
	for _, a := range snap.Allocs() {
		for _, g := range a.GPUs {
			holder[gpuKey{a.NodeID, g}] = a.JobID
		}
	}
	known := map[gpuKey]GPUStat{}
	for _, s := range stats {
		known[gpuKey{s.NodeID, s.DeviceID}] = s
	}
	out := UtilizationStats{Nodes: map[string]float64{}, Jobs: map[string]float64{}}
	var allocated meanOf
	jobs := map[string]*meanOf{}
	for _, n := range snap.Nodes() {
		name := n.Name
		if name == "" {
			name = n.ID
		}
		var node meanOf
		for _, g := range n.GPUs {
			s, ok := known[gpuKey{n.ID, g.ID}]
			if !ok {
				continue
			}
			job, held := holder[gpuKey{n.ID, g.ID}]
			out.GPUs = append(out.GPUs, GPUUtilization{Node: name, DeviceID: g.ID, Index: g.Index, Allocated: held,
				Utilization: s.Utilization, MemoryUsedMiB: s.MemoryUsedMiB, MemoryTotalMiB: s.MemoryTotalMiB})
			if s.Utilization < 0 {
				continue
			}
			node.add(s.Utilization)
			if held {
				allocated.add(s.Utilization)
				if jobs[job] == nil {
					jobs[job] = &meanOf{}
				}
				jobs[job].add(s.Utilization)
			}
		}
		if node.n > 0 {
			out.Nodes[name] = node.mean()
		}
	}
	out.AllocatedKnown = allocated.n
	if allocated.n > 0 {
		out.AllocatedMean = allocated.mean()
	}
	for j, m := range jobs {
		out.Jobs[j] = m.mean()
	}
	sort.Slice(out.GPUs, func(i, j int) bool {
		a, b := out.GPUs[i], out.GPUs[j]
		if a.Node != b.Node {
			return a.Node < b.Node
		}
		return a.Index < b.Index
	})
	return out
}

type gpuKey struct{ node, dev string }

// meanOf accumulates a mean.
type meanOf struct {
	sum float64
	n   int
}

func (m *meanOf) add(v float64) { m.sum += v; m.n++ }
func (m meanOf) mean() float64  { return m.sum / float64(m.n) }

// statsNodes lists the nodes worth asking: ready, with GPUs. A down node's
// client cannot answer, and asking would only cost a timeout per poll.
func statsNodes(snap *cluster.Snapshot) []string {
	var ids []string
	for _, n := range snap.Nodes() {
		if n.Ready && len(n.GPUs) > 0 {
			ids = append(ids, n.ID)
		}
	}
	sort.Strings(ids)
	return ids
}

// pollUtilization runs until ctx ends: a poll every StatsInterval while
// leading, the first as soon as the agent leads with a synced model
// (checked every second until then, so stats do not wait a whole interval
// after start-up or a failover).
func (a *Agent) pollUtilization(ctx context.Context) {
	failing := map[string]bool{}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next := a.opts.StatsInterval
		if !a.pollOnce(ctx, failing) {
			next = min(next, time.Second)
		}
		t.Reset(next)
	}
}

// pollOnce reads the stats once and publishes them. failing remembers the
// nodes whose last read failed, so a node that stays broken is logged when
// it breaks and when it recovers, not on every poll; every failure is
// counted in impact_gpu_stats_errors_total.
// It returns false when the model is not synced yet (nothing polled).
// Only the leader polls: every poll is one request per GPU node that the
// servers forward to its client, and standbys doing the same would
// multiply that load by the number of agents. A standby serves no
// utilisation series (absent, not stale); the new leader's first poll
// follows its election within a second.
func (a *Agent) pollOnce(ctx context.Context, failing map[string]bool) bool {
	if !a.lead.leader.Load() {
		a.opts.Metrics.clearUtilization()
		clear(failing)
		return false
	}
	if !a.opts.Model.Status().Synced {
		return false
	}
	snap := a.opts.Model.Snapshot()
	nodes := statsNodes(snap)
	if len(nodes) == 0 {
		a.opts.Metrics.RecordUtilization(UtilizationStats{})
		return true
	}
	pctx, cancel := context.WithTimeout(ctx, a.opts.StatsInterval)
	defer cancel()
	stats, failed := a.opts.Utilization.GPUStats(pctx, nodes)
	if ctx.Err() != nil {
		return true
	}
	for id, err := range failed {
		a.opts.Metrics.RecordStatsError()
		if !failing[id] {
			a.statsLog.Warn("cannot read device stats of node; its GPUs are left out of the utilisation metrics", "node", id, "error", err)
		} else {
			a.statsLog.Debug("device stats still unavailable", "node", id, "error", err)
		}
		failing[id] = true
	}
	for id := range failing {
		if _, still := failed[id]; !still {
			delete(failing, id)
			a.statsLog.Info("device stats of node readable again", "node", id)
		}
	}
	a.opts.Metrics.RecordUtilization(utilizationOf(snap, stats))
	a.util.add(a.opts.Clock(), allocSamples(snap, stats))
	return true
}

// gpuCollector serves the utilisation gauges of the last poll. It is a
// Prometheus collector rather than armon/go-metrics gauges because these
// series must disappear with their GPU (a node removed, its stats
// unreadable): the armon sink never forgets a labelled gauge, so a dead
// node would keep reporting its last utilisation.
type gpuCollector struct {
	gpu, memUsed, memTotal, node, job, cluster, known *prometheus.Desc

	mu   sync.Mutex
	last UtilizationStats
	set  bool
}

func newGPUCollector() *gpuCollector {
	gpuLabels := []string{"node", "gpu", "index"}
	return &gpuCollector{
		gpu:      prometheus.NewDesc("impact_gpu_utilization_percent", "Device utilisation of one GPU from its device stats, percent.", gpuLabels, nil),
		memUsed:  prometheus.NewDesc("impact_gpu_memory_used_mib", "Framebuffer memory in use on one GPU, MiB.", gpuLabels, nil),
		memTotal: prometheus.NewDesc("impact_gpu_memory_total_mib", "Framebuffer memory of one GPU, MiB.", gpuLabels, nil),
		node:     prometheus.NewDesc("impact_node_gpu_utilization_percent", "Mean utilisation of a node's GPUs with stats, percent.", []string{"node"}, nil),
		job:      prometheus.NewDesc("impact_job_gpu_utilization_percent", "Mean utilisation of the GPUs a job's allocations hold, over those with stats, percent.", []string{"job"}, nil),
		cluster:  prometheus.NewDesc("impact_gpus_utilization_percent", "Mean utilisation of allocated GPUs with stats, percent (utilisation layer); absent when none has stats.", nil, nil),
		known:    prometheus.NewDesc("impact_gpus_allocated_with_stats", "Allocated GPUs whose device stats were read in the last poll (the denominator of impact_gpus_utilization_percent).", nil, nil),
	}
}

func (c *gpuCollector) update(s UtilizationStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last, c.set = s, true
}

func (c *gpuCollector) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last, c.set = UtilizationStats{}, false
}

func (c *gpuCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.gpu, c.memUsed, c.memTotal, c.node, c.job, c.cluster, c.known} {
		ch <- d
	}
}

func (c *gpuCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	s, set := c.last, c.set
	c.mu.Unlock()
	if !set {
		return
	}
	for _, g := range s.GPUs {
		l := []string{g.Node, g.DeviceID, strconv.Itoa(g.Index)}
		if g.Utilization >= 0 {
			ch <- prometheus.MustNewConstMetric(c.gpu, prometheus.GaugeValue, g.Utilization, l...)
		}
		if g.MemoryUsedMiB >= 0 && g.MemoryTotalMiB > 0 {
			ch <- prometheus.MustNewConstMetric(c.memUsed, prometheus.GaugeValue, g.MemoryUsedMiB, l...)
			ch <- prometheus.MustNewConstMetric(c.memTotal, prometheus.GaugeValue, g.MemoryTotalMiB, l...)
		}
	}
	for n, v := range s.Nodes {
		ch <- prometheus.MustNewConstMetric(c.node, prometheus.GaugeValue, v, n)
	}
	for j, v := range s.Jobs {
		ch <- prometheus.MustNewConstMetric(c.job, prometheus.GaugeValue, v, j)
	}
	if s.AllocatedKnown > 0 {
		ch <- prometheus.MustNewConstMetric(c.cluster, prometheus.GaugeValue, s.AllocatedMean)
	}
	ch <- prometheus.MustNewConstMetric(c.known, prometheus.GaugeValue, float64(s.AllocatedKnown))
}
