package impact

import (
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// BenchmarkPhillyWeek replays the first week of the standard scenario
// (2017-10-02..08, 11,386 jobs on 64 x 8 GPUs) under the impact engine,
// at the live agent's cadence (a decision 1s after an event, a tick every
// 10s).
// Run with: go test -run '^$' -bench PhillyWeek ./scheduler/sim/impact/
func BenchmarkPhillyWeek(b *testing.B) {
	from, _ := trace.ParseTimeBound(trace.FormatPhilly, "2017-10-02", false)
	to, _ := trace.ParseTimeBound(trace.FormatPhilly, "2017-10-08", true)
	tr, err := trace.ReadFile("../../../example/traces/philly.csv.gz", trace.FormatPhilly, trace.ReadOptions{From: &from, To: &to})
	if err != nil {
		b.Fatal(err)
	}
	if err := trace.Synthesize(tr.Jobs, tr.Source, 1); err != nil {
		b.Fatal(err)
	}
	cl, err := sim.UniformCluster(64, 8, 2, 8)
	if err != nil {
		b.Fatal(err)
	}
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
		if res, err = sim.Run(tr.Jobs, s, sim.Options{Cluster: cl, Model: agentModel()}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(tr.Jobs))*float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(res.DecisionLatencyMS.P50, "decision-p50-ms")
	b.ReportMetric(res.DecisionLatencyMS.P99, "decision-p99-ms")
}

// agentModel is the standard model at the live agent's default cadence.
func agentModel() sim.Model {
	m := sim.DefaultModel()
	m.Debounce, m.Interval = 1, 10
	return m
}
