package impact

import (
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
	"github.com/impact-sched/nomad-impact/scheduler/sim"
)

// The utilisation layer in the replay. The simulator's idleness model
// (sim.IdleModel) says when a run hangs (a sim.Hung change); from then on
// its allocations are fed to the engine at 0% at each decision, as the
// live agent feeds the device stats it polls. Runs that have not hung are
// not fed at all: to the engine that is "no sample", never idle, which is
// all a busy run could be, and it keeps the replay from sampling thousands
// of allocations per decision. The engine decides what is idle or hung and
// what to do by the policy's idle blocks; the simulator carries out its
// reclaims (engine.Plan.Reclaims) as stops of the hung jobs.

// hungRun is a run the idleness model hung.
type hungRun struct {
	ri *runInfo
	// fed: the first decision that fed it at 0% (-1: none yet).
	fed int64
}

// feedIdle hands the engine the utilisation samples of this decision.
func (s *Scheduler) feedIdle(now int64) {
	if len(s.hung) == 0 {
		return
	}
	var samples []engine.AllocUtilization
	for idx, h := range s.hung {
		if s.running[idx] != h.ri {
			delete(s.hung, idx) // the run ended; a rerun does not hang
			continue
		}
		if h.fed < 0 {
			h.fed = now
		}
		for _, a := range h.ri.allocs {
			samples = append(samples, engine.AllocUtilization{AllocID: a.ID, JobID: a.JobID, GPUs: len(a.GPUs), Percent: h.ri.job.Utilization(now)})
		}
	}
	s.eng.ObserveUtilization(sim.At(now), samples)
}

// idleDue is the first time a hung run passes its tier's idle duration
// (when the engine may act on it), for quiet and idle; never for a tier
// whose idle action is report.
func (s *Scheduler) idleDue() int64 {
	due := int64(1<<62 - 1)
	for _, h := range s.hung {
		if h.fed < 0 {
			return 0 // not fed yet: decide now
		}
		cfg := s.pol.IdleFor(*h.ri.spec)
		if cfg.Action == policy.IdleReport {
			continue
		}
		due = min(due, h.fed+int64(cfg.Duration/time.Second))
	}
	return due
}
