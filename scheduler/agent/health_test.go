package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
)

// Health's answer for each kind of trouble: the problems it lists, the
// status, and who it names as the leader.
func TestHealthReport(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	synced := ModelStatus{Synced: true, Index: 42}
	for _, tc := range []struct {
		name       string
		st         ModelStatus
		lead       leaderStatus
		lastErr    error
		consulErr  error
		want       []string // substrings of the problems, in order; none: ok
		leaderName string
	}{
		{name: "healthy standby", st: synced, lead: leaderStatus{holder: "a2"}, leaderName: "a2"},
		{name: "healthy leader", st: synced, lead: leaderStatus{leader: true, holder: "stale"}, leaderName: "a1"},
		{name: "not synced", st: ModelStatus{Err: errors.New("waiting for the first full sync")},
			want: []string{"not synced with nomad: waiting for the first full sync"}},
		{name: "not synced, no error", st: ModelStatus{}, want: []string{"not synced with nomad"}},
		{name: "stream down", st: ModelStatus{Synced: true, Err: errors.New("disconnected")}, want: []string{"nomad event stream: disconnected"}},
		{name: "election and consul", st: synced, lead: leaderStatus{electionErr: errors.New("403")}, consulErr: errors.New("refused"),
			want: []string{"leader election: 403", "consul registration (retrying): refused"}},
		{name: "no leader within the grace", st: synced, lead: leaderStatus{noLeaderSince: now.Add(-30 * time.Second)}},
		{name: "no leader past the grace", st: synced, lead: leaderStatus{noLeaderSince: now.Add(-2 * time.Minute), holderErr: errors.New("timeout")},
			want: []string{"no agent has held the leader lock for 2m0s: timeout"}},
		{name: "a leader ignores a stale no-leader mark", st: synced, lead: leaderStatus{leader: true, noLeaderSince: now.Add(-time.Hour)}, leaderName: "a1"},
		{name: "leader's cycle failed", st: synced, lead: leaderStatus{leader: true}, lastErr: errors.New("applying plan: 500"),
			want: []string{"last cycle failed: applying plan: 500"}, leaderName: "a1"},
		{name: "a standby's failed cycle is not a problem", st: synced, lastErr: errors.New("recovering")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &health{name: "a1", version: "v", noLeaderGrace: time.Minute}
			if tc.consulErr != nil {
				h.consul = &Registrar{}
				h.consul.active.Store(true)
				h.consul.record(tc.consulErr, "")
			}
			h.cycleDone(now.Add(-time.Second), tc.lastErr)
			got := h.report(tc.st, tc.lead, now, true)
			if len(got.Problems) != len(tc.want) {
				t.Fatalf("problems %q, want %d like %q", got.Problems, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got.Problems[i], w) {
					t.Errorf("problem %d = %q, want %q", i, got.Problems[i], w)
				}
			}
			wantStatus := agentapi.StatusOK
			if len(tc.want) > 0 {
				wantStatus = agentapi.StatusDegraded
			}
			if got.Status != wantStatus || got.LeaderName != tc.leaderName || got.Cycles != 1 || got.EventIndex != tc.st.Index {
				t.Errorf("status %s leader %q cycles %d index %d, want %s %q 1 %d",
					got.Status, got.LeaderName, got.Cycles, got.EventIndex, wantStatus, tc.leaderName, tc.st.Index)
			}
			if (tc.lastErr != nil) != (got.LastCycleError != "") || got.LastCycle == nil || !got.LastCycle.Equal(now.Add(-time.Second)) {
				t.Errorf("last cycle %v error %q", got.LastCycle, got.LastCycleError)
			}
		})
	}
}
