package scheduler

// TestHeadroomLetsWholeNodeJobsIn: a headroom smaller than a node does not
// keep out a job as wide as the pool's widest node (engine, wholeNode), on
// the real two-node cluster TestHeadroom uses (one server, two client
// processes, each 8 fake GPUs of its own) with the same 4-GPU headroom for
// the critical tier.
//
// h0, high tier, non-preemptible, 8 GPUs in one allocation, starts on one
// node (A; as wide as a node itself, it may take either). The other node
// (B) is then the only one free of high-tier non-preemptible work, so the
// headroom is kept on it (4 of its 8 GPUs).
// w8, high, 8 GPUs in one allocation, is as wide as a node: it starts on
// B, the headroom's node (before the rule it waited, told the headroom
// keeps it out: the pool's count of other non-preemptible work, 8 + 8,
// was over the pool minus the headroom, 12). w4, high, 4 GPUs, is
// narrower than a node: it gets no allocation over several cycles and is
// told the headroom keeps it out (the count rule in blocks: 16 + 4 > 12;
// the pool is full besides).

import (
	"strings"
	"testing"
	"time"
)

func TestHeadroomLetsWholeNodeJobsIn(t *testing.T) {
	w, envDir := headroomCluster(t, "impact-e2e-hrwide-", "")
	c := w.c
	explain := w.explainEngine
	// On failure the cluster's cleanup logs the impact agent's output.

	runHCL(t, c.Agent, w.dir, "h0", dfJob{name: "h0", tier: "high", gpus: 8}.hcl(envDir))
	nodeA := w.waitRunningN("h0", 1, 120*time.Second)[0].NodeID
	t.Logf("h0 runs on %s (A)", nodeA)

	runHCL(t, c.Agent, w.dir, "w8", dfJob{name: "w8", tier: "high", gpus: 8}.hcl(envDir))
	// Kept out (the rule off), w8 waits told "headroom: ..."; the
	// failure shows that explanation.
	nodeB := w.waitRunningN("w8", 1, 120*time.Second)[0].NodeID
	t.Logf("w8 runs on %s (B, the headroom's node): %s", nodeB, explain("w8"))
	if nodeB == nodeA {
		t.Errorf("w8 runs on %s beside h0, want the other node (the headroom's)", nodeB)
	}
	if size, ok := metricValue(t, w.apiURL, `impact_headroom_gpus{pool="default"}`); !ok || size != 4 {
		t.Errorf("impact_headroom_gpus{pool=\"default\"} %v (present %v), want 4 (the headroom in force)", size, ok)
	}

	runHCL(t, c.Agent, w.dir, "w4", dfJob{name: "w4", tier: "high", gpus: 4}.hcl(envDir))
	eventually(t, 60*time.Second, "w4 kept out by the headroom", func() (bool, string) {
		ex := explain("w4")
		return keptOutByHeadroom(ex), ex.String()
	})
	waitCycles(t, w.apiURL, 3)
	if as := w.allocsOf("w4"); len(as) != 0 {
		t.Errorf("w4: allocations %+v, want none (narrower than a node, the headroom keeps it out); explain %s", as, explain("w4"))
	}
	ex := explain("w4")
	t.Logf("w4: %s", ex)
	if !keptOutByHeadroom(ex) {
		t.Errorf("w4: %s; want waiting, its reason starting %q", ex, "headroom: ")
	}
	noRollbacks(t, w.apiURL)
}

// keptOutByHeadroom: the engine holds the job waiting and says the
// headroom keeps it out (the reason blocks gives, "headroom: ...").
func keptOutByHeadroom(ex engineExplain) bool {
	return ex.Engine != nil && ex.Engine.Status == "waiting" &&
		strings.HasPrefix(ex.Engine.Reason, "headroom: ") && strings.HasPrefix(ex.Reason, "headroom: ")
}
