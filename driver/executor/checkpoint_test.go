package executor

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/gang"
	"github.com/impact-sched/nomad-impact/internal/testwait"
)

// fakeLauncher behaves like torchrun toward signals: it starts two worker
// processes (worker.py) and waits on them, checking them only every
// $MONITOR seconds (torchrun's --monitor-interval); on SIGTERM or SIGINT
// it sends that signal to its workers, waits for them and exits 1 (as
// torchrun does); SIGUSR1 it does not handle, so that signal kills it. A
// worker that fails makes it exit 1 (torchrun turns a worker's 75 into 1).
const fakeLauncher = `#!/usr/bin/env python3
import os, signal, subprocess, sys, time
workers = [subprocess.Popen([sys.executable, "worker.py", str(i)]) for i in range(2)]
def forward(sig, frame):
    open("launcher-got-" + signal.Signals(sig).name, "a").write("x\n")
    for w in workers:
        if w.poll() is None:
            w.send_signal(sig)
    for w in workers:
        w.wait()
    sys.exit(1)
signal.signal(signal.SIGTERM, forward)
signal.signal(signal.SIGINT, forward)
while True:
    time.sleep(float(os.environ.get("MONITOR", "60")))
    codes = [w.poll() for w in workers]
    if any(c not in (None, 0) for c in codes):
        sys.exit(1)
    if all(c == 0 for c in codes):
        sys.exit(0)
`

// fakeWorker records every checkpoint signal it gets (one line each,
// "forwarded" if the launcher had got it first, else "direct"),
// finishes its "step" ($STEP seconds, default 0.2, during which a second
// delivery would be recorded too), saves, writes the requeue file and exits 75.
const fakeWorker = `import os, signal, sys, time
i = sys.argv[1]
got = []
def on_signal(sig, frame):
    name = signal.Signals(sig).name
    # "forwarded" when the launcher had got the signal first.
    how = "forwarded" if os.path.exists("launcher-got-" + name) else "direct"
    with open("worker-%s-signals" % i, "a") as f:
        f.write(name + ":" + how + "\n")
    got.append(sig)
for s in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
    signal.signal(s, on_signal)
open("worker-%s-ready" % i, "w").write(str(os.getpid()))
while not got:
    time.sleep(0.01)
time.sleep(float(os.environ.get("STEP", "0.2")))
open("worker-%s-ckpt" % i, "w").write("saved")
rf = os.environ.get("IMPACT_REQUEUE_FILE")
if rf:
    open(rf, "w").write("checkpoint saved\n")
sys.exit(75)
`

// launcherSpec is member 0 of a gang of size (on its own rendezvous
// server, returned) whose command is the fake launcher, installed in the
// task dir as "torchrun".
func launcherSpec(t *testing.T, ckptSignal, to string, size int) (Spec, string, *gang.Server) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not found: the launcher tests run real Python processes")
	}
	srv := startGangServer(t)
	spec, state := gangSpec(t, srv.URL, 0, size, "")
	spec.Command, spec.Args = "torchrun", nil
	spec.Gang.CheckpointSignal, spec.Gang.CheckpointTo, spec.Gang.Grace = ckptSignal, to, 20*time.Second
	spec.RequeueFile, spec.RequeueExitCode = filepath.Join(spec.Dir, ".impact-requeue"), 75
	for name, body := range map[string]string{"torchrun": fakeLauncher, "worker.py": fakeWorker} {
		if err := os.WriteFile(filepath.Join(spec.Dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return spec, state, srv
}

func waitWorkers(t *testing.T, spec Spec) {
	t.Helper()
	for _, i := range []string{"0", "1"} {
		testwait.File(t, filepath.Join(spec.Dir, "worker-"+i+"-ready"), 30*time.Second)
	}
}

// signalsOf is what worker i recorded, one signal name per delivery.
func signalsOf(spec Spec, i string) []string {
	b, _ := os.ReadFile(filepath.Join(spec.Dir, "worker-"+i+"-signals"))
	return strings.Fields(string(b))
}

// The default: the whole process group gets the checkpoint signal, so a
// launcher that does not handle it (torchrun and SIGUSR1) dies of it, and
// the task ends with it; a start event warns about exactly this.
func TestCheckpointToGroupKillsALauncher(t *testing.T) {
	t.Parallel()
	spec, state, _ := launcherSpec(t, "SIGUSR1", "", 1)
	p := launch(t, spec, state)
	waitWorkers(t, spec)
	if err := p.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	ex := wait(t, p, 20*time.Second)
	if ex.Signal != int(syscall.SIGUSR1) && !ex.Requeued {
		t.Fatalf("exit %+v: want the launcher dead of SIGUSR1 (or, if a worker won the race, requeued)", ex)
	}
	if ev := events(t, p); !strings.Contains(ev, `The command runs torchrun and the checkpoint signal SIGUSR1 goes to the whole process group`) ||
		!strings.Contains(ev, `checkpoint_signal_to = "children"`) {
		t.Fatalf("events lack the launcher warning:\n%s", ev)
	}
}

// checkpoint_signal_to = "children": the launcher's workers get the signal
// (once each), the launcher does not; once they have exited the launcher
// gets the kill signal instead of being waited for until its next poll,
// and its exit 1 is reported as the requeue code the workers asked for.
func TestCheckpointToChildren(t *testing.T) {
	t.Parallel()
	spec, state, _ := launcherSpec(t, "SIGUSR1", CheckpointToChildren, 1)
	p := launch(t, spec, state)
	waitWorkers(t, spec)
	start := time.Now()
	if err := p.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	ex := wait(t, p, 20*time.Second)
	took := time.Since(start)
	if ex.ExitCode != 75 || !ex.Requeued || ex.MainExitCode != 1 || ex.Signal != 0 {
		t.Fatalf("exit %+v: want 75 reported for the launcher's 1 (requeue file written)", ex)
	}
	for _, i := range []string{"0", "1"} {
		if got := signalsOf(spec, i); len(got) != 1 || got[0] != "SIGUSR1:direct" {
			t.Errorf("worker %s got %v, want SIGUSR1 once, directly", i, got)
		}
		if !fileExists(filepath.Join(spec.Dir, "worker-"+i+"-ckpt")) {
			t.Errorf("worker %s did not save its checkpoint", i)
		}
	}
	// The launcher got the kill signal (SIGTERM here), not the checkpoint
	// signal (which would have killed it: exit 138).
	if !fileExists(filepath.Join(spec.Dir, "launcher-got-SIGTERM")) {
		t.Errorf("the launcher was not sent its kill signal after its workers exited")
	}
	// Its monitor interval is a minute: it was not waited for.
	if took > 10*time.Second {
		t.Errorf("signal to exit took %s", took)
	}
	ev := events(t, p)
	for _, want := range []string{"Checkpoint signal SIGUSR1 sent to the main process's children", "sending it SIGTERM",
		"after writing its requeue file .impact-requeue (checkpoint saved): reporting the requeue exit code 75"} {
		if !strings.Contains(ev, want) {
			t.Errorf("events lack %q:\n%s", want, ev)
		}
	}
	if strings.Contains(ev, "The command runs torchrun") {
		t.Errorf("launcher warning with checkpoint_signal_to = \"children\":\n%s", ev)
	}
	t.Logf("checkpoint signal to exit: %s", took.Round(time.Millisecond))
}

// checkpoint_signal_to = "main" with a signal the launcher forwards
// (SIGTERM for torchrun): the workers get it from the launcher only (the
// whole group signalled, they would get it directly as well).
func TestCheckpointToMain(t *testing.T) {
	t.Parallel()
	spec, state, _ := launcherSpec(t, "SIGTERM", CheckpointToMain, 1)
	p := launch(t, spec, state)
	waitWorkers(t, spec)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ex := wait(t, p, 20*time.Second)
	if ex.ExitCode != 75 || !ex.Requeued || ex.MainExitCode != 1 {
		t.Fatalf("exit %+v: want 75 reported for the launcher's 1", ex)
	}
	if !fileExists(filepath.Join(spec.Dir, "launcher-got-SIGTERM")) {
		t.Errorf("the launcher did not get the checkpoint signal")
	}
	for _, i := range []string{"0", "1"} {
		if got := signalsOf(spec, i); len(got) != 1 || got[0] != "SIGTERM:forwarded" {
			t.Errorf("worker %s got %v, want SIGTERM once, forwarded by the launcher (never directly)", i, got)
		}
	}
}

// The requeue file maps only a non-zero end, and one left over from an
// earlier run (a restart in place keeps the task dir) counts for nothing.
func TestRequeueFile(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, script string
		stale        bool
		want         int
		requeued     bool
	}{
		{name: "written, exit 1", script: `echo saved > "$IMPACT_REQUEUE_FILE"; exit 1`, want: 42, requeued: true},
		{name: "written, killed", script: `echo saved > "$IMPACT_REQUEUE_FILE"; kill -KILL $$`, want: 42, requeued: true},
		{name: "written, exit 0: done", script: `echo saved > "$IMPACT_REQUEUE_FILE"; exit 0`, want: 0},
		{name: "stale file, exit 3", script: `exit 3`, stale: true, want: 3},
		{name: "not written, exit 75", script: `exit 75`, want: 75},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec, state := testSpec(t, tc.script)
			spec.RequeueFile, spec.RequeueExitCode = filepath.Join(spec.Dir, ".impact-requeue"), 42
			if tc.stale {
				if err := os.WriteFile(spec.RequeueFile, []byte("old"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ex := wait(t, launch(t, spec, state), 10*time.Second)
			if ex.ExitCode != tc.want || ex.Requeued != tc.requeued {
				t.Fatalf("exit %+v, want code %d requeued %t", ex, tc.want, tc.requeued)
			}
		})
	}
}

// A peer's failure: the supervisor's own checkpoint signal goes where
// checkpoint_signal_to says too, and the launcher then gets its kill signal.
func TestCheckpointToChildrenOnGangFailure(t *testing.T) {
	t.Parallel()
	spec, state, srv := launcherSpec(t, "SIGUSR1", CheckpointToChildren, 2)
	peerSpec, peerState := gangSpec(t, srv.URL, 1, 2, `while [ ! -f ../go ]; do sleep 0.05; done; exit 7`)
	p := launch(t, spec, state)
	peer := launch(t, peerSpec, peerState)
	waitWorkers(t, spec)
	os.WriteFile(filepath.Join(filepath.Dir(peerSpec.Dir), "go"), []byte("1"), 0o644)
	if ex := wait(t, peer, 10*time.Second); ex.ExitCode != 7 {
		t.Fatalf("failing member: %+v", ex)
	}
	ex := wait(t, p, 20*time.Second)
	if ex.ExitCode != 75 || !ex.Requeued || ex.MainExitCode != 1 || !ex.Stopped {
		t.Fatalf("exit %+v: want a stop reported as 75 for the launcher's 1", ex)
	}
	for _, i := range []string{"0", "1"} {
		if got := signalsOf(spec, i); len(got) != 1 || got[0] != "SIGUSR1:direct" {
			t.Errorf("worker %s got %v, want SIGUSR1 once, directly", i, got)
		}
	}
	if !fileExists(filepath.Join(spec.Dir, "launcher-got-SIGTERM")) {
		t.Errorf("the launcher was not sent its kill signal after its workers exited")
	}
}

// A checkpoint signal Nomad delivered (a preemption) is not sent again by
// the supervisor when the gang fails within the grace: a second SIGTERM
// would cut torchrun's wait for its workers short.
func TestCheckpointNotResentWithinGrace(t *testing.T) {
	t.Parallel()
	spec, state, srv := launcherSpec(t, "SIGTERM", CheckpointToMain, 2)
	spec.Env["STEP"] = "3"
	peerSpec, peerState := gangSpec(t, srv.URL, 1, 2, `while [ ! -f ../go ]; do sleep 0.05; done; exit 75`)
	p := launch(t, spec, state)
	peer := launch(t, peerSpec, peerState)
	waitWorkers(t, spec)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testwait.File(t, filepath.Join(spec.Dir, "launcher-got-SIGTERM"), 10*time.Second)
	os.WriteFile(filepath.Join(filepath.Dir(peerSpec.Dir), "go"), []byte("1"), 0o644)
	if ex := wait(t, peer, 10*time.Second); ex.ExitCode != 75 {
		t.Fatalf("peer: %+v", ex)
	}
	ex := wait(t, p, 20*time.Second)
	if ex.ExitCode != 75 || !ex.Requeued {
		t.Fatalf("exit %+v", ex)
	}
	if got, _ := os.ReadFile(filepath.Join(spec.Dir, "launcher-got-SIGTERM")); strings.Count(string(got), "x") != 1 {
		t.Errorf("the launcher got SIGTERM %d times, want once", strings.Count(string(got), "x"))
	}
	if ev := events(t, p); !strings.Contains(ev, "checkpoint signal SIGTERM already sent") {
		t.Errorf("events lack the gang failure's \"already sent\":\n%s", ev)
	}
}
