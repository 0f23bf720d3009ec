package agent

import (
	"io"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

func TestMetricsExposeTheFourLayers(t *testing.T) {
	m, err := NewMetrics()
	if err != nil {
		t.Fatal(err)
	}
	m.RecordCluster(ClusterStats{TotalGPUs: 16, HealthyGPUs: 15, AllocatedGPUs: 12,
		Tiers: map[string]TierStats{"high": {Jobs: 2, GPUs: 8, MaxWait: 90 * time.Second}}, InvalidJobs: 1})
	m.RecordAdmission("high", 30*time.Second)
	m.RecordPreemption("scavenger", &engine.Preemption{LostGPUHours: 1.5})
	m.RecordPreemption("normal", &engine.Preemption{OnLoan: true})
	m.RecordPreemption("high", &engine.Preemption{TakenBack: true})
	m.RecordCutGPUsKept(2)
	m.RecordCutGPUsKept(0)
	m.RecordCycle(3*time.Millisecond, 20*time.Millisecond, false)
	m.RecordEvents(250*time.Millisecond, ModelStatus{Index: 1234, EventsApplied: 99, Resyncs: 2})
	m.RecordLeader(true)
	m.RecordHeadroom([]engine.HeadroomStatus{{Pool: "gpu", GPUs: 8, Capacity: 32, OtherNonPreemptibleGPUs: 24, PreemptibleGPUs: 6, FreeGPUs: 2},
		{Pool: "a100", Capacity: 16, IdleBudget: &engine.HeadroomIdleBudget{Share: 0.004, CreditGPUHours: -0.25, Yielded: true}}})
	// A tier that empties must read zero, not its last value.
	m.RecordCluster(ClusterStats{TotalGPUs: 16, HealthyGPUs: 15, AllocatedGPUs: 12,
		Tiers: map[string]TierStats{"normal": {Jobs: 1, GPUs: 1}}})

	out := scrapeMetrics(t, m)
	for _, want := range []string{
		"impact_gpus_healthy 15",
		"impact_gpus_allocated 12",
		"impact_occupancy_ratio 0.8",
		`impact_queue_waiting_jobs{tier="high"} 0`,
		`impact_queue_waiting_jobs{tier="normal"} 1`,
		`impact_admissions_total{tier="high"} 1`,
		`impact_preemptions_total{tier="scavenger"} 1`,
		`impact_preemptions_total{tier="normal"} 1`,
		`impact_preemptions_on_loan_total{tier="normal"} 1`,
		`impact_preemptions_taken_back_total{tier="high"} 1`,
		"impact_preemptions_lost_gpu_hours_total 1.5",
		"impact_preemption_cut_gpus_kept_total 2",
		"impact_cycle_decision_ms_count 1",
		"impact_events_lag_seconds 0.25",
		"impact_events_index 1234",
		"impact_events_applied 99",
		"impact_events_resyncs 2",
		"impact_leader 1",
		`impact_headroom_gpus{pool="gpu"} 8`,
		`impact_headroom_held_gpus{holder="preemptible",pool="gpu"} 6`,
		`impact_headroom_held_gpus{holder="free",pool="gpu"} 2`,
		`impact_headroom_held_gpus{holder="other",pool="gpu"} 24`,
		`impact_headroom_idle_credit_gpu_hours{pool="a100"} -0.25`,
		`impact_headroom_yielded{pool="a100"} 1`,
		"# HELP impact_gpus_healthy Healthy GPUs",
		"go_goroutines",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(out, `impact_headroom_yielded{pool="gpu"}`) {
		t.Error("a headroom without an idle budget reports one")
	}
	if strings.Contains(out, `impact_preemptions_on_loan_total{tier="scavenger"}`) {
		t.Error("a preemption of work not on loan is counted on loan")
	}
	for _, tier := range []string{"scavenger", "normal"} {
		if strings.Contains(out, `impact_preemptions_taken_back_total{tier="`+tier+`"}`) {
			t.Errorf("a preemption of %s work not taken back is counted taken back", tier)
		}
	}
	// Two metric instances must not collide (no global registry).
	if _, err := NewMetrics(); err != nil {
		t.Errorf("second NewMetrics: %v", err)
	}
}

// The wait of admitted jobs is a histogram: it never reads NaN, however
// long ago the last admission was (a summary's quantiles did, once its
// 10-second window had no sample).
func TestAdmittedWaitNeverNaN(t *testing.T) {
	m, err := NewMetrics()
	if err != nil {
		t.Fatal(err)
	}
	m.RecordAdmission("high", 42*time.Second)
	var lines []string
	for _, l := range strings.Split(scrapeMetrics(t, m), "\n") {
		if strings.HasPrefix(l, "impact_queue_admitted_wait_seconds") {
			lines = append(lines, l)
			if strings.Contains(l, "NaN") {
				t.Errorf("NaN: %s", l)
			}
		}
	}
	for _, want := range []string{
		`impact_queue_admitted_wait_seconds_count{tier="high"} 1`,
		`impact_queue_admitted_wait_seconds_sum{tier="high"} 42`,
		`impact_queue_admitted_wait_seconds_bucket{tier="high",le="30"} 0`,
		`impact_queue_admitted_wait_seconds_bucket{tier="high",le="60"} 1`,
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("no %q in\n%s", want, strings.Join(lines, "\n"))
		}
	}
}

// impact_headroom_yields_total counts each turn of a pool's headroom to
// yielding, not each cycle it stays yielded: kept, yielded, yielded,
// kept, yielded is two yields. A pool whose headroom has no idle budget
// never counts one.
func TestHeadroomYieldsCounted(t *testing.T) {
	m, err := NewMetrics()
	if err != nil {
		t.Fatal(err)
	}
	for _, y := range []bool{false, true, true, false, true} {
		m.RecordHeadroom([]engine.HeadroomStatus{{Pool: "a100", IdleBudget: &engine.HeadroomIdleBudget{Share: 0.004, Yielded: y}},
			{Pool: "gpu", GPUs: 8}})
	}
	out := scrapeMetrics(t, m)
	if !strings.Contains(out, `impact_headroom_yields_total{pool="a100"} 2`) {
		t.Errorf("/metrics lacks two yields of a100:\n%s", grepLines(out, "yield"))
	}
	if strings.Contains(out, `impact_headroom_yields_total{pool="gpu"}`) {
		t.Error("a headroom without an idle budget counts yields")
	}
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// scrapeMetrics is what m's /metrics handler serves.
func scrapeMetrics(t *testing.T, m *Metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
