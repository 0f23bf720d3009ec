// Package simtest holds what the simulator's benchmarks share: the first
// week of the standard scenario, so that each policy's benchmark replays
// the same jobs on the same cluster.
package simtest

import (
	"path/filepath"
	"runtime"
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// PhillyWeek is the first week of the standard scenario (2017-10-02..08
// of example/traces/philly.csv.gz, 11,386 jobs, labels synthesized from
// seed 1) and its cluster (64 nodes x 8 GPUs, 2 islands a node, 8 nodes
// a rack).
func PhillyWeek(tb testing.TB) ([]trace.Job, sim.ClusterSpec) {
	tb.Helper()
	_, self, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(self), "../../../../example/traces/philly.csv.gz")
	from, err := trace.ParseTimeBound(trace.FormatPhilly, "2017-10-02", false)
	if err != nil {
		tb.Fatal(err)
	}
	to, err := trace.ParseTimeBound(trace.FormatPhilly, "2017-10-08", true)
	if err != nil {
		tb.Fatal(err)
	}
	tr, err := trace.ReadFile(path, trace.FormatPhilly, trace.ReadOptions{From: &from, To: &to})
	if err != nil {
		tb.Fatal(err)
	}
	if err := trace.Synthesize(tr.Jobs, tr.Source, 1); err != nil {
		tb.Fatal(err)
	}
	cl, err := sim.UniformCluster(64, 8, 2, 8)
	if err != nil {
		tb.Fatal(err)
	}
	return tr.Jobs, cl
}
