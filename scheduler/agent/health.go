package agent

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
)

// health keeps what /v1/health says about this agent's own work: how many
// cycles ran, when the last one ended and how, and whether the Consul
// registration failed. Report composes it with the model's status and the
// election's (leadership.status) into the answer; HTTP handlers call it
// while the loop records cycles, so it has its own lock.
type health struct {
	name, version string
	// noLeaderGrace is how long no lock holder is tolerated before it is
	// reported (Options.NoLeaderGrace).
	noLeaderGrace time.Duration

	cycles atomic.Uint64

	// consul is the registration (nil without Consul); health reports it
	// while Consul does not hold what the agent wants.
	consul *Registrar
	// nomad reports what the agent keeps in Nomad and found out of date
	// (nomad_reconcile.go).
	nomad *nomadState

	mu        sync.Mutex
	lastCycle time.Time
	lastErr   error
}

// cycleDone records the end of a cycle that ran at at.
func (h *health) cycleDone(at time.Time, err error) {
	h.cycles.Add(1)
	h.mu.Lock()
	h.lastCycle, h.lastErr = at, err
	h.mu.Unlock()
}

// report is the health answer, degraded with every problem found. now is
// the wall clock (the no-leader grace is measured in it); withConsul
// includes the Consul registration's problem.
func (h *health) report(st ModelStatus, lead leaderStatus, now time.Time, withConsul bool) agentapi.Health {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := agentapi.Health{
		Status: agentapi.StatusOK, Name: h.name, Version: h.version,
		Leader: lead.leader, Cycles: h.cycles.Load(), EventIndex: st.Index,
	}
	if !h.lastCycle.IsZero() {
		t := h.lastCycle
		out.LastCycle = &t
	}
	if h.lastErr != nil {
		out.LastCycleError = h.lastErr.Error()
	}
	out.Problems = modelProblems(st)
	if lead.electionErr != nil {
		out.Problems = append(out.Problems, "leader election: "+lead.electionErr.Error())
	}
	if withConsul && h.consul != nil {
		if p := h.consul.problem(); p != "" {
			out.Problems = append(out.Problems, p)
		}
	}
	if h.nomad != nil {
		out.Problems = append(out.Problems, h.nomad.problem()...)
	}
	if msg := h.noLeader(lead, now); msg != "" {
		out.Problems = append(out.Problems, msg)
	}
	out.LeaderName = lead.holder
	if lead.leader {
		out.LeaderName = h.name
	} else if ls := lead.lease; ls != nil && ls.Holder != "" && ls.Holder != h.name {
		// A standby says whether the leader renews its lease, and names
		// it from the lease (fresher than the rate-limited holder check).
		out.LeaderName = ls.Holder
		alive := !ls.Stale
		out.LeaderAlive = &alive
		if ls.Stale {
			out.Problems = append(out.Problems, fmt.Sprintf(
				"leader %s has not renewed its lease for %s (presumed dead; a standby takes over at %s)",
				ls.Holder, ls.Unchanged.Round(time.Second), ls.TakeoverAfter))
		}
	}
	if h.lastErr != nil && lead.leader {
		out.Problems = append(out.Problems, "last cycle failed: "+h.lastErr.Error())
	}
	if len(out.Problems) > 0 {
		out.Status = agentapi.StatusDegraded
	}
	return out
}

// modelProblems says what is wrong with the watched model.
func modelProblems(st ModelStatus) []string {
	switch {
	case !st.Synced && st.Err != nil:
		return []string{"not synced with nomad: " + st.Err.Error()}
	case !st.Synced:
		return []string{"not synced with nomad"}
	case st.Err != nil:
		return []string{"nomad event stream: " + st.Err.Error()}
	}
	return nil
}

// noLeader reports a standby that has seen no agent holding the lock for
// longer than the grace ("" otherwise).
func (h *health) noLeader(lead leaderStatus, now time.Time) string {
	if lead.leader || lead.noLeaderSince.IsZero() {
		return ""
	}
	d := now.Sub(lead.noLeaderSince)
	if d <= h.noLeaderGrace {
		return ""
	}
	msg := fmt.Sprintf("no agent has held the leader lock for %s", d.Round(time.Second))
	if lead.holderErr != nil {
		msg += ": " + lead.holderErr.Error()
	}
	return msg
}
