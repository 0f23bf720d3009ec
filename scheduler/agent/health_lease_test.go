package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/nomad"
)

// Issue 39: a standby's health says who leads and whether that leader is
// alive (renews its lease); a leader that stopped renewing is a problem
// at once, not after the lock expires.
func TestStandbyHealthSaysWhetherTheLeaderIsAlive(t *testing.T) {
	now := time.Now()
	synced := ModelStatus{Synced: true}
	h := &health{name: "a2", noLeaderGrace: time.Minute}
	alive := h.report(synced, leaderStatus{holder: "a1", lease: &nomad.LeaseStatus{Holder: "a1", Unchanged: time.Second, TakeoverAfter: 10 * time.Second}}, now, true)
	if alive.Status != "ok" || alive.LeaderName != "a1" || alive.LeaderAlive == nil || !*alive.LeaderAlive {
		t.Errorf("live leader: %+v", alive)
	}
	dead := h.report(synced, leaderStatus{holder: "a1", lease: &nomad.LeaseStatus{Holder: "a1", Unchanged: 7 * time.Second, Stale: true, TakeoverAfter: 10 * time.Second}}, now, true)
	if dead.Status != "degraded" || dead.LeaderAlive == nil || *dead.LeaderAlive || len(dead.Problems) != 1 ||
		!strings.Contains(dead.Problems[0], "leader a1 has not renewed its lease for 7s") {
		t.Errorf("stale leader: %+v", dead)
	}
	leader := h.report(synced, leaderStatus{leader: true, lease: &nomad.LeaseStatus{Holder: "a2"}}, now, true)
	if leader.LeaderAlive != nil || leader.LeaderName != "a2" {
		t.Errorf("the leader itself: %+v", leader)
	}
}
