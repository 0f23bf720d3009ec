package scheduler

// A gang's life never ends silently, on a real multi-node Nomad: one
// server (short heartbeat TTL, so a killed client is down in seconds) and
// three clients of 8 fake GPUs each, the impact agent from the
// repository, gangs of 2 x 8 (one member per node) with the example's
// `restart { attempts = 0 mode = "fail" }` and `reschedule { attempts = 0
// }` (parkedJob). TestGangLife runs, in order:
//
//   - member killed: SIGKILL of one member's task, the survivor then
//     checkpoints and exits 75 (as a DDP rank does when its all_reduce
//     fails): every allocation failed, the job is dead in Nomad. It is
//     requeued whole at once and runs again as a new pair;
//   - client back inside the grace: SIGKILL of a member's client, its
//     tasks left running (the orphan), the client started again once the
//     node is down: Nomad's blocked evaluation places a replacement with
//     no PreviousAllocation beside the orphan. The replacement is stopped,
//     the gang is requeued whole (or was whole) within one grace of the
//     kill, and no member name runs in two processes longer than Nomad
//     takes to kill the orphan;
//   - client kept down: the gang is requeued whole once the grace has
//     passed, counted once from the first missing moment, and runs again
//     on the nodes that are up.
//
// Each step logs its times (kill -> requeue -> running again).

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/e2e/internal/nomadagent"
)

// lifeGrace is the policy's gangs missing_member_grace in this suite.
const lifeGrace = 20 * time.Second

// lifeJob is a 2 x 8 gang whose members record their process ID and
// allocation name in dir, checkpoint and exit 75 on SIGUSR1, and exit 75
// on their own once dir/abort-<alloc ID> exists (a rank whose peer died).
func lifeJob(name, dir string) string {
	script := fmt.Sprintf(`D=%s; echo $$ > "$D/pid-$NOMAD_ALLOC_ID"; echo "$NOMAD_ALLOC_NAME" > "$D/name-$NOMAD_ALLOC_ID"; `+
		`trap 'exit 75' USR1; trap 'exit 0' TERM; `+
		`while true; do sleep 1 & wait $!; [ -e "$D/abort-$NOMAD_ALLOC_ID" ] && exit 75; done`, dir)
	return parkedGPUJob(name, map[string]string{"impact_tier": "high", "impact_checkpoint_signal": "SIGUSR1", "impact_grace": "10s"}, 2, 8, script)
}

// memberPID is the process ID the allocation's task recorded.
func memberPID(t *testing.T, dir, alloc string) int {
	t.Helper()
	var pid int
	eventually(t, 30*time.Second, "pid of "+alloc, func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(dir, "pid-"+alloc))
		if err != nil {
			return false, err.Error()
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil, fmt.Sprint(err)
	})
	return pid
}

// alive reports whether a process runs (not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// twiceWatch samples, every 20ms, the members' processes in dir and
// records the longest time one allocation name ran in two processes.
type twiceWatch struct {
	mu      sync.Mutex
	since   map[string]time.Time
	longest time.Duration
	what    string
	stop    chan struct{}
	done    chan struct{}
}

func watchTwice(dir string) *twiceWatch {
	w := &twiceWatch{since: map[string]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			byName := map[string][]string{}
			files, _ := filepath.Glob(filepath.Join(dir, "pid-*"))
			for _, f := range files {
				alloc := strings.TrimPrefix(filepath.Base(f), "pid-")
				b, err1 := os.ReadFile(f)
				n, err2 := os.ReadFile(filepath.Join(dir, "name-"+alloc))
				pid, err3 := strconv.Atoi(strings.TrimSpace(string(b)))
				if err1 != nil || err2 != nil || err3 != nil || !alive(pid) {
					continue
				}
				name := strings.TrimSpace(string(n))
				byName[name] = append(byName[name], alloc)
			}
			now := time.Now()
			w.mu.Lock()
			for name, allocs := range byName {
				if len(allocs) < 2 {
					delete(w.since, name)
					continue
				}
				if _, ok := w.since[name]; !ok {
					w.since[name] = now
				}
				if d := now.Sub(w.since[name]); d >= w.longest {
					w.longest, w.what = d, fmt.Sprintf("%s in %v", name, allocs)
				}
			}
			for name := range w.since {
				if len(byName[name]) < 2 {
					delete(w.since, name)
				}
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *twiceWatch) close() (time.Duration, string) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.longest, w.what
}

// lifeTimes follows a gang after a kill: when the agent parked it (its
// requeue: the submit time of the first job version in the parking pool
// after the kill) and when it ran whole again as a new pair.
func (e *lcEnv) lifeTimes(name string, first []lcAlloc, killed time.Time, d time.Duration) (requeued, again time.Duration, now []lcAlloc) {
	e.t.Helper()
	eventually(e.t, d, name+" running whole again as a new pair", func() (bool, string) {
		now = e.running(name)
		fresh := 0
		for _, a := range now {
			if a.ID != first[0].ID && a.ID != first[1].ID {
				fresh++
			}
		}
		return len(now) == 2 && fresh == 2, fmt.Sprintf("%+v; pool %s; explain %s", e.allocsOf(name), e.job(name).NodePool, e.explain(name))
	})
	again = time.Since(killed)
	var vs struct {
		Versions []struct {
			NodePool   string
			SubmitTime int64
		}
	}
	if err := e.a.Get("/v1/job/"+name+"/versions", &vs); err != nil {
		e.t.Fatal(err)
	}
	for _, v := range vs.Versions {
		at := time.Unix(0, v.SubmitTime)
		if v.NodePool == "impact-queue" && at.After(killed) && (requeued == 0 || at.Sub(killed) < requeued) {
			requeued = at.Sub(killed)
		}
	}
	return requeued, again, now
}

// clientOf is the cluster client running node ID.
func (e *lcEnv) clientOf(nodeID string) *nomadagent.Client {
	e.t.Helper()
	var nodes []struct{ ID, Name string }
	if err := e.a.Get("/v1/nodes", &nodes); err != nil {
		e.t.Fatal(err)
	}
	for _, n := range nodes {
		if n.ID != nodeID {
			continue
		}
		for _, cl := range e.c.Clients {
			if cl.Name == n.Name {
				return cl
			}
		}
	}
	e.t.Fatalf("no client for node %s", nodeID)
	return nil
}

// logDecisions logs what the impact agent said about the job's gang
// (from the tail of its output).
func (e *lcEnv) logDecisions(name string) {
	e.t.Helper()
	for _, line := range strings.Split(e.impactProc.Output(), "\n") {
		if strings.Contains(line, "default/"+name) && (strings.Contains(line, "gang") || strings.Contains(line, "replacement")) {
			e.t.Log(strings.TrimSpace(line))
		}
	}
}

func (e *lcEnv) nodeStatus(id string) string {
	var n struct{ Status string }
	_ = e.a.Get("/v1/node/"+id, &n)
	return n.Status
}

func (e *lcEnv) requeues() int {
	n, _ := strconv.Atoi(e.metric("impact_gangs_requeued_total"))
	return n
}

func TestGangLife(t *testing.T) {
	e := setupClusterWith(t, "impact-e2e-ganglife-", fmt.Sprintf(`
gangs {
  missing_member_grace = %q
}
`, lifeGrace), `
server {
  heartbeat_grace   = "1s"
  min_heartbeat_ttl = "2s"
}
`)
	marks := filepath.Join(e.dir, "marks")
	if err := os.MkdirAll(marks, 0o777); err != nil {
		t.Fatal(err)
	}

	t.Run("a member killed: requeued whole and running again", func(t *testing.T) {
		e.t = t
		runHCL(t, e.a, e.dir, "life-a", lifeJob("life-a", marks))
		t.Cleanup(func() { _, _ = e.nomad("job", "stop", "-purge", "-detach", "life-a") })
		first := e.waitRunningN("life-a", 2, 120*time.Second)
		before := e.requeues()
		pid := memberPID(t, marks, first[0].ID)
		killed := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// The survivor's collective fails: it checkpoints and exits 75.
		if err := os.WriteFile(filepath.Join(marks, "abort-"+first[1].ID), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		// Both allocations fail (restart attempts 0), nothing replaces
		// them: Nomad marks the job dead (the agent may have requeued and
		// admitted it again by the time this looks).
		eventually(t, 30*time.Second, "both members of the first run failed", func() (bool, string) {
			failed := 0
			for _, a := range e.allocsOf("life-a") {
				if (a.ID == first[0].ID || a.ID == first[1].ID) && a.ClientStatus == "failed" {
					failed++
				}
			}
			return failed == 2, fmt.Sprintf("%+v", e.allocsOf("life-a"))
		})
		requeued, again, now := e.lifeTimes("life-a", first, killed, 120*time.Second)
		t.Logf("member killed: requeued (parked) %v after the kill, running whole again %v after it, on %v",
			requeued.Round(100*time.Millisecond), again.Round(100*time.Millisecond), nodesOfAllocs(now))
		if requeued == 0 || requeued > lifeGrace {
			t.Errorf("requeued %v after the kill: a dead gang is requeued at once, not after the grace of %v", requeued, lifeGrace)
		}
		if got := e.requeues() - before; got != 1 {
			t.Errorf("impact_gangs_requeued_total rose by %d, want 1", got)
		}
		for _, a := range e.allocsOf("life-a") {
			if (a.ID == first[0].ID || a.ID == first[1].ID) && a.ClientStatus != "failed" {
				t.Errorf("first run's allocation %s is %s, want failed (restart attempts 0)", a.ID, a.ClientStatus)
			}
		}
		e.logDecisions("life-a")
		e.purgeAll("life-a")
	})

	t.Run("a client back inside the grace: no member runs twice", func(t *testing.T) {
		e.t = t
		runHCL(t, e.a, e.dir, "life-b", lifeJob("life-b", marks))
		t.Cleanup(func() { _, _ = e.nomad("job", "stop", "-purge", "-detach", "life-b") })
		first := e.waitRunningN("life-b", 2, 120*time.Second)
		before := e.requeues()
		victim := e.clientOf(first[0].NodeID)
		w := watchTwice(marks)
		killed := time.Now()
		victim.Kill() // its tasks keep running: the orphan
		eventually(t, 60*time.Second, "node down", func() (bool, string) {
			s := e.nodeStatus(first[0].NodeID)
			return s == "down", s
		})
		down := time.Since(killed)
		victim.Start()
		e.c.WaitNodes(90*time.Second, 3, "the killed client back", nil)
		back := time.Since(killed)
		requeued, again, now := e.lifeTimes("life-b", first, killed, 180*time.Second)
		twice, what := w.close()
		repl := 0
		for _, a := range e.allocsOf("life-b") {
			if a.ID != first[0].ID && a.ID != first[1].ID && a.NodeID == first[0].NodeID {
				repl++
			}
		}
		t.Logf("client back inside the grace: node down %v after the kill, client ready again %v, requeued (parked) %v, running whole again %v on %v; "+
			"allocations on the returned node besides the first run's: %d; longest a member name ran in two processes: %v (%s)",
			down.Round(100*time.Millisecond), back.Round(100*time.Millisecond), requeued.Round(100*time.Millisecond),
			again.Round(100*time.Millisecond), nodesOfAllocs(now), repl, twice.Round(10*time.Millisecond), what)
		if requeued == 0 || requeued > back+lifeGrace {
			t.Errorf("requeued %v after the kill: want within one grace (%v) of the first missing moment", requeued, lifeGrace)
		}
		if got := e.requeues() - before; got != 1 {
			t.Errorf("impact_gangs_requeued_total rose by %d, want 1", got)
		}
		// Nomad starts its replacement before anyone can stop it and
		// kills the orphan once the client syncs; the overlap must not
		// outlast that (kill_timeout 2s), let alone run on.
		if twice > 5*time.Second {
			t.Errorf("%s ran in two processes for %v", what, twice)
		}
		e.logDecisions("life-b")
		e.purgeAll("life-b")
	})

	t.Run("a client kept down: requeued whole once the grace has passed", func(t *testing.T) {
		e.t = t
		runHCL(t, e.a, e.dir, "life-c", lifeJob("life-c", marks))
		t.Cleanup(func() { _, _ = e.nomad("job", "stop", "-purge", "-detach", "life-c") })
		first := e.waitRunningN("life-c", 2, 120*time.Second)
		before := e.requeues()
		victim := e.clientOf(first[0].NodeID)
		killed := time.Now()
		victim.Kill()
		t.Logf("killed %s: %d task process(es)", victim.Name, victim.KillTasks())
		eventually(t, 60*time.Second, "node down", func() (bool, string) {
			s := e.nodeStatus(first[0].NodeID)
			return s == "down", s
		})
		down := time.Since(killed)
		requeued, again, now := e.lifeTimes("life-c", first, killed, 180*time.Second)
		t.Logf("client kept down: node down %v after the kill, requeued (parked) %v, running whole again %v on %v",
			down.Round(100*time.Millisecond), requeued.Round(100*time.Millisecond), again.Round(100*time.Millisecond), nodesOfAllocs(now))
		// The grace counts once, from the first missing moment (the
		// node down, or its member lost): not restarted by what Nomad
		// does meanwhile.
		if requeued < lifeGrace || requeued > down+lifeGrace+15*time.Second {
			t.Errorf("requeued %v after the kill (node down at %v): want one grace (%v) after the member went missing", requeued, down, lifeGrace)
		}
		for _, a := range now {
			if a.NodeID == first[0].NodeID {
				t.Errorf("member %s on the node that is down", a.ID)
			}
		}
		if got := e.requeues() - before; got != 1 {
			t.Errorf("impact_gangs_requeued_total rose by %d, want 1", got)
		}
		victim.Start()
		e.c.WaitNodes(90*time.Second, 3, "the killed client back", nil)
		e.logDecisions("life-c")
		e.purgeAll("life-c")
	})
}
