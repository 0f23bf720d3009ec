package scheduler

// TestDefragment: a defragmenting preemption (policy defragment block) on
// a real two-node Nomad cluster (one server, two client processes, each 8
// fake GPUs with UUIDs of its own), once with victims that exit at once on
// SIGTERM and once with victims that take 12s (so each moved job's new
// allocation runs beside its old, stopping one for a while).
//
// client-0 holds a non-preemptible high-tier job of 5 GPUs ("anchor") and,
// for a while, one of 3 ("hold"), so two small normal-tier jobs ("small-a",
// 1 GPU, and "small-b", 2 GPUs, both with a checkpoint signal) can only go
// to client-1. Once hold is stopped the pool has 8 free GPUs, 3 on client-0
// and 5 on client-1, and a normal-tier job of 8 GPUs ("whole") arrives: it
// fits no node and may not preempt jobs of its own tier, so the agent moves
// both small jobs out of its way. The test checks, against Nomad's own
// records: both small jobs got their checkpoint signal and were stopped;
// each restarted on client-0 on exactly the GPUs the preemption named
// (Preemption.MovedTo, in the victim's explanation), which are the ones
// hold freed; whole runs on client-1 with exactly its 8 planned GPUs; every
// job ends up running, the small ones after exactly one move; the
// explanations (/v1/explain and the nomad/jobs/<job>/impact Variables)
// say what was moved, where, and for whom; a scavenger job waiting behind
// whole never gets the moved jobs' GPUs.
//
// TestDefragmentFailover kills the agent during the move and a second
// agent finishes it; TestDefragmentGang moves the same small jobs for a
// gang of 2 x 8 GPUs on three clients.

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/e2e/internal/nomadagent"
)

// dfJob is a parked job of count allocations (0: one) of gpus GPUs, tier tier, with
// SIGUSR1 as its checkpoint signal and a 5s grace. Its task writes its
// CUDA_VISIBLE_DEVICES to <envDir>/<name>-<alloc ID> (as exactGPUs
// reads), appends "checkpoint" to that file's .ckpt on SIGUSR1 and keeps
// running, and on SIGTERM (its kill_signal; Nomad's default is SIGINT)
// goes on for stopSeconds more (a job saving its
// work on the way out; kill_timeout leaves it that long) before it exits
// 0. node, when set, pins the job to the node of that name with a
// job-level constraint (the model honours ${node.unique.name}).
type dfJob struct {
	name, tier  string
	count, gpus int
	node        string
	stopSeconds int
	// grace is its impact_grace ("" is 5s); deadline its impact_deadline,
	// walltime its impact_walltime, project its impact_project and
	// checkpoint its impact_checkpoint_interval ("" none).
	grace, deadline, walltime, project, checkpoint string
}

func (j dfJob) hcl(envDir string) string {
	out := filepath.Join(envDir, j.name+"-$NOMAD_ALLOC_ID")
	script := fmt.Sprintf(`echo "$CUDA_VISIBLE_DEVICES" > %[1]s; trap 'echo checkpoint >> %[1]s.ckpt' USR1; end=0; trap 'end=$(( $(date +%%s) + %[2]d ))' TERM; while [ $end -eq 0 ] || [ $(date +%%s) -lt $end ]; do sleep 1 & wait $!; done`,
		out, j.stopSeconds)
	meta := map[string]string{"impact_tier": j.tier, "impact_checkpoint_signal": "SIGUSR1", "impact_grace": cmp.Or(j.grace, "5s")}
	if j.deadline != "" {
		meta["impact_deadline"] = j.deadline
	}
	for k, v := range map[string]string{"impact_walltime": j.walltime, "impact_project": j.project, "impact_checkpoint_interval": j.checkpoint} {
		if v != "" {
			meta[k] = v
		}
	}
	return parkedJob{name: j.name, meta: meta, count: max(1, j.count), gpus: j.gpus, script: script, node: j.node,
		killSignal: "SIGTERM", killTimeout: time.Duration(j.stopSeconds+10) * time.Second}.hcl()
}

// explainRecorder polls the agent's /v1/explain/<job> and the job's
// Variable for a set of jobs and keeps every distinct version it saw, so
// states that last only a grace period (a job being moved, a job waiting
// for the jobs moved for it) are checked without racing them.
type explainRecorder struct {
	mu   sync.Mutex
	seen map[string][]recordedExplain // by job
	// lastErr is the last failed poll of each job, for failure reports.
	lastErr map[string]error
	stop    chan struct{}
	done    chan struct{}
}

type recordedExplain struct {
	State, Decision, Summary, Reason string
	PreemptedBy                      string `json:"preempted_by"`
	Engine                           *struct {
		Status  string
		Reason  string
		Victims []string
	}
	// Variable is the job's nomad/jobs/<job>/impact items at that poll.
	Variable map[string]string `json:"-"`
}

func (r recordedExplain) key() string {
	return fmt.Sprintf("%s|%s|%s|%s|%v", r.State, r.Decision, r.Reason, r.Variable["reason"], r.Engine != nil)
}

func recordExplanations(t *testing.T, a *nomadagent.Agent, apiURL string, jobs ...string) *explainRecorder {
	r := &explainRecorder{seen: map[string][]recordedExplain{}, lastErr: map[string]error{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		last := map[string]string{}
		for {
			for _, j := range jobs {
				var ex recordedExplain
				if err := getAPI(apiURL, "/v1/explain/"+j, &ex); err != nil {
					r.mu.Lock()
					r.lastErr[j] = err
					r.mu.Unlock()
					continue
				}
				var v struct{ Items map[string]string }
				if a.Get("/v1/var/nomad/jobs/"+j+"/impact", &v) == nil {
					ex.Variable = v.Items
				}
				if k := ex.key(); k != last[j] {
					last[j] = k
					r.mu.Lock()
					r.seen[j] = append(r.seen[j], ex)
					r.mu.Unlock()
				}
			}
			select {
			case <-r.stop:
				return
			case <-time.After(150 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(r.close)
	return r
}

func (r *explainRecorder) close() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
}

// find returns the first recorded explanation of job that ok accepts.
func (r *explainRecorder) find(job string, ok func(recordedExplain) bool) (recordedExplain, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.seen[job] {
		if ok(e) {
			return e, true
		}
	}
	return recordedExplain{}, false
}

func (r *explainRecorder) dump(job string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, e := range r.seen[job] {
		fmt.Fprintf(&b, "\n  %s/%s: %s [%s] (variable reason %q)", e.State, e.Decision, e.Reason, e.Summary, e.Variable["reason"])
	}
	if err := r.lastErr[job]; err != nil {
		fmt.Fprintf(&b, "\n  last error: %v", err)
	}
	return b.String()
}

// movedToRE reads a moved job's destination from its preemption reason
// (engine orderMoves: "restarts at once on <node> (<gpu>, <gpu>)").
var movedToRE = regexp.MustCompile(`restarts at once on (\S+) \(([^)]*)\)`)

func TestDefragment(t *testing.T) {
	for _, tc := range []struct {
		name string
		// stopSeconds: how long the small jobs' tasks take to exit
		// after SIGTERM.
		stopSeconds int
	}{
		// They exit at once: the old allocations end within a second.
		{"quick stop", 0},
		// They take 12s: each moved job's new allocation runs beside its
		// old one, still stopping, for longer than the policy's gangs
		// missing_member_grace (3s).
		{"slow stop", 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := setupDefrag(t, tc.stopSeconds, "")
			rec := recordExplanations(t, w.c.Agent, w.apiURL, "whole", "small-a", "small-b")
			start := time.Now()
			w.run("whole", "normal", 8, "")
			// filler waits behind whole for 3 GPUs: the ones the moved
			// jobs restart on are theirs, from the move until their new
			// allocations run, so it must not get them.
			eventually(t, 60*time.Second, "whole defragmenting", func() (bool, string) {
				_, ok := rec.find("whole", func(r recordedExplain) bool { return r.Engine != nil && r.Engine.Status == "preempting" })
				return ok, rec.dump("whole")
			})
			w.run("filler", "scavenger", 3, "")
			w.checkWhole(t)
			t.Logf("whole running %s after its submission", time.Since(start).Round(100*time.Millisecond))
			movedGPUs := w.checkMoved(t, rec, "whole")
			if !slices.Equal(sorted(movedGPUs), w.holdGPUs) {
				t.Errorf("the moved jobs got %v, want exactly the GPUs hold freed on client-0 %v", sorted(movedGPUs), w.holdGPUs)
			}
			w.checkMover(t, rec, "whole")
			rec.close()
			w.checkNothingLost(t)
			for _, m := range []struct{ name, want string }{
				{`impact_preemptions_total{tier="normal"}`, "2"},
				{`impact_preemption_outcomes_total{outcome="stopped"}`, "2"},
			} {
				if v := w.metric(m.name); v != m.want {
					t.Errorf("%s = %q, want %s", m.name, v, m.want)
				}
			}
			noRollbacks(t, w.apiURL)
			if t.Failed() {
				t.Logf("impact agent output (tail):\n%s", w.impactProc.Output())
			}
		})
	}
}

// TestDefragmentFailover: the impact agent is killed (SIGKILL) while the
// jobs it moved are in their grace (60s); a second agent takes the lead
// within it. It knows nothing of the bindings the first one kept in
// memory, but the small jobs still run (their stop comes after the
// grace), so its first cycle plans the same move again (binding the same
// GPUs), the preemptions already under way are skipped, and Recover
// finishes them from their intents. The outcome is the same, and a
// scavenger job submitted during the failover never gets the moved jobs'
// GPUs:
// the 8-GPU job whole on one node with its planned GPUs, each small job
// moved once and running again, nothing lost or placed twice.
func TestDefragmentFailover(t *testing.T) {
	// The small jobs' grace (60s) outlasts the failover (about 30s: the
	// leader lock's TTL and delay), so the second agent decides while
	// they still stop.
	w := setupDefrag(t, 0, "60s")
	w.run("whole", "normal", 8, "")
	// Where the first agent moved each small job (its preemption reason):
	// the second must restart it there, having learnt it from the intent.
	dest := map[string][]string{}
	for _, name := range []string{"small-a", "small-b"} {
		ckpt := filepath.Join(w.envDir, name+"-"+w.small[name].ID+".ckpt")
		eventually(t, 60*time.Second, name+" signalled", func() (bool, string) {
			b, err := os.ReadFile(ckpt)
			return err == nil && strings.Contains(string(b), "checkpoint"), fmt.Sprintf("%q %v; explain %s", b, err, w.explain(name))
		})
		eventually(t, 30*time.Second, name+"'s destination explained", func() (bool, string) {
			ex := w.explain(name)
			if m := movedToRE.FindStringSubmatch(ex); m != nil {
				dest[name] = append([]string{m[1]}, sorted(strings.Split(m[2], ", "))...)
				return true, ""
			}
			return false, ex
		})
	}
	t.Logf("killing the impact agent during the moved jobs' grace; whole: %s", w.explain("whole"))
	w.impactProc.Kill()
	// filler fits the 3 GPUs the small jobs move to and, with a deadline
	// at hand, scores above them (normal tier, it may preempt only
	// scavenger work): only the moved jobs' bindings, which the second
	// agent must learn from the intents, keep it off those GPUs.
	runHCL(t, w.c.Agent, w.dir, "filler", dfJob{name: "filler", tier: "normal", gpus: 3,
		deadline: time.Now().Add(2 * time.Minute).UTC().Format(time.RFC3339)}.hcl(w.envDir))
	w.apiURL = fmt.Sprintf("http://127.0.0.1:%d", nomadagent.FreePorts(t, 1)[0])
	killed := time.Now()
	w.impactProc = w.launchImpact(t, "e2e-b", w.apiURL)
	eventually(t, 90*time.Second, "the second agent leading", func() (bool, string) {
		var h health
		err := getAPI(w.apiURL, "/v1/health", &h)
		return err == nil && h.Leader, fmt.Sprintf("%+v %v", h, err)
	})
	t.Logf("second agent led %s after the kill", time.Since(killed).Round(100*time.Millisecond))
	waitCycles(t, w.apiURL, 2)
	for _, name := range []string{"whole", "small-a", "small-b", "filler"} {
		t.Logf("second agent, in the moved jobs' grace: %s: %s", name, w.explain(name))
	}
	w.checkWhole(t)
	for _, name := range []string{"small-a", "small-b"} {
		old := w.small[name]
		eventually(t, 90*time.Second, name+" running again", func() (bool, string) {
			now := w.running(name)
			return len(now) == 1 && now[0].ID != old.ID, fmt.Sprintf("%+v; explain %s", w.allocsOf(name), w.explain(name))
		})
		if p := exactGPUs(t, w.c.Agent, w.apiURL, w.envDir, name, 1); len(p) == 1 {
			got := append([]string{p[0].node}, sorted(p[0].allocated)...)
			t.Logf("%s restarted on %v (moved to %v)", name, got, dest[name])
			if !slices.Equal(got, dest[name]) {
				t.Errorf("%s restarted on %v after the failover; the first agent moved it to %v", name, got, dest[name])
			}
		}
	}
	w.checkNothingLost(t)
	// The second agent finished both preemptions from their intents.
	if v := w.metric(`impact_preemption_outcomes_total{outcome="stopped"}`); v != "2" {
		t.Errorf(`second agent: impact_preemption_outcomes_total{outcome="stopped"} = %q, want 2`, v)
	}
	noRollbacks(t, w.apiURL)
	if t.Failed() {
		t.Logf("second impact agent output (tail):\n%s", w.impactProc.Output())
	}
}

// defragWorld is the cluster of the defragment suites once set up:
// client-0 holds anchor (5 GPUs, high tier) and 3 free GPUs, which hold
// had; client-1 holds small-a (1 GPU) and small-b (2 GPUs), normal tier,
// and 5 free GPUs.
type defragWorld struct {
	*lcEnv
	envDir       string
	node0, node1 nomadagent.Node
	holdGPUs     []string
	anchor       lcAlloc
	small        map[string]lcAlloc
	stopSeconds  int
	// smallGrace is the small jobs' impact_grace ("" is 5s).
	smallGrace string
}

// defragBlock turns defragmenting preemption on in the agent's policy:
// small jobs of up to 2 GPUs may move, for one job a cycle.
const defragBlock = `
defragment {
  enabled         = true
  max_victim_gpus = 2
  max_per_cycle   = 1
}
`

func setupDefrag(t *testing.T, stopSeconds int, smallGrace string) *defragWorld {
	t.Helper()
	c, impact := startGPUCluster(t, "impact-e2e-defrag-", 2)
	w := &defragWorld{stopSeconds: stopSeconds, smallGrace: smallGrace, small: map[string]lcAlloc{}, lcEnv: &lcEnv{c: c, env: &env{
		t: t, a: c.Agent, dir: c.Dir, impact: impact,
		apiURL: fmt.Sprintf("http://127.0.0.1:%d", nomadagent.FreePorts(t, 1)[0]),
		policyExtra: defragBlock + `
gangs {
  missing_member_grace = "3s"
}
`}}}
	w.impactProc = w.startImpact(t)
	w.envDir = filepath.Join(w.dir, "env")
	if err := os.MkdirAll(w.envDir, 0o777); err != nil {
		t.Fatal(err)
	}
	nodes := c.WaitNodes(30*time.Second, 2, "both nodes", nil)
	w.node0, w.node1 = nodes[0], nodes[1] // sorted by name: client-0, client-1

	// client-0: anchor (5, not preemptible) and hold (3); then the small
	// jobs can only go to client-1.
	w.run("anchor", "high", 5, w.node0.Name)
	w.run("hold", "high", 3, w.node0.Name)
	w.anchor = w.waitRunningN("anchor", 1, 120*time.Second)[0]
	hold := w.waitRunningN("hold", 1, 120*time.Second)[0]
	_, w.holdGPUs = w.allocated(hold.ID)
	w.run("small-a", "normal", 1, "")
	w.run("small-b", "normal", 2, "")
	for _, name := range []string{"small-a", "small-b"} {
		a := w.waitRunningN(name, 1, 120*time.Second)[0]
		if a.NodeID != w.node1.ID {
			t.Fatalf("%s runs on %s, want %s (client-0 is full)", name, a.NodeID, w.node1.ID)
		}
		w.small[name] = a
	}
	// 8 free GPUs in the pool (3 on client-0, 5 on client-1).
	w.stopJobLeaving(t, "hold", 5+1+2)
	return w
}

// run submits a dfJob; the small ones take stopSeconds to stop.
func (w *defragWorld) run(name, tier string, gpus int, node string) {
	j := dfJob{name: name, tier: tier, gpus: gpus, node: node}
	if strings.HasPrefix(name, "small-") {
		j.stopSeconds, j.grace = w.stopSeconds, w.smallGrace
	}
	runHCL(w.t, w.c.Agent, w.dir, name, j.hcl(w.envDir))
}

// allocated is the node and the GPUs Nomad allocated to an allocation.
func (w *defragWorld) allocated(allocID string) (node string, gpus []string) {
	var full allocDevices
	if err := w.c.Get("/v1/allocation/"+allocID, &full); err != nil {
		w.t.Fatalf("allocation %s: %v", allocID, err)
	}
	for _, d := range full.AllocatedResources.Tasks["t"].Devices {
		if d.Type == "gpu" {
			gpus = append(gpus, d.DeviceIDs...)
		}
	}
	return full.NodeID, sorted(gpus)
}

// checkWhole waits for whole to run and checks it got, exactly as
// planned, every GPU of client-1, the node the moves cleared.
func (w *defragWorld) checkWhole(t *testing.T) {
	t.Helper()
	ps := exactGPUs(t, w.c.Agent, w.apiURL, w.envDir, "whole", 1)
	if len(ps) != 1 {
		return
	}
	var all []string
	for _, d := range w.node1.NodeResources.Devices {
		if d.Type == "gpu" {
			for _, in := range d.Instances {
				all = append(all, in.ID)
			}
		}
	}
	if p := ps[0]; p.node != w.node1.ID || !slices.Equal(sorted(p.allocated), sorted(all)) {
		t.Errorf("whole on %s with %v, want all of client-1's GPUs %v on %s", p.node, sorted(p.allocated), sorted(all), w.node1.ID)
	}
}

// checkMoved checks each small job was moved once, with its checkpoint
// signal, to exactly the GPUs its preemption named (on client-0), and
// that its explanation and Variable said so while it stopped; it returns
// the GPUs they restarted on.
func (w *defragWorld) checkMoved(t *testing.T, rec *explainRecorder, mover string) []string {
	t.Helper()
	var movedGPUs []string
	for _, name := range []string{"small-a", "small-b"} {
		old := w.small[name]
		eventually(t, 90*time.Second, name+" running again", func() (bool, string) {
			now := w.running(name)
			return len(now) == 1 && now[0].ID != old.ID, fmt.Sprintf("%+v; explain %s", w.allocsOf(name), w.explain(name))
		})
		if b, err := os.ReadFile(filepath.Join(w.envDir, name+"-"+old.ID+".ckpt")); err != nil || !strings.Contains(string(b), "checkpoint") {
			t.Errorf("%s's first allocation %s got no checkpoint signal (%q, %v)", name, old.ID, b, err)
		}
		stopped, ok := rec.find(name, func(r recordedExplain) bool {
			return r.Decision == "preempted" && r.PreemptedBy == "default/"+mover && strings.Contains(r.Reason, "moved out of the way of default/"+mover+" ")
		})
		if !ok {
			t.Errorf("%s: never explained as moved out of %s's way; seen:%s", name, mover, rec.dump(name))
			continue
		}
		t.Logf("%s while moved: %s [%s]", name, stopped.Reason, stopped.Summary)
		if !strings.HasPrefix(stopped.Summary, "Being moved out of the way of default/"+mover) {
			t.Errorf("%s's summary while moved: %q", name, stopped.Summary)
		}
		if _, ok := rec.find(name, func(r recordedExplain) bool {
			return strings.Contains(r.Variable["reason"], "moved out of the way of default/"+mover+" ")
		}); !ok {
			t.Errorf("%s: its Variable never said it was moved; seen:%s", name, rec.dump(name))
		}
		m := movedToRE.FindStringSubmatch(stopped.Reason)
		if m == nil {
			t.Errorf("%s: no destination in %q", name, stopped.Reason)
			continue
		}
		want := sorted(strings.Split(m[2], ", "))
		placed := exactGPUs(t, w.c.Agent, w.apiURL, w.envDir, name, 1)
		if len(placed) != 1 {
			continue
		}
		p := placed[0]
		if p.node != m[1] || p.node != w.node0.ID || !slices.Equal(sorted(p.allocated), want) {
			t.Errorf("%s restarted on %s with %v; its preemption moved it to %s %v (client-0 is %s)", name, p.node, sorted(p.allocated), m[1], want, w.node0.ID)
		}
		movedGPUs = append(movedGPUs, p.allocated...)
	}
	return movedGPUs
}

// checkMover checks whole explained the move (/v1/explain and its
// Variable) while it waited for it: defragmenting, both small jobs its
// victims, each moving to client-0.
func (w *defragWorld) checkMover(t *testing.T, rec *explainRecorder, mover string) {
	t.Helper()
	ex, ok := rec.find(mover, func(r recordedExplain) bool {
		return r.Engine != nil && r.Engine.Status == "preempting" && strings.HasPrefix(r.Reason, "defragmenting:")
	})
	if !ok {
		t.Errorf("%s: never explained as defragmenting; seen:%s", mover, rec.dump(mover))
		return
	}
	t.Logf("%s while defragmenting: %s [%s]", mover, ex.Reason, ex.Summary)
	if !strings.HasPrefix(ex.Summary, "Starts next: moving 2 small job(s) out of its way") {
		t.Errorf("%s's summary while defragmenting: %q", mover, ex.Summary)
	}
	if v := sorted(ex.Engine.Victims); !slices.Equal(v, []string{"default/small-a", "default/small-b"}) {
		t.Errorf("%s's victims %v, want [default/small-a default/small-b]", mover, v)
	}
	for _, name := range []string{"small-a", "small-b"} {
		if !strings.Contains(ex.Reason, "default/"+name+" to "+w.node0.ID+" (") {
			t.Errorf("%s's reason does not say %s moves to %s: %q", mover, name, w.node0.ID, ex.Reason)
		}
	}
	if _, ok := rec.find(mover, func(r recordedExplain) bool {
		return strings.Contains(r.Variable["reason"], "defragmenting:") && r.Variable["victims"] != ""
	}); !ok {
		t.Errorf("%s: its Variable never explained the move; seen:%s", mover, rec.dump(mover))
	}
}

// checkNothingLost: anchor untouched, each small job moved exactly once
// (its first allocation stopped and ended, one new one running, no gang
// requeue past the gangs missing_member_grace), whole admitted once,
// filler never admitted (no GPU was free for it).
func (w *defragWorld) checkNothingLost(t *testing.T) {
	t.Helper()
	if now := w.running("anchor"); len(now) != 1 || now[0].ID != w.anchor.ID || len(w.allocsOf("anchor")) != 1 {
		t.Errorf("anchor: allocations %+v, want its one allocation %s untouched", w.allocsOf("anchor"), w.anchor.ID)
	}
	for _, name := range []string{"small-a", "small-b"} {
		eventually(t, 60*time.Second, name+"'s first allocation ended", func() (bool, string) {
			for _, a := range w.allocsOf(name) {
				if a.ID == w.small[name].ID {
					return a.ClientStatus == "complete" && a.DesiredStatus == "stop", fmt.Sprintf("%+v", a)
				}
			}
			return false, "not listed"
		})
	}
	// A gang requeue would be decided within the missing_member_grace
	// (3s) of the old allocations' end at the latest.
	past := time.Now().Add(5 * time.Second)
	eventually(t, 30*time.Second, "the gangs missing_member_grace passed", func() (bool, string) {
		return time.Now().After(past), ""
	})
	waitCycles(t, w.apiURL, 3)
	if v := w.metric("impact_gangs_requeued_total"); v != "" && v != "0" {
		t.Errorf("impact_gangs_requeued_total = %s, want 0 (no gang is missing a member)", v)
	}
	for _, name := range []string{"small-a", "small-b"} {
		if as := w.allocsOf(name); len(as) != 2 || len(w.running(name)) != 1 {
			t.Errorf("%s: allocations %+v, want its first stopped and one running (moved once)", name, as)
		}
	}
	if as := w.allocsOf("whole"); len(as) != 1 || len(w.running("whole")) != 1 {
		t.Errorf("whole: allocations %+v, want one, running", as)
	}
	if as := w.allocsOf("filler"); len(as) != 0 {
		t.Errorf("filler: allocations %+v, want none (no GPU is free for it); explain %s", as, w.explain("filler"))
	}
}

// TestDefragmentGang: the mover is a gang of 2 allocations x 8 GPUs on
// three clients. client-0 holds anchor (5 GPUs, not preemptible), client-1
// small-a (1 GPU), client-2 small-b (2 GPUs): 16 GPUs free, no two nodes
// whole. Both small jobs move to client-0's 3 free GPUs and the gang runs
// on client-1 and client-2, each member on all 8 GPUs of its node, pinned
// exactly as planned.
func TestDefragmentGang(t *testing.T) {
	c, impact := startGPUCluster(t, "impact-e2e-defrag-gang-", 3)
	w := &defragWorld{small: map[string]lcAlloc{}, lcEnv: &lcEnv{c: c, env: &env{
		t: t, a: c.Agent, dir: c.Dir, impact: impact,
		apiURL:      fmt.Sprintf("http://127.0.0.1:%d", nomadagent.FreePorts(t, 1)[0]),
		policyExtra: defragBlock}}}
	w.impactProc = w.startImpact(t)
	w.envDir = filepath.Join(w.dir, "env")
	if err := os.MkdirAll(w.envDir, 0o777); err != nil {
		t.Fatal(err)
	}
	nodes := c.WaitNodes(30*time.Second, 3, "three nodes", nil)
	// Fillers steer the small jobs: client-0 and client-2 full for
	// small-a, then client-0 and client-1 full for small-b.
	w.run("anchor", "high", 5, nodes[0].Name)
	w.run("hold0", "high", 3, nodes[0].Name)
	w.run("hold2", "high", 8, nodes[2].Name)
	w.anchor = w.waitRunningN("anchor", 1, 120*time.Second)[0]
	w.waitRunningN("hold0", 1, 120*time.Second)
	w.waitRunningN("hold2", 1, 120*time.Second)
	w.run("small-a", "normal", 1, "")
	w.small["small-a"] = w.waitRunningN("small-a", 1, 120*time.Second)[0]
	w.run("hold1", "high", 7, nodes[1].Name)
	w.waitRunningN("hold1", 1, 120*time.Second)
	w.stopJobLeaving(t, "hold2", 5+3+1+7)
	w.run("small-b", "normal", 2, "")
	w.small["small-b"] = w.waitRunningN("small-b", 1, 120*time.Second)[0]
	for name, node := range map[string]nomadagent.Node{"small-a": nodes[1], "small-b": nodes[2]} {
		if w.small[name].NodeID != node.ID {
			t.Fatalf("%s on %s, want %s (%s)", name, w.small[name].NodeID, node.ID, node.Name)
		}
	}
	w.stopJobLeaving(t, "hold1", 5+3+1+2)
	w.stopJobLeaving(t, "hold0", 5+1+2)

	rec := recordExplanations(t, c.Agent, w.apiURL, "pair", "small-a", "small-b")
	runHCL(t, c.Agent, w.dir, "pair", dfJob{name: "pair", tier: "normal", count: 2, gpus: 8}.hcl(w.envDir))
	ps := exactGPUs(t, c.Agent, w.apiURL, w.envDir, "pair", 2)
	got := map[string]int{}
	for _, p := range ps {
		got[p.node] = len(p.allocated)
	}
	if got[nodes[1].ID] != 8 || got[nodes[2].ID] != 8 {
		t.Errorf("pair's GPUs by node %v, want 8 on client-1 (%s) and 8 on client-2 (%s)", got, nodes[1].ID, nodes[2].ID)
	}
	w.node0 = nodes[0]
	moved := w.checkMoved(t, rec, "pair")
	w.checkMover(t, rec, "pair")
	if len(moved) != 3 {
		t.Errorf("the moved jobs got %v, want client-0's 3 free GPUs", moved)
	}
	rec.close()
	for _, name := range []string{"small-a", "small-b"} {
		if as := w.allocsOf(name); len(as) != 2 || len(w.running(name)) != 1 {
			t.Errorf("%s: allocations %+v, want its first stopped and one running (moved once)", name, as)
		}
	}
	if now := w.running("anchor"); len(now) != 1 || now[0].ID != w.anchor.ID {
		t.Errorf("anchor: %+v, want its one allocation untouched", w.allocsOf("anchor"))
	}
	noRollbacks(t, w.apiURL)
	if t.Failed() {
		t.Logf("impact agent output (tail):\n%s", w.impactProc.Output())
	}
}
