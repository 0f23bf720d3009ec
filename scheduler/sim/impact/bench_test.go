package impact

import (
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/internal/simtest"
)

// BenchmarkPhillyWeek replays the first week of the standard scenario
// (2017-10-02..08, 11,386 jobs on 64 x 8 GPUs) under the impact engine,
// at the live agent's cadence (a decision 1s after an event, a tick every
// 10s).
// Run with: go test -run '^$' -bench PhillyWeek ./scheduler/sim/impact/
func BenchmarkPhillyWeek(b *testing.B) {
	jobs, cl := simtest.PhillyWeek(b)
	pol, err := DefaultPolicy()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var res *sim.Result
	for i := 0; i < b.N; i++ {
		s, err := New(pol, nil)
		if err != nil {
			b.Fatal(err)
		}
		if res, err = sim.Run(jobs, s, sim.Options{Cluster: cl, Model: agentModel()}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(jobs))*float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(res.DecisionLatencyMS.P50, "decision-p50-ms")
	b.ReportMetric(res.DecisionLatencyMS.P99, "decision-p99-ms")
}

// agentModel is the standard model at the live agent's default cadence.
func agentModel() sim.Model {
	m := sim.DefaultModel()
	m.Debounce, m.Interval = 1, 10
	return m
}
