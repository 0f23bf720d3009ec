package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/driver/internal/nomadbarrier"
	"github.com/impact-sched/nomad-impact/gang"
	"github.com/impact-sched/nomad-impact/internal/testwait"
)

// The test binary doubles as the supervisor: Launch runs `<test> supervise DIR`.
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == "supervise" {
		os.Exit(Supervise(os.Args[2], hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Debug})))
	}
	// Supervisors are this (maybe race-instrumented) binary: without this
	// the race runtime sleeps a second at every supervisor's exit.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	os.Exit(m.Run())
}

func testSpec(t *testing.T, script string) (Spec, string) {
	t.Helper()
	dir := t.TempDir()
	task := filepath.Join(dir, "task")
	os.MkdirAll(task, 0o755)
	return Spec{
		Version: SpecVersion, TaskID: "alloc/" + t.Name() + "/1", Command: "/bin/sh", Args: []string{"-c", script},
		Dir: task, Env: map[string]string{"PATH": "/usr/bin:/bin", "GREETING": "hello"},
		StdoutPath: filepath.Join(dir, "stdout"), StderrPath: filepath.Join(dir, "stderr"),
		KillSignal: "SIGTERM", KillTimeout: 2 * time.Second,
	}, filepath.Join(dir, "state")
}

func launch(t *testing.T, spec Spec, state string) *Process {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Launch(context.Background(), exe, state, spec, hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	t.Cleanup(func() { _ = p.Stop(syscall.SIGKILL, 0) })
	return p
}

func wait(t *testing.T, p *Process, d time.Duration) Exit {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ex, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	return ex
}

func TestExitCodeEnvAndLogs(t *testing.T) {
	t.Parallel()
	spec, state := testSpec(t, `echo "$GREETING from $(pwd)"; echo oops >&2; exit 3`)
	p := launch(t, spec, state)
	ex := wait(t, p, 10*time.Second)
	if ex.ExitCode != 3 || ex.Signal != 0 || ex.Stopped {
		t.Fatalf("exit: %+v", ex)
	}
	out, _ := os.ReadFile(spec.StdoutPath)
	if got := strings.TrimSpace(string(out)); got != "hello from "+spec.Dir {
		t.Fatalf("stdout %q", got)
	}
	errOut, _ := os.ReadFile(spec.StderrPath)
	if strings.TrimSpace(string(errOut)) != "oops" {
		t.Fatalf("stderr %q", errOut)
	}
	// Waiting again returns the same result at once.
	if ex2 := wait(t, p, time.Second); ex2.ExitCode != 3 {
		t.Fatalf("second wait: %+v", ex2)
	}
}

func TestStopEscalatesToSIGKILL(t *testing.T) {
	t.Parallel()
	ready := "ready"
	// TERM is trapped and ignored, so only SIGKILL ends the task.
	spec, state := testSpec(t, `trap 'echo got-term' TERM; echo x > `+ready+`; while true; do sleep 0.05; done`)
	p := launch(t, spec, state)
	testwait.File(t, filepath.Join(spec.Dir, ready), 10*time.Second)
	start := time.Now()
	if err := p.Stop(syscall.SIGTERM, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("stop returned after %s, before the kill timeout", el)
	}
	ex := wait(t, p, 5*time.Second)
	if ex.Signal != int(syscall.SIGKILL) || ex.ExitCode != 137 || !ex.Stopped {
		t.Fatalf("exit: %+v", ex)
	}
}

func TestStopWithSignalBeforeTimeout(t *testing.T) {
	t.Parallel()
	spec, state := testSpec(t, `echo x > ready; exec sleep 30`)
	p := launch(t, spec, state)
	testwait.File(t, filepath.Join(spec.Dir, "ready"), 10*time.Second)
	if err := p.Stop(syscall.SIGINT, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	ex := wait(t, p, time.Second)
	if ex.Signal != int(syscall.SIGINT) || ex.ExitCode != 130 {
		t.Fatalf("exit: %+v", ex)
	}
}

func TestSignalForwarded(t *testing.T) {
	t.Parallel()
	spec, state := testSpec(t, `trap 'echo usr1 > got; exit 0' USR1; echo x > ready; while true; do sleep 0.05; done`)
	p := launch(t, spec, state)
	testwait.File(t, filepath.Join(spec.Dir, "ready"), 10*time.Second)
	sig, err := ParseSignal("SIGUSR1")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(sig); err != nil {
		t.Fatal(err)
	}
	if ex := wait(t, p, 10*time.Second); ex.ExitCode != 0 || ex.Signal != 0 {
		t.Fatalf("exit: %+v", ex)
	}
	if got := testwait.File(t, filepath.Join(spec.Dir, "got"), time.Second); strings.TrimSpace(got) != "usr1" {
		t.Fatalf("got %q", got)
	}
	if err := p.Signal(sig); err == nil {
		t.Fatal("signalling an exited task should fail")
	}
}

func TestAttachAfterPluginLoss(t *testing.T) {
	t.Parallel()
	spec, state := testSpec(t, `echo x > ready; exec sleep 30`)
	p := launch(t, spec, state)
	testwait.File(t, filepath.Join(spec.Dir, "ready"), 10*time.Second)
	// A new plugin process only has the persisted state.
	q, err := Attach(p.State(), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	// The child may write "ready" before the supervisor records it.
	var st Status
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err = q.Status()
		if err == nil && st.Phase == PhaseRunning && st.ChildPID > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status: %+v %v", st, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s := NewStatsTracker().Sample(st.ChildPID)
	if s.Agg.RSS == 0 || len(s.ByPID) == 0 {
		t.Fatalf("stats of the recovered task: %+v", s)
	}
	if err := q.Stop(syscall.SIGTERM, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if ex := wait(t, q, 5*time.Second); ex.Signal != int(syscall.SIGTERM) {
		t.Fatalf("exit: %+v", ex)
	}
	// Attaching to an exited task works and reports its exit; a bogus pid does not.
	if r, err := Attach(p.State(), hclog.NewNullLogger()); err != nil || !r.Exited() {
		t.Fatalf("attach to exited: %v", err)
	}
	bad := p.State()
	os.Remove(filepath.Join(bad.Dir, ExitFile))
	bad.SupervisorStart++
	if _, err := Attach(bad, hclog.NewNullLogger()); err == nil {
		t.Fatal("attach with a mismatched start time should fail")
	}
}

func TestBadCommand(t *testing.T) {
	t.Parallel()
	spec, state := testSpec(t, "")
	spec.Command, spec.Args = "no-such-command-xyz", nil
	p := launch(t, spec, state)
	ex := wait(t, p, 10*time.Second)
	if ex.ExitCode == 0 || !strings.Contains(ex.Err, "not found") {
		t.Fatalf("exit: %+v", ex)
	}
}

func gangSpec(t *testing.T, url string, i, size int, script string) (Spec, string) {
	spec, state := testSpec(t, script)
	spec.Gang = &GangSpec{URL: url, ID: "default:train", Member: gang.MemberID(fmt.Sprintf("alloc%d", i), "t"),
		Join: gang.JoinRequest{Size: size, Namespace: "default", JobID: "train", AllocID: fmt.Sprintf("alloc%d", i),
			AllocIndex: i, Task: "t", NodeID: "n1", Addr: "127.0.0.1", Port: 29500 + i},
		Timeout: 10 * time.Second, Heartbeat: 200 * time.Millisecond, Propagate: true,
		CheckpointSignal: "SIGUSR1", Grace: 2 * time.Second}
	return spec, state
}

func events(t *testing.T, p *Process) string {
	evs, _, err := p.Events(0)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, e := range evs {
		msgs = append(msgs, e.Message)
	}
	return strings.Join(msgs, "\n")
}

func TestGangRendezvousEnv(t *testing.T) {
	t.Parallel()
	srv := startGangServer(t)
	const n = 3
	procs := make([]*Process, n)
	specs := make([]Spec, n)
	for i := range n {
		var state string
		specs[i], state = gangSpec(t, srv.URL, i, n, `echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT"`)
		procs[i] = launch(t, specs[i], state)
	}
	for i := range n {
		if ex := wait(t, procs[i], 20*time.Second); ex.ExitCode != 0 {
			t.Fatalf("member %d: %+v", i, ex)
		}
		out, _ := os.ReadFile(specs[i].StdoutPath)
		want := fmt.Sprintf("%d 3 %d 3 127.0.0.1 29500", i, i)
		if strings.TrimSpace(string(out)) != want {
			t.Errorf("member %d printed %q, want %q", i, out, want)
		}
		if ev := events(t, procs[i]); !strings.Contains(ev, fmt.Sprintf("rank %d of 3", i)) {
			t.Errorf("member %d events: %s", i, ev)
		}
	}
}

func TestGangBarrierTimeout(t *testing.T) {
	t.Parallel()
	srv := startGangServer(t)
	spec, state := gangSpec(t, srv.URL, 0, 2, `echo started > started`)
	spec.Gang.Timeout = time.Second
	p := launch(t, spec, state)
	ex := wait(t, p, 10*time.Second)
	if ex.ExitCode != 1 || !strings.Contains(ex.Err, "1 of 2 members arrived") {
		t.Fatalf("exit: %+v", ex)
	}
	if ev := events(t, p); !strings.Contains(ev, "Gang barrier timed out after 1s: 1 of 2 members arrived") {
		t.Fatalf("events: %s", ev)
	}
	if fileExists(filepath.Join(spec.Dir, "started")) {
		t.Fatal("the command ran although the gang never completed")
	}
}

func TestGangStopWhileWaiting(t *testing.T) {
	t.Parallel()
	srv := startGangServer(t)
	spec, state := gangSpec(t, srv.URL, 0, 2, `echo started > started`)
	p := launch(t, spec, state)
	// A non-terminating kill signal (job kill_signal = "SIGUSR2") still
	// aborts the wait: the plugin marks the stop first.
	if err := p.Stop(syscall.SIGUSR2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	ex := wait(t, p, time.Second)
	if !ex.Stopped || !strings.Contains(ex.Err, "barrier") {
		t.Fatalf("exit: %+v", ex)
	}
	if fileExists(filepath.Join(spec.Dir, "started")) {
		t.Fatal("command ran")
	}
}

// A failing member makes its running peers checkpoint and stop.
func TestGangFailurePropagates(t *testing.T) {
	t.Parallel()
	srv := startGangServer(t)
	peer := `trap 'echo ckpt > checkpointed' USR1; trap 'exit 143' TERM; echo x > ready; while true; do sleep 0.05; done`
	var wg sync.WaitGroup
	specs := make([]Spec, 3)
	procs := make([]*Process, 3)
	for i := range 3 {
		script := peer
		if i == 2 {
			script = `while [ ! -f ../go ]; do sleep 0.05; done; exit 7`
		}
		var state string
		specs[i], state = gangSpec(t, srv.URL, i, 3, script)
		specs[i].Gang.Grace = 300 * time.Millisecond
		procs[i] = launch(t, specs[i], state)
	}
	for i := range 2 {
		testwait.File(t, filepath.Join(specs[i].Dir, "ready"), 20*time.Second)
	}
	os.WriteFile(filepath.Join(filepath.Dir(specs[2].Dir), "go"), []byte("1"), 0o644)
	if ex := wait(t, procs[2], 10*time.Second); ex.ExitCode != 7 {
		t.Fatalf("failing member: %+v", ex)
	}
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ex := wait(t, procs[i], 20*time.Second)
			if !ex.Stopped || ex.ExitCode != 143 || !strings.Contains(ex.Err, "gang") {
				t.Errorf("peer %d: %+v", i, ex)
			}
			if got := testwait.File(t, filepath.Join(specs[i].Dir, "checkpointed"), time.Second); strings.TrimSpace(got) != "ckpt" {
				t.Errorf("peer %d checkpoint: %q", i, got)
			}
			if ev := events(t, procs[i]); !strings.Contains(ev, "sending checkpoint signal SIGUSR1") || !strings.Contains(ev, "exited with code 7") {
				t.Errorf("peer %d events: %s", i, ev)
			}
		}()
	}
	wg.Wait()
	st, err := srv.Registry.List(), error(nil)
	if len(st) != 1 || st[0].State != gang.StateFailed {
		t.Fatalf("gang: %+v %v", st, err)
	}
}

func TestMemoryLimitOOM(t *testing.T) {
	t.Parallel()
	probe := filepath.Join(CgroupRoot, "memory", "impact-exec-probe")
	if _, err := os.Stat(filepath.Join(CgroupRoot, "cgroup.controllers")); err != nil {
		if err := os.MkdirAll(probe, 0o755); err != nil {
			t.Skipf("cannot create cgroups here: %v", err)
		}
		os.Remove(probe)
	} else if os.Geteuid() != 0 {
		t.Skip("cgroup v2 needs root")
	}
	// tail keeps a newline-free stream in memory: far beyond 32 MiB.
	spec, state := testSpec(t, `head -c 300000000 /dev/zero | tail > /dev/null; echo survived`)
	spec.Resources = Resources{MemoryLimitBytes: 32 << 20, CPUShares: 100}
	p := launch(t, spec, state)
	ex := wait(t, p, 30*time.Second)
	if !ex.OOMKilled {
		out, _ := os.ReadFile(spec.StdoutPath)
		log, _ := os.ReadFile(filepath.Join(state, LogFile))
		t.Fatalf("exit: %+v, want OOM killed; events: %s; stdout %s; log %s", ex, events(t, p), out, log)
	}
	if ev := events(t, p); !strings.Contains(ev, "OOM killed") {
		t.Fatalf("events: %s", ev)
	}
	// The task's cgroup is removed afterwards.
	if _, err := os.Stat(filepath.Join(CgroupRoot, "memory", "impact-exec", cgroupName(spec.TaskID))); err == nil {
		t.Fatal("task cgroup left behind")
	}
}

// Running members survive a restart of the rendezvous server: they
// re-register with their ranks, and failure propagation still works.
func TestGangSurvivesServerRestart(t *testing.T) {
	// Not parallel: it reuses its server's port after closing it.
	srv, err := gang.StartServer("127.0.0.1:0", gang.RegistryConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(srv.URL, "http://")
	peer := `trap 'exit 143' INT; echo x > ready; while [ ! -f ../fail ]; do sleep 0.05; done; exit 9`
	specs := make([]Spec, 2)
	procs := make([]*Process, 2)
	for i := range 2 {
		var state string
		specs[i], state = gangSpec(t, srv.URL, i, 2, peer)
		specs[i].Gang.CheckpointSignal = ""
		specs[i].KillSignal = "SIGINT"
		procs[i] = launch(t, specs[i], state)
	}
	for i := range 2 {
		testwait.File(t, filepath.Join(specs[i].Dir, "ready"), 20*time.Second)
	}
	srv.Close()
	srv2, err := gang.StartServer(addr, gang.RegistryConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _, err := srv2.Registry.Get("default:train")
		if err == nil && st.Arrived == 2 && st.State == gang.StateReady && st.MasterPort == 29500 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("members did not re-register: %+v %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := range 2 {
		if procs[i].Exited() {
			t.Fatalf("member %d stopped when the server restarted", i)
		}
	}
	os.WriteFile(filepath.Join(filepath.Dir(specs[1].Dir), "fail"), []byte("1"), 0o644)
	if ex := wait(t, procs[1], 10*time.Second); ex.ExitCode != 9 {
		t.Fatalf("failing member: %+v", ex)
	}
	if ex := wait(t, procs[0], 10*time.Second); ex.ExitCode != 143 || !ex.Stopped {
		t.Fatalf("peer after failure on the new server: %+v", ex)
	}
	if ev := events(t, procs[0]); !strings.Contains(ev, "re-registered as rank 0") {
		t.Fatalf("events: %s", ev)
	}
}

type fakeNomad struct {
	mu   sync.Mutex
	regs []nomadbarrier.ServiceRegistration
}

func (f *fakeNomad) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/service/train-rdzv" || r.URL.Query().Get("namespace") != "default" {
		http.Error(w, "unexpected "+r.URL.String(), 404)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	json.NewEncoder(w).Encode(f.regs)
}

func (f *fakeNomad) set(regs ...nomadbarrier.ServiceRegistration) {
	f.mu.Lock()
	f.regs = regs
	f.mu.Unlock()
}

// Rendezvous through Nomad's service discovery: ranks follow the
// alloc_index tags, and a member leaving the service stops the others.
func TestGangNomadDiscovery(t *testing.T) {
	t.Parallel()
	fn := &fakeNomad{}
	srv := httptest.NewServer(fn)
	defer srv.Close()
	reg := func(alloc string, idx int, port int) nomadbarrier.ServiceRegistration {
		return nomadbarrier.ServiceRegistration{ID: "_nomad-task-" + alloc, ServiceName: "train-rdzv", NodeID: "n1",
			AllocID: alloc, Address: "127.0.0.1", Port: port, Tags: []string{fmt.Sprintf("alloc_index=%d", idx)}}
	}
	script := `echo "$RANK $WORLD_SIZE $MASTER_PORT" > rank; trap 'exit 130' INT; while true; do sleep 0.05; done`
	specs := make([]Spec, 2)
	procs := make([]*Process, 2)
	for i := range 2 {
		var state string
		specs[i], state = gangSpec(t, "", i, 2, script)
		specs[i].Gang.Discovery, specs[i].Gang.Service, specs[i].Gang.NomadAddr = "nomad", "train-rdzv", srv.URL
		specs[i].Gang.CheckpointSignal, specs[i].KillSignal = "", "SIGINT"
		if i == 0 {
			procs[i] = launch(t, specs[i], state)
			fn.set(reg("alloc0", 1, 20000))
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(events(t, procs[0]), "1 of 2 members arrived") {
				if time.Now().After(deadline) {
					t.Fatalf("no progress event: %s", events(t, procs[0]))
				}
				time.Sleep(10 * time.Millisecond)
			}
			if fileExists(filepath.Join(specs[0].Dir, "rank")) {
				t.Fatal("member started before its peer registered")
			}
			continue
		}
		procs[i] = launch(t, specs[i], state)
	}
	fn.set(reg("alloc0", 1, 20000), reg("alloc1", 0, 20001))
	// alloc1 has alloc_index 0: it is rank 0 and the master.
	if got := strings.TrimSpace(testwait.File(t, filepath.Join(specs[1].Dir, "rank"), 10*time.Second)); got != "0 2 20001" {
		t.Fatalf("alloc1: %q", got)
	}
	if got := strings.TrimSpace(testwait.File(t, filepath.Join(specs[0].Dir, "rank"), 10*time.Second)); got != "1 2 20001" {
		t.Fatalf("alloc0: %q", got)
	}
	// alloc1's allocation stops: its registration goes, alloc0 stops.
	procs[1].Stop(syscall.SIGINT, 5*time.Second)
	fn.set(reg("alloc0", 1, 20000))
	ex := wait(t, procs[0], 10*time.Second)
	if !ex.Stopped || ex.ExitCode != 130 {
		t.Fatalf("alloc0 after its peer left: %+v", ex)
	}
	if ev := events(t, procs[0]); !strings.Contains(ev, "member allocation alloc1 left service train-rdzv") {
		t.Fatalf("events: %s", ev)
	}
}

func TestRunsAsTaskUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root")
	}
	if _, err := user.Lookup("nobody"); err != nil {
		t.Skip("no user nobody")
	}
	spec, state := testSpec(t, `id -un`)
	spec.User = "nobody"
	// The task user needs to reach its task dir.
	for d := spec.Dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	p := launch(t, spec, state)
	if ex := wait(t, p, 10*time.Second); ex.ExitCode != 0 {
		t.Fatalf("exit: %+v", ex)
	}
	if out, _ := os.ReadFile(spec.StdoutPath); strings.TrimSpace(string(out)) != "nobody" {
		t.Fatalf("ran as %q", out)
	}
	spec, state = testSpec(t, `true`)
	spec.User = "no-such-user-xyz"
	p = launch(t, spec, state)
	if ex := wait(t, p, 10*time.Second); ex.ExitCode == 0 || !strings.Contains(ex.Err, `task user "no-such-user-xyz"`) {
		t.Fatalf("unknown user: %+v", ex)
	}
}

// fakeConsul answers the health query for the impact agent's service with
// the current leader's address.
type fakeConsul struct {
	mu     sync.Mutex
	leader string // host:port
}

func (f *fakeConsul) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/health/service/impact-scheduler" || r.URL.Query().Get("tag") != "leader" {
		http.Error(w, "unexpected "+r.URL.String(), 404)
		return
	}
	f.mu.Lock()
	host, port, _ := strings.Cut(f.leader, ":")
	f.mu.Unlock()
	fmt.Fprintf(w, `[{"Node":{"Address":"127.0.0.9"},"Service":{"Service":"impact-scheduler","Address":%q,"Port":%s,"Tags":["leader"]},"Checks":[]}]`, host, port)
}

func (f *fakeConsul) set(leader string) {
	f.mu.Lock()
	f.leader = leader
	f.mu.Unlock()
}

// Members find the rendezvous server (the leading impact agent) through
// Consul and follow a failover to a new leader without stopping.
func TestGangConsulFailover(t *testing.T) {
	t.Parallel()
	a, err := gang.StartServer("127.0.0.1:0", gang.RegistryConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := gang.StartServer("127.0.0.1:0", gang.RegistryConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fc := &fakeConsul{}
	fc.set(strings.TrimPrefix(a.URL, "http://"))
	csrv := httptest.NewServer(fc)
	defer csrv.Close()

	script := `trap 'exit 130' INT; echo $RANK > rank; while [ ! -f ../fail ]; do sleep 0.05; done; exit 9`
	specs := make([]Spec, 2)
	procs := make([]*Process, 2)
	for i := range 2 {
		var state string
		specs[i], state = gangSpec(t, "", i, 2, script)
		specs[i].Gang.ConsulAddr = strings.TrimPrefix(csrv.URL, "http://")
		specs[i].Gang.ConsulService, specs[i].Gang.ConsulTag = "impact-scheduler", "leader"
		specs[i].Gang.CheckpointSignal, specs[i].KillSignal = "", "SIGINT"
		procs[i] = launch(t, specs[i], state)
	}
	for i := range 2 {
		if got := strings.TrimSpace(testwait.File(t, filepath.Join(specs[i].Dir, "rank"), 20*time.Second)); got != fmt.Sprint(i) {
			t.Fatalf("member %d rank %q", i, got)
		}
	}
	// Failover: Consul now names b; a goes away.
	fc.set(strings.TrimPrefix(b.URL, "http://"))
	a.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, _, err := b.Registry.Get("default:train")
		if err == nil && st.Arrived == 2 && st.State == gang.StateReady {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("members did not move to the new leader: %+v %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	os.WriteFile(filepath.Join(filepath.Dir(specs[1].Dir), "fail"), []byte("1"), 0o644)
	if ex := wait(t, procs[1], 10*time.Second); ex.ExitCode != 9 {
		t.Fatalf("failing member: %+v", ex)
	}
	if ex := wait(t, procs[0], 10*time.Second); ex.ExitCode != 130 || !ex.Stopped {
		t.Fatalf("peer after failover and failure: %+v", ex)
	}
}

func procState(pid int) byte {
	st, err := procStat(pid)
	if err != nil {
		return 0
	}
	return st.state
}

// SIGSTOP cannot be caught: it must freeze the task, not its supervisor
// (a frozen supervisor would stop heartbeating and fail its gang).
func TestSignalStopFreezesTaskNotSupervisor(t *testing.T) {
	t.Parallel()
	p, child := launchSleeper(t)
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "task stopped (state T)", func() bool { return procState(child) == 'T' })
	if s := procState(p.State().SupervisorPID); s == 'T' || s == 0 {
		t.Fatalf("supervisor state %q after SIGSTOP", s)
	}
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "task continued", func() bool { return procState(child) == 'S' || procState(child) == 'R' })
}

// SIGKILL as the stop signal while the task waits at its gang barrier
// aborts the wait through the supervisor: the exit is recorded as a stop
// by SIGKILL and the member leaves its gang.
func TestStopWithSIGKILLAtBarrier(t *testing.T) {
	t.Parallel()
	srv := startGangServer(t)
	spec, state := gangSpec(t, srv.URL, 0, 2, `echo started > started`)
	p := launch(t, spec, state)
	testwait.For(t, 10*time.Second, "member joined", func() bool {
		st, _, err := srv.Registry.Get("default:train")
		return err == nil && st.Arrived == 1
	})
	if err := p.Signal(syscall.SIGKILL); err == nil {
		t.Fatal("SIGKILL before the command runs should be refused, not kill the supervisor")
	}
	if err := p.Stop(syscall.SIGKILL, 0); err != nil {
		t.Fatal(err)
	}
	ex := wait(t, p, 5*time.Second)
	if !ex.Stopped || ex.Signal != int(syscall.SIGKILL) || ex.ExitCode != 137 || !strings.Contains(ex.Err, "barrier") {
		t.Fatalf("exit: %+v", ex)
	}
	if _, _, err := srv.Registry.Get("default:train"); err == nil {
		t.Fatal("the stopped member is still registered in its gang")
	}
	if fileExists(filepath.Join(spec.Dir, "started")) {
		t.Fatal("command ran")
	}
}

// The log paths are FIFOs whose reader (Nomad's logmon) is not there yet:
// the task still starts, and its output waits in the pipe for the reader.
func TestLogFIFOWithoutReader(t *testing.T) {
	t.Parallel()
	spec, state := testSpec(t, `echo one; while [ ! -f go ]; do sleep 0.05; done; echo two`)
	for _, p := range []string{spec.StdoutPath, spec.StderrPath} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := launch(t, spec, state)
	testwait.For(t, 10*time.Second, "task running with nobody reading its log FIFOs", func() bool {
		_, ok := p.runningGroup()
		return ok
	})
	// logmon arrives: what the task wrote meanwhile is there.
	r, err := os.Open(spec.StdoutPath)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, 64)
	n, err := r.Read(buf)
	if err != nil || string(buf[:n]) != "one\n" {
		t.Fatalf("first read: %q %v", buf[:n], err)
	}
	os.WriteFile(filepath.Join(spec.Dir, "go"), []byte("1"), 0o644)
	n, err = r.Read(buf)
	if err != nil || string(buf[:n]) != "two\n" {
		t.Fatalf("second read: %q %v", buf[:n], err)
	}
	if ex := wait(t, p, 10*time.Second); ex.ExitCode != 0 {
		t.Fatalf("exit: %+v", ex)
	}
}

// The supervisor dies (SIGKILL) while its task runs: a new plugin cannot
// recover the task, and kills the orphaned command so that the task Nomad
// starts again does not run beside it.
func TestAttachKillsOrphanOfLostSupervisor(t *testing.T) {
	t.Parallel()
	p, child := launchSleeper(t)
	if err := syscall.Kill(p.State().SupervisorPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if s := procState(child); s == 0 || s == 'Z' {
		t.Fatalf("the task died with its supervisor (state %q): nothing to test", s)
	}
	_, err := Attach(p.State(), hclog.NewNullLogger())
	if !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "orphaned task") {
		t.Fatalf("attach: %v", err)
	}
	testwait.For(t, 5*time.Second, "orphaned task killed", func() bool { s := procState(child); return s == 0 || s == 'Z' })
}

// A grandchild that leaves the task's process group (setsid) is still
// killed when the task ends, through the task's cgroup.
func TestNoGrandchildOutlivesTask(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("cgroups need root")
	}
	spec, state := testSpec(t, `setsid sleep 30 & echo $! > escaped; sleep 0.2`)
	spec.Resources = Resources{MemoryLimitBytes: 256 << 20, CPUShares: 100}
	p := launch(t, spec, state)
	if ex := wait(t, p, 10*time.Second); ex.ExitCode != 0 {
		log, _ := os.ReadFile(filepath.Join(state, LogFile))
		t.Fatalf("exit: %+v; events: %s; log: %s", ex, events(t, p), log)
	}
	if ev := events(t, p); strings.Contains(ev, "not enforced") {
		t.Skipf("no cgroups here: %s", ev)
	}
	var pid int
	if _, err := fmt.Sscan(testwait.File(t, filepath.Join(spec.Dir, "escaped"), time.Second), &pid); err != nil || pid <= 0 {
		t.Fatalf("escaped pid: %v", err)
	}
	testwait.For(t, 5*time.Second, "escaped grandchild killed", func() bool { s := procState(pid); return s == 0 || s == 'Z' })
}

// The task's env reaches the task, but its values do not stay on disk in
// the state dir (readable through `nomad alloc fs`) once the task starts.
func TestSecretsLeaveTheSpecFile(t *testing.T) {
	t.Parallel()
	spec, state := testSpec(t, `echo "$VAULT_TOKEN"`)
	spec.Env["VAULT_TOKEN"] = "s.verysecret"
	spec.Gang = &GangSpec{Discovery: "nomad", Service: "svc", NomadAddr: "http://127.0.0.1:1", NomadToken: "nomad-jwt-secret",
		ID: "default:j", Member: "a.t", Join: gang.JoinRequest{Size: 1, Namespace: "default", JobID: "j", AllocID: "a",
			Task: "t", NodeID: "n", Addr: "127.0.0.1", Port: 1}, Timeout: time.Second, Heartbeat: 50 * time.Millisecond}
	p := launch(t, spec, state)
	for _, secret := range []string{"s.verysecret", "nomad-jwt-secret"} {
		b, err := os.ReadFile(filepath.Join(state, SpecFile))
		if err != nil || strings.Contains(string(b), secret) {
			t.Fatalf("spec file after the start holds %q (%v): %s", secret, err, b)
		}
	}
	wait(t, p, 10*time.Second) // the barrier times out: no Nomad there
	spec2, state2 := testSpec(t, `echo "$VAULT_TOKEN"`)
	spec2.Env["VAULT_TOKEN"] = "s.verysecret"
	p2 := launch(t, spec2, state2)
	if ex := wait(t, p2, 10*time.Second); ex.ExitCode != 0 {
		t.Fatalf("exit: %+v", ex)
	}
	if out, _ := os.ReadFile(spec2.StdoutPath); strings.TrimSpace(string(out)) != "s.verysecret" {
		t.Fatalf("the task did not get its env: %q", out)
	}
	if b, _ := os.ReadFile(filepath.Join(state2, SpecFile)); strings.Contains(string(b), "s.verysecret") || !strings.Contains(string(b), "VAULT_TOKEN") {
		t.Fatalf("spec file: %s", b)
	}
}

// startGangServer starts a rendezvous server, closed at the test's end.
func startGangServer(t *testing.T) *gang.Server {
	t.Helper()
	srv, err := gang.StartServer("127.0.0.1:0", gang.RegistryConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// Destroy removes the state dir, yet waiting afterwards (a WaitTask still
// pending, or a second one) still reports how the task ended.
func TestWaitAfterDestroy(t *testing.T) {
	t.Parallel()
	spec, state := testSpec(t, `exit 4`)
	p := launch(t, spec, state)
	<-p.Done()
	if err := p.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Fatalf("state dir after destroy: %v", err)
	}
	if ex := wait(t, p, time.Second); ex.ExitCode != 4 {
		t.Fatalf("exit after destroy: %+v", ex)
	}
}

// launchSleeper starts a task that sleeps 30s and returns it once its
// command runs, with the command's PID (its process group).
func launchSleeper(t *testing.T) (*Process, int) {
	t.Helper()
	spec, state := testSpec(t, `exec sleep 30`)
	p := launch(t, spec, state)
	var child int
	testwait.For(t, 10*time.Second, "task running", func() bool {
		pg, ok := p.runningGroup()
		child = pg
		return ok
	})
	return p, child
}
