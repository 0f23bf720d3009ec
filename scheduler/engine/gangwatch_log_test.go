package engine

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Issue 39: deciding a whole-gang requeue is not carrying it out (a
// standby decides too, and acts on nothing), so the engine logs no warning
// for it; the agent does once the requeue is applied.
func TestGangRequeueDecisionLogsNoWarning(t *testing.T) {
	var out lockedBuffer
	log := hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info})
	pol := policy.Default()
	e := mustEngine(t, pol, WithLogger(log))
	job := mkJob("g", running(), meta("impact_tier", "normal"), group("main", 2, 4))
	snap := mustSnap(t, []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)}, []*cluster.Job{job},
		[]*cluster.Alloc{alloc("a1", "g", "n1", t0.Add(-time.Hour), 0, 1, 2, 3)})
	e.Decide(snap, t0)
	plan := e.Decide(snap, t0.Add(pol.Gangs.MissingMemberGrace))
	if len(plan.Requeues) != 1 {
		t.Fatalf("requeues %+v, want the gang", plan.Requeues)
	}
	// An observation ("gang missing a member", Info) is fine; a warning
	// or a line saying it requeues is not.
	if s := out.String(); strings.Contains(s, "[WARN]") || strings.Contains(s, "[ERROR]") || strings.Contains(s, "requeuing") {
		t.Errorf("engine logged as if it acted while only deciding:\n%s", s)
	}
}
