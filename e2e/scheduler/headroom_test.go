package scheduler

// TestHeadroom: the policy's headroom on a real two-node Nomad cluster
// (one server, two client processes, each 8 fake GPUs of its own), with
// a headroom of 4 GPUs for the critical tier: half of one node ("the
// headroom node") is kept free of non-preemptible work of other tiers,
// and the node's other 4 GPUs take such work only when no other node
// fits it, so that the node stays clearable for an urgent job as wide as
// the node.
//
// Three high-tier jobs of 4 GPUs arrive one after another: the first two
// start on the other node (best fit alone would have put the first on
// the headroom node's 4 free GPUs beside the kept ones), the third on the
// headroom node's unkept GPUs; a fourth waits, told the headroom keeps it
// out, with no allocation over several cycles. A critical job of 4 GPUs
// then starts at once on the headroom node's kept GPUs.
//
// TestHeadroomIdleBudget: the same with an idle budget of a tenth of a
// percent of the pool (0.016 GPU-seconds a second): h4, kept out, leaves
// the headroom's 4 free GPUs idle, which overspends the allowance within
// a cycle or two; the headroom yields and h4 starts on the headroom node,
// with /metrics counting the yield (impact_headroom_yields_total). Not
// the gauge impact_headroom_yielded: the overspending is the kept GPUs
// times the time between two cycles, which events can make milliseconds,
// and then paid back at 0.016 GPU-seconds a second within a second or
// two, after which the gauge reads kept again (it did in one run).
//
// TestHeadroomLends: the same with loan_grace = "0s". A scavenger job of
// 4 GPUs (preemptible, impact_grace 60s, its task running on after the
// checkpoint signal) takes the headroom's 4 kept GPUs: it runs there on
// loan, and its explanation (and `impact queue`'s one line) says so from
// its admission. A critical job of 4 GPUs then preempts it and runs
// within 40 seconds of its submission, where the victim's own grace
// alone is a minute; the victim got its checkpoint signal, its
// preemption says it was on loan (and /metrics counts it so), and it
// goes back to the queue.
//
// TestHeadroomTakesBack: the same with take_back = "10m" and no loan. The
// scavenger job takes the headroom's 4 kept GPUs, told at its admission
// that for its first 10 minutes a critical job may take them back at
// once. The critical job submitted then preempts it without its
// minute's grace and runs within 40 seconds of its submission; the
// victim got its checkpoint signal, its preemption says it was taken
// back (and /metrics counts it so), and it goes back to the queue.

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestHeadroom(t *testing.T) {
	w, headroomNode := startHeadroom(t, "impact-e2e-headroom-", "")
	explain := w.explainEngine
	waitCycles(t, w.apiURL, 3)
	if as := w.allocsOf("h4"); len(as) != 0 {
		t.Errorf("h4: allocations %+v, want none (the headroom keeps the last 4 free GPUs); explain %s", as, explain("h4"))
	}
	t.Logf("h4: %s", explain("h4"))

	runHCL(t, w.c.Agent, w.dir, "urgent", dfJob{name: "urgent", tier: "critical", gpus: 4}.hcl(filepath.Join(w.dir, "env")))
	if u := w.waitRunningN("urgent", 1, 120*time.Second)[0]; u.NodeID != headroomNode {
		t.Errorf("urgent runs on %s, want the headroom node %s", u.NodeID, headroomNode)
	}
	noRollbacks(t, w.apiURL)
	if t.Failed() {
		t.Logf("impact agent output (tail):\n%s", w.impactProc.Output())
	}
}

func TestHeadroomIdleBudget(t *testing.T) {
	w, headroomNode := startHeadroom(t, "impact-e2e-hrbudget-", "  idle_budget = 0.001\n")
	if a := w.waitRunningN("h4", 1, 120*time.Second)[0]; a.NodeID != headroomNode {
		t.Errorf("h4 runs on %s, want the headroom node %s (the only free GPUs)", a.NodeID, headroomNode)
	}
	yields, ok := metricValue(t, w.apiURL, `impact_headroom_yields_total{pool="default"}`)
	yielded, _ := metricValue(t, w.apiURL, `impact_headroom_yielded{pool="default"}`)
	credit, _ := metricValue(t, w.apiURL, `impact_headroom_idle_credit_gpu_hours{pool="default"}`)
	t.Logf("once h4 runs: impact_headroom_yields_total %v (present %v), impact_headroom_yielded %v, impact_headroom_idle_credit_gpu_hours %v", yields, ok, yielded, credit)
	if !ok || yields < 1 {
		t.Errorf("impact_headroom_yields_total %v (present %v): want at least 1 (the headroom idled beyond its budget and yielded, which let h4 in)", yields, ok)
	}
	noRollbacks(t, w.apiURL)
	if t.Failed() {
		t.Logf("impact agent output (tail):\n%s", w.impactProc.Output())
	}
}

func TestHeadroomLends(t *testing.T) {
	urgentOnShortNotice(t, shortNotice{
		prefix: "impact-e2e-hrloan-", block: "  loan_grace = \"0s\"\n",
		told: func(e recordedExplain) bool {
			return e.Engine != nil && strings.Contains(e.Engine.Reason, `on loan on the GPUs the headroom of pool "default" keeps for [critical]: a job of those tiers may stop it after 0s (loan_grace), not its impact_grace of 1m0s`) &&
				strings.HasPrefix(e.Summary, "Running on loan:")
		},
		stopped: "on loan on the headroom's GPUs, so stopped after the headroom's loan_grace of 0s",
		metric:  `impact_preemptions_on_loan_total{tier="scavenger"}`,
	})
}

func TestHeadroomTakesBack(t *testing.T) {
	urgentOnShortNotice(t, shortNotice{
		prefix: "impact-e2e-hrback-", block: "  take_back = \"10m\"\n",
		told: func(e recordedExplain) bool {
			return e.Engine != nil && strings.Contains(e.Engine.Reason, `for its first 10m0s a job of [critical] may take its GPUs back at once (headroom "default" take_back), without its impact_grace of 1m0s`)
		},
		stopped: "less than the headroom's take_back, so taken back at once, not after its impact_grace",
		metric:  `impact_preemptions_taken_back_total{tier="scavenger"}`,
	})
}

// TestHeadroomTakesBackUnsaved: s checkpoints every 2s by its
// impact_checkpoint_interval, so it never has 10s of work unsaved, and a
// headroom with take_back_unsaved = "10s" takes it back at once though
// it has run longer than that (the urgent job comes once s has run 15s).
func TestHeadroomTakesBackUnsaved(t *testing.T) {
	urgentOnShortNotice(t, shortNotice{
		prefix: "impact-e2e-hrunsaved-", block: "  take_back_unsaved = \"10s\"\n", checkpoint: "2s", minAge: 15 * time.Second,
		told: func(e recordedExplain) bool {
			return e.Engine != nil && strings.Contains(e.Engine.Reason, `whenever less than 10s of its work is unsaved since its last checkpoint, a job of [critical] may take its GPUs back at once (headroom "default" take_back_unsaved), without its impact_grace of 1m0s`)
		},
		stopped: "since its last expected checkpoint (impact_checkpoint_interval 2s), less than the headroom's take_back_unsaved, so taken back at once, not after its impact_grace",
		metric:  `impact_preemptions_taken_back_total{tier="scavenger"}`,
	})
}

// shortNotice is a headroom whose tiers stop preemptible work on short
// notice (block: the lines added to the headroom's block), the scavenger
// job s's impact_checkpoint_interval (checkpoint, "" none), how long s
// has run when the urgent job comes (at least minAge), what s is told
// at its admission (told), what its preemption's reason says (stopped)
// and the counter that counts it (metric).
type shortNotice struct {
	prefix, block, checkpoint string
	minAge                    time.Duration
	told                      func(recordedExplain) bool
	stopped, metric           string
}

// urgentOnShortNotice: s (4 GPUs, impact_grace 60s, its task running on
// after the checkpoint signal) takes the headroom's 4 kept GPUs and is
// told so; a critical job of 4 GPUs then runs on them within 40 seconds
// of its submission, s having had its checkpoint signal and its stop
// counted and explained, and s goes back to the queue.
func urgentOnShortNotice(t *testing.T, c shortNotice) {
	w, headroomNode := startHeadroom(t, c.prefix, c.block)
	envDir := filepath.Join(w.dir, "env")
	rec := recordExplanations(t, w.c.Agent, w.apiURL, "s")
	runHCL(t, w.c.Agent, w.dir, "s", dfJob{name: "s", tier: "scavenger", gpus: 4, grace: "60s", checkpoint: c.checkpoint}.hcl(envDir))
	if a := w.waitRunningN("s", 1, 120*time.Second)[0]; a.NodeID != headroomNode {
		t.Fatalf("s runs on %s, want the headroom node %s (the only free GPUs)", a.NodeID, headroomNode)
	}
	running := time.Now()
	eventually(t, 30*time.Second, "s told at admission how it may be stopped", func() (bool, string) {
		_, ok := rec.find("s", c.told)
		return ok, rec.dump("s")
	})
	eventually(t, c.minAge+30*time.Second, fmt.Sprintf("s has run at least %s", c.minAge), func() (bool, string) {
		return time.Since(running) >= c.minAge, fmt.Sprintf("s has run %s", time.Since(running).Round(time.Second))
	})
	submitted := time.Now()
	runHCL(t, w.c.Agent, w.dir, "urgent", dfJob{name: "urgent", tier: "critical", gpus: 4}.hcl(envDir))
	u := w.waitRunningN("urgent", 1, 40*time.Second)[0]
	t.Logf("urgent runs on %s %s after its submission (the victim's own grace: 60s)", u.NodeID, time.Since(submitted).Round(time.Second))
	if u.NodeID != headroomNode {
		t.Errorf("urgent runs on %s, want the headroom node %s", u.NodeID, headroomNode)
	}
	if got := w.signalled(envDir, "s"); !slices.Contains(got, "s") {
		t.Errorf("s got no checkpoint signal before its stop")
	}
	eventually(t, 30*time.Second, "s's preemption says why it stopped on short notice", func() (bool, string) {
		_, ok := rec.find("s", func(e recordedExplain) bool { return strings.Contains(e.Reason, c.stopped) })
		return ok, rec.dump("s")
	})
	if n, ok := metricValue(t, w.apiURL, c.metric); !ok || n != 1 {
		t.Errorf("%s %v (present %v), want 1", c.metric, n, ok)
	}
	eventually(t, 60*time.Second, "s back in the queue", func() (bool, string) {
		ex := w.explainEngine("s")
		return ex.State == "waiting" && len(w.running("s")) == 0, ex.String()
	})
	noRollbacks(t, w.apiURL)
	if t.Failed() {
		t.Logf("impact agent output (tail):\n%s", w.impactProc.Output())
	}
}

// headroomCluster starts the two-node cluster (8 fake GPUs each) with a
// 4-GPU headroom for the critical tier (budget: lines added to its
// block) and waits for both nodes; it returns the cluster and the folder
// the jobs write their environment to.
func headroomCluster(t *testing.T, prefix, budget string) (*lcEnv, string) {
	t.Helper()
	w, envDir, _ := twoNodes(t, prefix, `
headroom "default" {
  tiers = ["critical"]
  gpus  = 4
`+budget+`}
`)
	return w, envDir
}

// startHeadroom starts the two-node cluster with a 4-GPU headroom for the
// critical tier (budget: lines added to its block), runs h1, h2 and h3
// (high, 4 GPUs each) and checks where they run, then submits h4 and
// waits until the headroom keeps it out. It returns the headroom node.
func startHeadroom(t *testing.T, prefix, budget string) (*lcEnv, string) {
	t.Helper()
	w, envDir := headroomCluster(t, prefix, budget)
	c := w.c
	explain := w.explainEngine

	nodeOf := map[string]string{}
	for _, name := range []string{"h1", "h2", "h3"} {
		runHCL(t, c.Agent, w.dir, name, dfJob{name: name, tier: "high", gpus: 4}.hcl(envDir))
		nodeOf[name] = w.waitRunningN(name, 1, 120*time.Second)[0].NodeID
	}
	t.Logf("high jobs by node: %v", nodeOf)
	if nodeOf["h1"] != nodeOf["h2"] || nodeOf["h3"] == nodeOf["h1"] {
		t.Errorf("h1, h2, h3 on %s, %s, %s: want h1 and h2 on the same node (not the headroom's) and h3 on the other (the headroom node's unkept GPUs, the only place left)",
			nodeOf["h1"], nodeOf["h2"], nodeOf["h3"])
	}
	runHCL(t, c.Agent, w.dir, "h4", dfJob{name: "h4", tier: "high", gpus: 4}.hcl(envDir))
	eventually(t, 60*time.Second, "h4 kept out by the headroom (or started: an idle budget may yield at once)", func() (bool, string) {
		ex := explain("h4")
		return ex.Engine != nil && ex.Engine.Status == "waiting" && strings.Contains(ex.Reason, "headroom") || len(w.allocsOf("h4")) > 0, ex.String()
	})
	return w, nodeOf["h3"]
}
