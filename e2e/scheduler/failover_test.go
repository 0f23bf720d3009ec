package scheduler

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/e2e/internal/nomadagent"
)

// TestFailoverAfterSIGKILLMedian measures issue 39's failover: two impact
// agents with the default election settings; the leader is SIGKILLed
// (no release of the lock or the lease) IMPACT_FAILOVER_RUNS times
// (default 5), restarted as a standby after each run; the time until the
// other agent's /v1/health says it leads is logged for each run, and the
// median must be 15s or less (Nomad's lock alone: about 45s).
func TestFailoverAfterSIGKILLMedian(t *testing.T) {
	runs := 5
	if v, err := strconv.Atoi(os.Getenv("IMPACT_FAILOVER_RUNS")); err == nil && v > 0 {
		runs = v
	}
	e := setup(t, false)
	ports := nomadagent.FreePorts(t, 2)
	names := []string{"fo-a", "fo-b"}
	urls := []string{fmt.Sprintf("http://127.0.0.1:%d", ports[0]), fmt.Sprintf("http://127.0.0.1:%d", ports[1])}
	procs := []*nomadagent.Process{e.launchImpact(t, names[0], urls[0]), e.launchImpact(t, names[1], urls[1])}
	leaderOf := func() (int, string) {
		var hs [2]health
		for i, u := range urls {
			if err := getAPI(u, "/v1/health", &hs[i]); err != nil {
				return -1, err.Error()
			}
		}
		if hs[0].Leader == hs[1].Leader {
			return -1, fmt.Sprintf("%+v", hs)
		}
		l := 0
		if hs[1].Leader {
			l = 1
		}
		if hs[1-l].LeaderName != names[l] {
			return -1, fmt.Sprintf("standby names %q", hs[1-l].LeaderName)
		}
		return l, ""
	}
	var took []time.Duration
	for run := range runs {
		leader := -1
		eventually(t, 90*time.Second, "exactly one leader, named by the standby", func() (bool, string) {
			var info string
			leader, info = leaderOf()
			return leader >= 0, info
		})
		standby := 1 - leader
		killed := time.Now()
		procs[leader].Kill()
		eventually(t, 90*time.Second, "the standby takes over", func() (bool, string) {
			var h health
			err := getAPI(urls[standby], "/v1/health", &h)
			return err == nil && h.Leader, fmt.Sprintf("%+v %v", h, err)
		})
		d := time.Since(killed)
		took = append(took, d)
		t.Logf("run %d: %s led %s after %s was SIGKILLed", run+1, names[standby], d.Round(100*time.Millisecond), names[leader])
		procs[leader] = e.launchImpact(t, names[leader], urls[leader])
	}
	slices.Sort(took)
	median := took[len(took)/2]
	t.Logf("failover after SIGKILL over %d runs: median %s, min %s, max %s", runs,
		median.Round(100*time.Millisecond), took[0].Round(100*time.Millisecond), took[len(took)-1].Round(100*time.Millisecond))
	if median > 15*time.Second {
		t.Errorf("median failover %s, want 15s or less", median)
	}
}

// TestLeaderAfterNomadRestart: the Nomad server restarts under two impact
// agents. Someone leads again no later than the restart plus one lock
// period (ha.lock_ttl, 10s here) after Nomad answers again (issue 39: 76s
// without a leader, 50s after the server was back).
func TestLeaderAfterNomadRestart(t *testing.T) {
	e := setup(t, false)
	ports := nomadagent.FreePorts(t, 2)
	urls := []string{fmt.Sprintf("http://127.0.0.1:%d", ports[0]), fmt.Sprintf("http://127.0.0.1:%d", ports[1])}
	e.launchImpact(t, "nr-a", urls[0])
	e.launchImpact(t, "nr-b", urls[1])
	leads := func() bool {
		for _, u := range urls {
			var h health
			if getAPI(u, "/v1/health", &h) == nil && h.Leader {
				return true
			}
		}
		return false
	}
	eventually(t, 60*time.Second, "a leader", func() (bool, string) { return leads(), "" })
	stopped := time.Now()
	e.a.Restart()
	eventually(t, 60*time.Second, "nomad answers again", func() (bool, string) {
		var leader string
		err := e.a.Get("/v1/status/leader", &leader)
		return err == nil && leader != "", fmt.Sprintf("%q %v", leader, err)
	})
	back := time.Now()
	eventually(t, 60*time.Second, "a leader again", func() (bool, string) { return leads(), "" })
	t.Logf("nomad down %s; a leader %s after it answered again (%s after the restart began)",
		back.Sub(stopped).Round(100*time.Millisecond), time.Since(back).Round(100*time.Millisecond), time.Since(stopped).Round(100*time.Millisecond))
	if d := time.Since(back); d > 10*time.Second {
		t.Errorf("no leader for %s after Nomad answered again, want within one lock period (10s)", d)
	}
}
