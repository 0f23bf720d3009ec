package baseline_test

import (
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/baseline"
	"github.com/impact-sched/nomad-impact/scheduler/sim/internal/simtest"
)

// BenchmarkPhillyWeek replays the first week of the standard scenario
// (2017-10-02..08, 11,386 jobs on 64 x 8 GPUs) under each baseline, at
// the baselines' cadence (sim.DefaultModel).
// Run with: go test -run '^$' -bench PhillyWeek -benchmem ./scheduler/sim/baseline/
func BenchmarkPhillyWeek(b *testing.B) {
	jobs, cl := simtest.PhillyWeek(b)
	for _, name := range []string{baseline.NomadNative, baseline.FIFOGang, baseline.Backfill} {
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				s, err := baseline.New(name)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := sim.Run(jobs, s, sim.Options{Cluster: cl, Model: sim.DefaultModel()}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(jobs))*float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}
