package agent

import (
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	metrics "github.com/armon/go-metrics"
	metricsprom "github.com/armon/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// Metric names (without the "impact_" service prefix the sink adds). They
// follow the four layers of README.md ("What it optimises") bottom-up:
// availability (healthy GPUs),
// occupancy (allocated GPUs), impact (waiting jobs and time per tier,
// preemptions, lost work), utilisation (GPU use from device stats), plus the
// scheduler's own health (decision latency, event lag, leadership).
var (
	mGPUsTotal       = []string{"gpus", "total"}
	mGPUsHealthy     = []string{"gpus", "healthy"}
	mGPUsAllocated   = []string{"gpus", "allocated"}
	mOccupancy       = []string{"occupancy", "ratio"}
	mWaitingJobs     = []string{"queue", "waiting_jobs"}
	mWaitingGPUs     = []string{"queue", "waiting_gpus"}
	mWaitMax         = []string{"queue", "wait_max_seconds"}
	mInvalidJobs     = []string{"queue", "invalid_jobs"}
	mAdmissions      = []string{"admissions", "total"}
	mRollbacks       = []string{"admissions", "rollbacks_total"}
	mPreemptions     = []string{"preemptions", "total"}
	mPreemptionsLoan = []string{"preemptions", "on_loan_total"}
	mPreemptionsBack = []string{"preemptions", "taken_back_total"}
	mLostGPUHours    = []string{"preemptions", "lost_gpu_hours_total"}
	mDecisionLatency = []string{"cycle", "decision_ms"}
	mCycleDuration   = []string{"cycle", "duration_ms"}
	mCycles          = []string{"cycle", "total"}
	mCycleErrors     = []string{"cycle", "errors_total"}
	mActionErrors    = []string{"cycle", "action_errors_total"}
	mEventLag        = []string{"events", "lag_seconds"}
	mEventIndex      = []string{"events", "index"}
	mLeader          = []string{"leader"}
	mEventsApplied   = []string{"events", "applied"}
	mResyncs         = []string{"events", "resyncs"}
	mReconnects      = []string{"events", "reconnects"}
	mApplyLatency    = []string{"events", "apply_ms"}
	mStatsErrors     = []string{"gpu", "stats_errors_total"}
	mOutcomes        = []string{"preemption", "outcomes_total"}
	mGangRequeues    = []string{"gangs", "requeued_total"}
	mGangsFailed     = []string{"gangs", "failed_total"}
	mPinMismatches   = []string{"gpu", "pin_mismatch_total"}
	mCutGPUsKept     = []string{"preemption", "cut_gpus_kept_total"}
	mHeadroom        = []string{"headroom", "gpus"}
	mHeadroomHeld    = []string{"headroom", "held_gpus"}
	mHeadroomIdle    = []string{"headroom", "idle_kept_gpus"}
	mHeadroomIdleRsv = []string{"headroom", "idle_reserved_gpus"}
	mHeadroomCredit  = []string{"headroom", "idle_credit_gpu_hours"}
	mHeadroomYielded = []string{"headroom", "yielded"}
	mHeadroomYields  = []string{"headroom", "yields_total"}
	mIdleReclaimed   = []string{"idle", "reclaimed_gpu_hours_total"}
	mConsulInSync    = []string{"consul", "registration_in_sync"}
	mConsulRepairs   = []string{"consul", "registration_repairs_total"}
	mNomadInSync     = []string{"nomad", "state_in_sync"}
	mNomadRepairs    = []string{"nomad", "state_repairs_total"}
)

// Metrics is the agent's instrumentation: an armon/go-metrics instance
// writing to a Prometheus sink on a private registry (no global state, so
// several agents can run in one test process).
type Metrics struct {
	m        *metrics.Metrics
	registry *prometheus.Registry
	// gpus serves the utilisation layer (see utilization.go), idle its
	// idle and hung jobs (idle.go).
	gpus *gpuCollector
	idle *idleCollector
	// admittedWait: impact_queue_admitted_wait_seconds{tier}.
	admittedWait *prometheus.HistogramVec

	mu        sync.Mutex
	seenTiers map[string]bool
	// yielded: whether each pool's headroom yielded in the last plan
	// (impact_headroom_yields_total counts the turns to yielding).
	yielded map[string]bool
}

// NewMetrics builds the sink and registry. The gauges never expire: a gauge
// that vanished from /metrics because nothing changed for a minute would
// read as "no data" on a dashboard.
func NewMetrics() (*Metrics, error) {
	reg := prometheus.NewRegistry()
	gpus, idle := newGPUCollector(), newIdleCollector()
	for _, c := range []struct {
		what string
		c    prometheus.Collector
	}{
		{"go collector", collectors.NewGoCollector()},
		{"process collector", collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})},
		{"GPU utilisation collector", gpus},
		{"idle collector", idle},
	} {
		if err := reg.Register(c.c); err != nil {
			return nil, fmt.Errorf("registering %s: %w", c.what, err)
		}
	}
	sink, err := metricsprom.NewPrometheusSinkFrom(metricsprom.PrometheusOpts{
		Name: "impact_agent", Registerer: reg,
		GaugeDefinitions: gaugeDefinitions(), CounterDefinitions: counterDefinitions(), SummaryDefinitions: summaryDefinitions(),
	})
	if err != nil {
		return nil, fmt.Errorf("prometheus sink: %w", err)
	}
	conf := metrics.DefaultConfig("impact")
	conf.EnableHostname = false
	conf.EnableRuntimeMetrics = false // the Go collector above covers it, without a goroutine
	m, err := metrics.New(conf, sink)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	// The wait of admitted jobs is a histogram, not a sink summary: a
	// summary's quantiles read NaN once no job was admitted for its
	// 10-second window, which is most of the time on a real cluster.
	admittedWait := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "impact_queue_admitted_wait_seconds",
		Help:    "Time admitted jobs waited in the queue (submit to admission), seconds, by tier.",
		Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 2 * 3600, 6 * 3600, 24 * 3600},
	}, []string{"tier"})
	if err := reg.Register(admittedWait); err != nil {
		return nil, fmt.Errorf("registering admitted wait histogram: %w", err)
	}
	return &Metrics{m: m, registry: reg, gpus: gpus, idle: idle, admittedWait: admittedWait, seenTiers: map[string]bool{}}, nil
}

func gaugeDef(name []string, help string) metricsprom.GaugeDefinition {
	return metricsprom.GaugeDefinition{Name: append([]string{"impact"}, name...), Help: help}
}

func counterDef(name []string, help string) metricsprom.CounterDefinition {
	return metricsprom.CounterDefinition{Name: append([]string{"impact"}, name...), Help: help}
}

func summaryDef(name []string, help string) metricsprom.SummaryDefinition {
	return metricsprom.SummaryDefinition{Name: append([]string{"impact"}, name...), Help: help}
}

// gaugeDefinitions are the sink's gauges, with their help.
func gaugeDefinitions() []metricsprom.GaugeDefinition {
	return []metricsprom.GaugeDefinition{
		gaugeDef(mGPUsTotal, "GPUs Nomad reports on eligible nodes."),
		gaugeDef(mGPUsHealthy, "Healthy GPUs (availability layer)."),
		gaugeDef(mGPUsAllocated, "GPUs held by allocations (occupancy layer)."),
		gaugeDef(mOccupancy, "Allocated / healthy GPUs."),
		gaugeDef(mInvalidJobs, "Jobs parked because their impact_* meta is invalid."),
		gaugeDef(mEventLag, "Seconds from the oldest unapplied Nomad event's arrival to the cycle that used it."),
		gaugeDef(mEventIndex, "Nomad index the agent's model is current to."),
		gaugeDef(mLeader, "1 when this agent is the leader."),
		gaugeDef(mConsulInSync, "Whether Consul holds the registration the agent wants (service, leader/standby tag, check): 1 yes, 0 while it is being repaired; absent without Consul."),
		gaugeDef(mNomadInSync, "Whether Nomad holds what the agent keeps there (the parking pool, with no node in it; the leader's durable-state Variables and lease) as the agent wants it, at the last check: 1 yes, 0 while something is missing or being repaired."),
		gaugeDef(mEventsApplied, "Nomad events applied to the model since start."),
		gaugeDef(mResyncs, "Full resyncs with Nomad since start (start-up, outages, index resets)."),
		gaugeDef(mReconnects, "Event stream reconnects since start."),
		gaugeDef(mApplyLatency, "Time applying the last event batch took, milliseconds."),
		gaugeDef(mHeadroom, "GPUs a pool's policy headroom keeps free of non-preemptible work of tiers that may not use it (learned or fixed), after the last cycle."),
		gaugeDef(mHeadroomIdle, "The headroom's occupancy cost after the last cycle: the pool's free GPUs, up to the headroom's size, while work it keeps out waits and would fit them (the kept part's idle GPUs, and those freed elsewhere while it holds that work back to form). Integrated over time: GPU-hours urgency costs the pool."),
		gaugeDef(mHeadroomIdleRsv, "GPUs reserved for blocked jobs of the policy's reserve tiers (backfill reserve_tiers) that use the pool's headroom, free and not backfilled after the last cycle: the other half of urgency's occupancy cost, paid from the headroom's idle budget. 0 without an idle budget."),
		gaugeDef(mHeadroomCredit, "A headroom's idle allowance left after the last cycle (policy headroom idle_budget), in GPU-hours: it accrues at the budget's share of the pool and is spent by the GPUs idle on the headroom's account (impact_headroom_idle_kept_gpus) and by the reserve tiers' idle reserved GPUs (impact_headroom_idle_reserved_gpus); below zero the headroom yields, and so do the reserve tiers' reservations. Absent without an idle budget."),
		gaugeDef(mHeadroomYielded, "1 when a headroom kept nothing in the last cycle because it had idled more than its idle budget allows (its kept-out work may use the GPUs until the allowance catches up), else 0. Absent without an idle budget."),
		gaugeDef(mHeadroomHeld, "GPUs of a pool with a headroom by what holds them after the last cycle: free, preemptible (work an urgent job may preempt), urgent (non-preemptible work of the headroom's tiers), other (non-preemptible work of the other tiers, at most the pool minus the headroom)."),
	}
}

// counterDefinitions are the sink's counters, with their help.
func counterDefinitions() []metricsprom.CounterDefinition {
	return []metricsprom.CounterDefinition{
		counterDef(mCycles, "Scheduling cycles run."),
		counterDef(mCycleErrors, "Cycles that failed before acting."),
		counterDef(mActionErrors, "Admissions, preemptions or explanations that failed."),
		counterDef(mRollbacks, "Admissions rolled back because the gang did not fully start in time."),
		counterDef(mLostGPUHours, "GPU-hours of work lost to preemption as estimated when deciding: since the victims' last expected checkpoint (impact_checkpoint_interval), else since their start, an upper bound (a victim that checkpoints on its signal loses only the work since)."),
		counterDef(mOutcomes, "Finished preemptions by how the victim ended: completed (every task exited 0: done, not requeued), requeued (exited with its requeue code), stopped (still running at the end of its grace)."),
		counterDef(mGangRequeues, "Running gangs stopped and requeued whole because a member was missing (lost, failed, stopped, on a down or draining node, or replaced by Nomad) for longer than the policy's gang member grace, at once when Nomad replaced it or ended the job's run."),
		counterDef(mGangsFailed, "Running gangs that lost a member and were stopped whole and ended failed instead of requeued (impact_on_failure = \"fail\", or impact_max_failures runs in a row lost a member)."),
		counterDef(mIdleReclaimed, "GPU-hours freed from idle or hung jobs by their tier's idle action (reclaims and idle preemptions carried out): their GPUs x the rest of their impact_walltime less their impact_progress (0 for jobs without one)."),
		counterDef(mConsulRepairs, "Consul registrations repaired, by what differed: missing (Consul lost the service, e.g. restarted empty), tag (leader/standby tag out of date), service (name or address), check."),
		counterDef(mNomadRepairs, "What the agent wrote again in Nomad after finding it deleted or overwritten, by what: parking_pool, lease, or a durable-state Variable (usage, requeues, gang-requeues, timeline, preemptions)."),
		counterDef(mStatsErrors, "Device stats reads of a node that failed (the node's GPUs are left out of the utilisation metrics)."),
		counterDef(mPinMismatches, "Nodes where Nomad allocated an admitted job other GPUs than the admission pinned (read back once its allocations run)."),
		counterDef(mPreemptionsLoan, "Preemptions, by the victim's tier, of work on loan on a headroom's nodes (policy headroom loan_grace): chosen first by the headroom's tiers and stopped after the loan's grace. Also counted in impact_preemptions_total."),
		counterDef(mPreemptionsBack, "Preemptions, by the victim's tier, of work taken back (policy headroom take_back, take_back_unsaved): started less than take_back before a job of the headroom's tiers needed its GPUs, or with less than take_back_unsaved of its work unsaved since its last checkpoint, chosen first and stopped at once. Also counted in impact_preemptions_total."),
		counterDef(mHeadroomYields, "Times a headroom began to yield: its idle budget spent (impact_headroom_idle_credit_gpu_hours below zero), it keeps nothing until the allowance has caught up. A yield can last a single cycle where the overspending was small, which the gauge impact_headroom_yielded may never show between two scrapes; this counter keeps it."),
		counterDef(mCutGPUsKept, "GPUs of ended preemptors that had cut the pool (taken from jobs with narrower allocations than their own) kept, in the cycle each ended, for waiting jobs no wider than those victims, so that the cut does not outlive the preemption."),
	}
}

// summaryDefinitions are the sink's summaries, with their help.
func summaryDefinitions() []metricsprom.SummaryDefinition {
	return []metricsprom.SummaryDefinition{
		summaryDef(mDecisionLatency, "Time engine.Decide took, milliseconds."),
		summaryDef(mCycleDuration, "Time a whole cycle took (snapshot, decide, act), milliseconds."),
	}
}

// Handler serves /metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// Gatherer exposes the registry to tests.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.registry }

// TierStats is the waiting queue of one tier.
type TierStats struct {
	Jobs    int
	GPUs    int
	MaxWait time.Duration
}

// ClusterStats is one cycle's view of the four layers.
type ClusterStats struct {
	TotalGPUs     int
	HealthyGPUs   int
	AllocatedGPUs int
	Tiers         map[string]TierStats
	InvalidJobs   int
}

// RecordCluster publishes the layer gauges. Tiers seen before but now empty
// are set to zero rather than left at their last value.
func (m *Metrics) RecordCluster(s ClusterStats) {
	m.m.SetGauge(mGPUsTotal, float32(s.TotalGPUs))
	m.m.SetGauge(mGPUsHealthy, float32(s.HealthyGPUs))
	m.m.SetGauge(mGPUsAllocated, float32(s.AllocatedGPUs))
	if s.HealthyGPUs > 0 {
		m.m.SetGauge(mOccupancy, float32(s.AllocatedGPUs)/float32(s.HealthyGPUs))
	} else {
		m.m.SetGauge(mOccupancy, 0)
	}
	m.m.SetGauge(mInvalidJobs, float32(s.InvalidJobs))

	m.mu.Lock()
	for t := range s.Tiers {
		m.seenTiers[t] = true
	}
	tiers := make([]string, 0, len(m.seenTiers))
	for t := range m.seenTiers {
		tiers = append(tiers, t)
	}
	m.mu.Unlock()
	sort.Strings(tiers)
	for _, t := range tiers {
		st := s.Tiers[t]
		l := []metrics.Label{{Name: "tier", Value: t}}
		m.m.SetGaugeWithLabels(mWaitingJobs, float32(st.Jobs), l)
		m.m.SetGaugeWithLabels(mWaitingGPUs, float32(st.GPUs), l)
		m.m.SetGaugeWithLabels(mWaitMax, float32(st.MaxWait.Seconds()), l)
	}
}

// RecordHeadroom publishes every pool headroom of the last plan.
func (m *Metrics) RecordHeadroom(hs []engine.HeadroomStatus) {
	for _, h := range hs {
		pool := metrics.Label{Name: "pool", Value: h.Pool}
		m.m.SetGaugeWithLabels(mHeadroom, float32(h.GPUs), []metrics.Label{pool})
		m.m.SetGaugeWithLabels(mHeadroomIdle, float32(h.IdleKeptGPUs), []metrics.Label{pool})
		m.m.SetGaugeWithLabels(mHeadroomIdleRsv, float32(h.IdleReservedGPUs), []metrics.Label{pool})
		if b := h.IdleBudget; b != nil {
			yielded := float32(0)
			if b.Yielded {
				yielded = 1
			}
			m.mu.Lock()
			began := b.Yielded && !m.yielded[h.Pool]
			if m.yielded == nil {
				m.yielded = map[string]bool{}
			}
			m.yielded[h.Pool] = b.Yielded
			m.mu.Unlock()
			if began {
				m.m.IncrCounterWithLabels(mHeadroomYields, 1, []metrics.Label{pool})
			}
			m.m.SetGaugeWithLabels(mHeadroomCredit, float32(b.CreditGPUHours), []metrics.Label{pool})
			m.m.SetGaugeWithLabels(mHeadroomYielded, yielded, []metrics.Label{pool})
		}
		for _, k := range []struct {
			holder string
			gpus   int
		}{{"free", h.FreeGPUs}, {"preemptible", h.PreemptibleGPUs}, {"urgent", h.UrgentGPUs}, {"other", h.OtherNonPreemptibleGPUs}} {
			m.m.SetGaugeWithLabels(mHeadroomHeld, float32(k.gpus), []metrics.Label{pool, {Name: "holder", Value: k.holder}})
		}
	}
}

// RecordUtilization publishes a device stats poll (the utilisation layer);
// it replaces the previous poll's series.
func (m *Metrics) RecordUtilization(s UtilizationStats) { m.gpus.update(s) }

// clearUtilization removes the utilisation series (a standby serves none).
func (m *Metrics) clearUtilization() { m.gpus.clear() }

// RecordStatsError counts a node whose device stats could not be read.
func (m *Metrics) RecordStatsError() { m.m.IncrCounter(mStatsErrors, 1) }

// RecordAdmission counts an admission and how long the job waited.
func (m *Metrics) RecordAdmission(tier string, waited time.Duration) {
	l := []metrics.Label{{Name: "tier", Value: tierLabel(tier)}}
	m.m.IncrCounterWithLabels(mAdmissions, 1, l)
	m.admittedWait.WithLabelValues(tierLabel(tier)).Observe(waited.Seconds())
}

// RecordPreemption counts a preempted job (by its tier; on loan or taken
// back too, when p says so) and the GPU-hours of work p says it lost.
func (m *Metrics) RecordPreemption(tier string, p *engine.Preemption) {
	labels := []metrics.Label{{Name: "tier", Value: tierLabel(tier)}}
	m.m.IncrCounterWithLabels(mPreemptions, 1, labels)
	if p.OnLoan {
		m.m.IncrCounterWithLabels(mPreemptionsLoan, 1, labels)
	}
	if p.TakenBack {
		m.m.IncrCounterWithLabels(mPreemptionsBack, 1, labels)
	}
	if p.LostGPUHours > 0 {
		m.m.IncrCounter(mLostGPUHours, float32(p.LostGPUHours))
	}
}

// RecordPreemptionOutcome counts a finished preemption by its outcome
// (nomad.OutcomeCompleted, OutcomeRequeued, OutcomeStopped,
// OutcomeWithdrawn).
func (m *Metrics) RecordPreemptionOutcome(outcome string) {
	m.m.IncrCounterWithLabels(mOutcomes, 1, []metrics.Label{{Name: "outcome", Value: outcome}})
}

// RecordGangRequeue counts a broken gang requeued whole.
func (m *Metrics) RecordGangRequeue() { m.m.IncrCounter(mGangRequeues, 1) }

// RecordGangFailed counts a broken gang ended failed.
func (m *Metrics) RecordGangFailed() { m.m.IncrCounter(mGangsFailed, 1) }

// RecordPinMismatches counts nodes where Nomad allocated other GPUs than
// an admission pinned.
func (m *Metrics) RecordPinMismatches(n int) {
	if n > 0 {
		m.m.IncrCounter(mPinMismatches, float32(n))
	}
}

// RecordRollback counts an admission rolled back.
func (m *Metrics) RecordRollback() { m.m.IncrCounter(mRollbacks, 1) }

// RecordCutGPUsKept counts the GPUs a cycle kept for narrower jobs
// (engine.Plan.CutGPUsKept).
func (m *Metrics) RecordCutGPUsKept(n int) {
	if n > 0 {
		m.m.IncrCounter(mCutGPUsKept, float32(n))
	}
}

// RecordCycle records one cycle: how long deciding and the whole cycle
// took, and whether it failed.
func (m *Metrics) RecordCycle(decide, total time.Duration, failed bool) {
	m.m.IncrCounter(mCycles, 1)
	if failed {
		m.m.IncrCounter(mCycleErrors, 1)
		return
	}
	m.m.AddSample(mDecisionLatency, float32(decide.Seconds()*1000))
	m.m.AddSample(mCycleDuration, float32(total.Seconds()*1000))
}

// RecordActionError counts a failed action, by kind.
func (m *Metrics) RecordActionError(kind string) {
	m.m.IncrCounterWithLabels(mActionErrors, 1, []metrics.Label{{Name: "action", Value: kind}})
}

// RecordEvents publishes how far behind the model is.
func (m *Metrics) RecordEvents(lag time.Duration, st ModelStatus) {
	m.m.SetGauge(mEventLag, float32(lag.Seconds()))
	m.m.SetGauge(mEventIndex, float32(st.Index))
	m.m.SetGauge(mEventsApplied, float32(st.EventsApplied))
	m.m.SetGauge(mResyncs, float32(st.Resyncs))
	m.m.SetGauge(mReconnects, float32(st.Reconnects))
	m.m.SetGauge(mApplyLatency, float32(st.ApplyLatency.Seconds()*1000))
}

// RecordLeader publishes leadership.
func (m *Metrics) RecordLeader(leader bool) {
	v := float32(0)
	if leader {
		v = 1
	}
	m.m.SetGauge(mLeader, v)
}

// RecordConsulInSync publishes whether Consul holds the wanted
// registration.
func (m *Metrics) RecordConsulInSync(ok bool) {
	v := float32(0)
	if ok {
		v = 1
	}
	m.m.SetGauge(mConsulInSync, v)
}

// RecordConsulRepair counts a registration repaired, by reason.
func (m *Metrics) RecordConsulRepair(reason string) {
	m.m.IncrCounterWithLabels(mConsulRepairs, 1, []metrics.Label{{Name: "reason", Value: reason}})
}

// RecordNomadInSync publishes whether Nomad holds what the agent keeps
// there, as it wants it.
func (m *Metrics) RecordNomadInSync(ok bool) {
	v := float32(0)
	if ok {
		v = 1
	}
	m.m.SetGauge(mNomadInSync, v)
}

// RecordNomadRepair counts something written again in Nomad, by what.
func (m *Metrics) RecordNomadRepair(what string) {
	m.m.IncrCounterWithLabels(mNomadRepairs, 1, []metrics.Label{{Name: "what", Value: what}})
}

func tierLabel(t string) string {
	if t == "" {
		return "none"
	}
	return t
}
