package engine

import (
	"sort"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// Memory is what the engine carries from cycle to cycle that a restarted
// service or a new leader needs to resume where the old one stopped:
// decayed fair-share usage and the work lost to preemptions in the last
// hour. It is plain data, safe to encode as JSON (for a Nomad Variable).
// Preemptions in flight are not part of it: the new leader sees them as
// stopping allocations in its snapshot.
type Memory struct {
	// UsageAt is the instant Usage values are measured at.
	UsageAt time.Time `json:"usage_at"`
	// Usage is decayed GPU-hours per project.
	Usage map[string]float64 `json:"usage"`
	// LastCycle is the instant of the last cycle (usage is charged from
	// there on).
	LastCycle time.Time `json:"last_cycle"`
	// Losses are the preemptions of the last hour.
	Losses []Loss `json:"losses"`
	// Requeues counts, per job, the requeues of its tier's idle action.
	Requeues map[string]int `json:"requeues,omitempty"`
}

// Loss is the work one preemption threw away.
type Loss struct {
	At       time.Time `json:"at"`
	GPUHours float64   `json:"gpu_hours"`
	// Budget is the preemptor's tier when the loss was charged to that
	// tier's own budget; empty for the shared budget.
	Budget string `json:"budget,omitempty"`
}

// Memory returns a copy of the engine's memory as of instant now.
func (e *Engine) Memory(now time.Time) Memory {
	m := Memory{UsageAt: now, Usage: e.usage.Values(now), LastCycle: e.lastCycle}
	for _, l := range e.losses {
		if now.Sub(l.at) < time.Hour {
			m.Losses = append(m.Losses, Loss{At: l.at, GPUHours: l.gpuHours, Budget: l.budget})
		}
	}
	sort.Slice(m.Losses, func(i, j int) bool { return m.Losses[i].At.Before(m.Losses[j].At) })
	for id, n := range e.requeues {
		if m.Requeues == nil {
			m.Requeues = map[string]int{}
		}
		m.Requeues[id] = n
	}
	return m
}

// WithMemory starts the engine from saved memory (see Engine.Memory).
func WithMemory(m Memory) Option {
	return func(o *options) { o.memory = &m }
}

func (e *Engine) restore(m *Memory) {
	u := policy.NewUsage(e.pol.FairShare.HalfLife)
	u.Restore(m.Usage, m.UsageAt)
	e.usage = u
	e.lastCycle = m.LastCycle
	e.losses = e.losses[:0]
	for _, l := range m.Losses {
		e.losses = append(e.losses, loss{at: l.At, gpuHours: l.GPUHours, budget: l.Budget})
	}
	for id, n := range m.Requeues {
		e.requeues[id] = n
	}
}
