package driver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/impact-sched/nomad-impact/driver/executor"
	"github.com/impact-sched/nomad-impact/internal/testwait"
	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
)

// Behaviour Nomad's own client code and tools rely on (issue 16), checked
// against the built binary through plugintest.

// InspectTask of a running task carries a (zero) exit result: Nomad's
// driver client dereferences it when converting the reply and panics on
// nil. An exited task's result carries its exit code.
func TestInspectTaskAlwaysHasExitResult(t *testing.T) {
	t.Parallel()
	inst := load(t, "")
	ctx := ctxT(t, time.Minute)
	tk := newTask(t, "inspected", `
command = "/bin/sh"
args    = ["-c", "echo x > ready; exec sleep 60"]`, nil)
	start(t, inst, tk)
	testwait.File(t, filepath.Join(tk.dir, "ready"), 10*time.Second)
	resp, err := inst.Driver.InspectTask(ctx, &driverpb.InspectTaskRequest{TaskId: tk.cfg.Id})
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.GetTask(); st.GetState() != driverpb.TaskState_RUNNING || st.Result == nil || st.GetResult().GetExitCode() != 0 {
		t.Fatalf("running task: state %v, result %+v (want RUNNING with a zero result)", st.GetState(), st.Result)
	}

	tk = newTask(t, "finished", `
command = "/bin/sh"
args    = ["-c", "exit 3"]`, nil)
	start(t, inst, tk)
	waitTask(t, inst, tk.cfg.Id, 10*time.Second)
	resp, err = inst.Driver.InspectTask(ctx, &driverpb.InspectTaskRequest{TaskId: tk.cfg.Id})
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.GetTask(); st.GetState() != driverpb.TaskState_EXITED || st.GetResult().GetExitCode() != 3 {
		t.Fatalf("exited task: state %v, result %+v", st.GetState(), st.Result)
	}
}

// ExecTask (Nomad's script checks) merges stdout and stderr into Stdout,
// in the order written, and keeps the last 4 KiB, as Nomad's executor.
func TestExecTaskMergesOutput(t *testing.T) {
	t.Parallel()
	inst := load(t, "")
	ctx := ctxT(t, time.Minute)
	tk := newTask(t, "checked", `
command = "sleep"
args    = ["30"]`, nil)
	start(t, inst, tk)
	cases := []struct {
		name     string
		script   string
		want     func(out []byte) bool
		wantCode int32
	}{
		{"stderr only", "stat notarealfile", func(o []byte) bool { return bytes.Contains(o, []byte("notarealfile")) }, 1},
		{"interleaved", "echo one; echo two >&2; echo three", func(o []byte) bool { return string(o) == "one\ntwo\nthree\n" }, 0},
		{"long output keeps the end", "head -c 10000 /dev/zero | tr '\\0' a; echo; echo END >&2",
			func(o []byte) bool { return len(o) == execOutputMax && bytes.HasSuffix(o, []byte("a\nEND\n")) }, 0},
	}
	for _, c := range cases {
		ex, err := inst.Driver.ExecTask(ctx, &driverpb.ExecTaskRequest{TaskId: tk.cfg.Id,
			Command: []string{"/bin/sh", "-c", c.script}, Timeout: durationpb.New(10 * time.Second)})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !c.want(ex.GetStdout()) || len(ex.GetStderr()) != 0 || ex.GetResult().GetExitCode() != c.wantCode {
			t.Errorf("%s: stdout %q (%d bytes), stderr %q, exit %d (want %d)", c.name, ex.GetStdout(), len(ex.GetStdout()),
				ex.GetStderr(), ex.GetResult().GetExitCode(), c.wantCode)
		}
	}
}

// A task user that does not exist is refused at StartTask, not started to
// fail: the error names it and is not recoverable.
func TestUnknownTaskUserRefusedAtStart(t *testing.T) {
	t.Parallel()
	const name = "alice"
	if _, err := user.Lookup(name); err == nil {
		t.Skipf("user %s exists on this machine", name)
	}
	inst := load(t, "")
	tk := newTask(t, "as-alice", `command = "/bin/true"`, nil)
	tk.cfg.User = name
	_, err := inst.Driver.StartTask(ctxT(t, 30*time.Second), &driverpb.StartTaskRequest{Task: tk.cfg})
	rec, ok := IsRecoverable(err)
	if err == nil || status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "unknown user alice") || !ok || rec {
		t.Fatalf("StartTask as %s: err %v, recoverable %v (detail %v); want InvalidArgument naming the unknown user, not recoverable", name, err, rec, ok)
	}
	if _, err := os.Stat(filepath.Join(tk.dir, ".impact-exec")); err == nil {
		t.Fatal("a supervisor was launched for a task that was refused")
	}
}

// The command is found as Nomad's executor finds it: local/ first, then
// the task dir, then PATH; a script without the execute bit is made
// executable and run.
func TestCommandLookup(t *testing.T) {
	t.Parallel()
	inst := load(t, "")
	script := func(word string) []byte { return []byte("#!/bin/sh\necho " + word + " > out\n") }
	cases := []struct {
		name    string
		command string
		files   map[string][]byte // relative to the task dir, written 0644
		want    string            // what the program that ran wrote
		ran     string            // the file that ran, made executable
	}{
		{"local first", "run.sh", map[string][]byte{"local/run.sh": script("local"), "run.sh": script("taskdir")}, "local", "local/run.sh"},
		{"then the task dir", "run.sh", map[string][]byte{"run.sh": script("taskdir")}, "taskdir", "run.sh"},
		{"relative path", "local/bin/go.sh", map[string][]byte{"local/bin/go.sh": script("relative")}, "relative", "local/bin/go.sh"},
		{"then PATH", "sh", nil, "path", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := `command = "` + c.command + `"`
			if c.files == nil {
				cfg += "\nargs = [\"-c\", \"echo path > out\"]"
			}
			tk := newTask(t, "lookup", cfg, nil)
			for rel, body := range c.files {
				p := filepath.Join(tk.dir, rel)
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, body, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			start(t, inst, tk)
			if res := waitTask(t, inst, tk.cfg.Id, 10*time.Second); res.GetResult().GetExitCode() != 0 || res.GetErr() != "" {
				t.Fatalf("task: %+v", res)
			}
			if got := strings.TrimSpace(testwait.File(t, filepath.Join(tk.dir, "out"), time.Second)); got != c.want {
				t.Fatalf("ran the %q program, want %q", got, c.want)
			}
			if c.ran != "" {
				if fi, err := os.Stat(filepath.Join(tk.dir, c.ran)); err != nil || fi.Mode().Perm()&0o555 != 0o555 {
					t.Errorf("%s was not made executable (%v, %v)", c.ran, fi.Mode(), err)
				}
			}
		})
	}
	t.Run("not found", func(t *testing.T) {
		tk := newTask(t, "missing", `command = "no-such-program-h16"`, nil)
		_, err := inst.Driver.StartTask(ctxT(t, 30*time.Second), &driverpb.StartTaskRequest{Task: tk.cfg})
		rec, _ := IsRecoverable(err)
		if status.Code(err) != codes.InvalidArgument || rec || !strings.Contains(err.Error(), `"no-such-program-h16" not found`) {
			t.Fatalf("missing program: %v (recoverable %v); want it refused at StartTask", err, rec)
		}
	})
}

// A task running as another user sees that user's USER, LOGNAME and HOME
// (the task's own env said otherwise), in its command and in exec.
func TestTaskUserEnv(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root")
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	inst := load(t, "")
	tk := newTask(t, "as-nobody", `
command = "/bin/sh"
args    = ["-c", "echo $USER $LOGNAME $HOME > /tmp/impact-exec-h16-env-$NOMAD_ALLOC_ID; exec sleep 30"]`,
		map[string]string{"USER": "root", "LOGNAME": "root", "HOME": "/root", "NOMAD_ALLOC_ID": "x" + time.Now().Format("150405.000000000")})
	tk.cfg.User = "nobody"
	for d := tk.dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	out := "/tmp/impact-exec-h16-env-" + tk.cfg.Env["NOMAD_ALLOC_ID"]
	t.Cleanup(func() { os.Remove(out) })
	start(t, inst, tk)
	want := u.Username + " " + u.Username + " " + u.HomeDir
	if got := strings.TrimSpace(testwait.File(t, out, 10*time.Second)); got != want {
		t.Fatalf("task env USER LOGNAME HOME = %q, want %q", got, want)
	}
	ex, err := inst.Driver.ExecTask(ctxT(t, 30*time.Second), &driverpb.ExecTaskRequest{TaskId: tk.cfg.Id,
		Command: []string{"/bin/sh", "-c", "echo $USER $LOGNAME $HOME"}, Timeout: durationpb.New(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(ex.GetStdout())); got != want {
		t.Fatalf("exec env USER LOGNAME HOME = %q, want %q", got, want)
	}
}

// taskStatus reads the supervisor's status file of a task started by the
// tests (its state dir lies in the task dir).
func taskStatus(t *testing.T, tk task) executor.Status {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(tk.dir, ".impact-exec", "*", executor.StatusFile))
	if len(dirs) != 1 {
		t.Fatalf("status files of %s: %v", tk.cfg.Id, dirs)
	}
	var st executor.Status
	b, err := os.ReadFile(dirs[0])
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// dead: the process is gone or a zombie (nothing of it runs).
func dead(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X')
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(testwait.File(t, path, 10*time.Second)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}

// The supervisor of a running task is killed (or frozen). WaitTask
// reports the loss distinctly (exit code -1, an error naming the
// supervisor), and a forced DestroyTask leaves no process of the task (its
// command, a child in its process group, a grandchild that left the group
// with setsid) and no cgroup, whether or not WaitTask ran first.
func TestSupervisorKilledForcedDestroyLeavesNothing(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		sig       syscall.Signal // sent to the supervisor
		waitFirst bool
	}{
		{"killed, destroyed at once", syscall.SIGKILL, false},
		{"killed, waited, destroyed", syscall.SIGKILL, true},
		{"frozen, destroyed", syscall.SIGSTOP, false},
	}
	for _, c := range cases {
		waitFirst := c.waitFirst
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			inst := load(t, "")
			tk := newTask(t, "orphaned", `
command = "/bin/sh"
args    = ["-c", "setsid sleep 300 & echo $! > escapee; sleep 300 & echo $! > child; echo $$ > main; wait"]`, nil)
			tk.cfg.Resources = &driverpb.Resources{LinuxResources: &driverpb.LinuxResources{MemoryLimitBytes: 256 << 20, CpuShares: 100}}
			handle := start(t, inst, tk)
			pids := map[string]int{}
			for _, f := range []string{"main", "child", "escapee"} {
				pids[f] = readPID(t, filepath.Join(tk.dir, f))
			}
			st := taskStatus(t, tk)
			var cgs *executor.CgroupSet = st.Cgroups
			if cgs == nil {
				t.Log("no cgroups on this machine: the setsid grandchild cannot be tracked and is not checked")
				delete(pids, "escapee")
				syscall.Kill(readPID(t, filepath.Join(tk.dir, "escapee")), syscall.SIGKILL)
			}
			var ds driverState
			if err := json.Unmarshal(handle.GetDriverState(), &ds); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(ds.Executor.SupervisorPID, c.sig); err != nil {
				t.Fatal(err)
			}
			if c.sig == syscall.SIGSTOP {
				t.Cleanup(func() { syscall.Kill(ds.Executor.SupervisorPID, syscall.SIGKILL) })
			}
			ctx := ctxT(t, 30*time.Second)
			if waitFirst {
				res := waitTask(t, inst, tk.cfg.Id, 20*time.Second)
				if res.GetResult().GetExitCode() != -1 || !strings.Contains(res.GetErr(), "supervisor") {
					t.Fatalf("WaitTask after the supervisor was killed: %+v; want exit code -1 and an error naming the supervisor", res)
				}
				ins, err := inst.Driver.InspectTask(ctx, &driverpb.InspectTaskRequest{TaskId: tk.cfg.Id})
				if err != nil || ins.GetTask().GetState() != driverpb.TaskState_UNKNOWN || ins.GetTask().GetResult().GetExitCode() != -1 {
					t.Fatalf("InspectTask after the loss: %+v %v", ins.GetTask(), err)
				}
			}
			if _, err := inst.Driver.DestroyTask(ctx, &driverpb.DestroyTaskRequest{TaskId: tk.cfg.Id, Force: true}); err != nil {
				t.Fatal(err)
			}
			for name, pid := range pids {
				if !dead(pid) {
					syscall.Kill(pid, syscall.SIGKILL)
					t.Errorf("%s (pid %d) still runs after the forced destroy returned", name, pid)
				}
			}
			if cgs != nil {
				if len(cgs.Created) == 0 {
					t.Fatalf("cgroups %+v: none created for the task's limits", cgs)
				}
				for _, d := range cgs.Created {
					if _, err := os.Stat(d); err == nil {
						t.Errorf("cgroup %s left behind", d)
					}
				}
			}
		})
	}
}

// fakeNomadCgroupsV1 lays out the cgroups a Nomad client makes for a task
// on cgroup v1 (under a parent of the test's own, not Nomad's "nomad"):
// <root>/cpuset/<parent>/reserve/<alloc>.<task> with the parent's mems
// (the executor writes the cpus), and <root>/{freezer,cpu,memory}/<parent>/<alloc>.<task>.
// It skips the test, saying why, where the machine cannot create them.
func fakeNomadCgroupsV1(t *testing.T, scope string) (cpuset string, perTask map[string]string) {
	t.Helper()
	root := executor.CgroupRoot
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		t.Skip("cgroup v2 machine: the v1 layout is not tested here")
	}
	parent := fmt.Sprintf("impact-exec-test-%d", time.Now().UnixNano())
	var made []string
	t.Cleanup(func() {
		for i := len(made) - 1; i >= 0; i-- {
			executor.KillCgroups(false, []string{made[i]})
			executor.RemoveCgroups([]string{made[i]})
		}
	})
	mk := func(dir string) {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Skipf("cannot create cgroup %s on this machine (%v): cgroup placement not tested", dir, err)
		}
		made = append(made, dir)
	}
	copyFile := func(from, to, name string) {
		b, err := os.ReadFile(filepath.Join(from, name))
		if err == nil {
			err = os.WriteFile(filepath.Join(to, name), bytes.TrimSpace(b), 0o644)
		}
		if err != nil {
			t.Skipf("cannot set up cpuset %s (%v): cgroup placement not tested", to, err)
		}
	}
	cs := filepath.Join(root, "cpuset")
	p := filepath.Join(cs, parent)
	mk(p)
	copyFile(cs, p, "cpuset.cpus")
	copyFile(cs, p, "cpuset.mems")
	mk(filepath.Join(p, "reserve"))
	copyFile(p, filepath.Join(p, "reserve"), "cpuset.cpus")
	copyFile(p, filepath.Join(p, "reserve"), "cpuset.mems")
	cpuset = filepath.Join(p, "reserve", scope)
	mk(cpuset)
	copyFile(filepath.Join(p, "reserve"), cpuset, "cpuset.mems")
	perTask = map[string]string{"cpuset": "/" + parent + "/reserve/" + scope}
	for _, ctrl := range []string{"freezer", "cpu", "memory"} {
		mk(filepath.Join(root, ctrl, parent))
		mk(filepath.Join(root, ctrl, parent, scope))
		perTask[ctrl] = "/" + parent + "/" + scope
	}
	return cpuset, perTask
}

// cgroupsOf parses /proc/<pid>/cgroup output into controller -> path.
func cgroupsOf(s string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}

// On cgroup v1 the task runs in the cgroups Nomad made for it: the cpuset
// Nomad reserved (CpusetCgroupPath, with the reserved cores written as
// Nomad's executor does) and Nomad's per-task freezer, cpu and memory
// cgroups (limits written there, none of its own made); commands run
// through ExecTask and ExecTaskStreaming run in the same cgroups, on the
// same cores.
func TestTaskAndExecInNomadCgroupsV1(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root: cgroup placement not tested")
	}
	inst := load(t, "")
	tk := newTask(t, "pinned", `
command = "/bin/sh"
args    = ["-c", "cat /proc/self/cgroup > cg; grep Cpus_allowed_list /proc/self/status > cpus; exec sleep 60"]`, nil)
	cpuset, want := fakeNomadCgroupsV1(t, tk.cfg.AllocId+"."+tk.cfg.Name)
	const cpu = "0"
	tk.cfg.Resources = &driverpb.Resources{LinuxResources: &driverpb.LinuxResources{
		MemoryLimitBytes: 256 << 20, CpuShares: 200, CpusetCgroup: cpuset, CpusetCpus: cpu}}
	start(t, inst, tk)
	check := func(who, cg, cpus string) {
		t.Helper()
		got := cgroupsOf(cg)
		for ctrl, p := range want {
			if got[ctrl] != p {
				t.Errorf("%s: %s cgroup %q, want Nomad's %q (all: %v)", who, ctrl, got[ctrl], p, got)
			}
		}
		if f := strings.Fields(cpus); len(f) != 2 || f[1] != cpu {
			t.Errorf("%s: %q, want the reserved core %s", who, strings.TrimSpace(cpus), cpu)
		}
	}
	testwait.File(t, filepath.Join(tk.dir, "cpus"), 10*time.Second)
	check("task", testwait.File(t, filepath.Join(tk.dir, "cg"), time.Second), testwait.File(t, filepath.Join(tk.dir, "cpus"), time.Second))
	memDir := filepath.Join(executor.CgroupRoot, "memory", strings.TrimPrefix(want["memory"], "/"))
	if b, _ := os.ReadFile(filepath.Join(memDir, "memory.limit_in_bytes")); strings.TrimSpace(string(b)) != strconv.Itoa(256<<20) {
		t.Errorf("memory limit in Nomad's cgroup: %q", b)
	}
	if st := taskStatus(t, tk); st.Cgroups == nil || len(st.Cgroups.Created) != 0 {
		t.Errorf("cgroups %+v: the task should use Nomad's, creating none", st.Cgroups)
	}

	script := "cat /proc/self/cgroup; grep Cpus_allowed_list /proc/self/status"
	ex, err := inst.Driver.ExecTask(ctxT(t, 30*time.Second), &driverpb.ExecTaskRequest{TaskId: tk.cfg.Id,
		Command: []string{"/bin/sh", "-c", script}, Timeout: durationpb.New(10 * time.Second)})
	if err != nil || ex.GetResult().GetExitCode() != 0 {
		t.Fatalf("ExecTask: %v %+v %q", err, ex.GetResult(), ex.GetStdout())
	}
	out := string(ex.GetStdout())
	i := strings.Index(out, "Cpus_allowed_list")
	if i < 0 {
		t.Fatalf("ExecTask output %q", out)
	}
	check("ExecTask", out[:i], out[i:])
	sout, serr, res := execStream(t, inst, tk.cfg.Id, false, []string{"/bin/sh", "-c", script}, "")
	i = strings.Index(sout, "Cpus_allowed_list")
	if res.GetExitCode() != 0 || i < 0 {
		t.Fatalf("ExecTaskStreaming: %q %q %+v", sout, serr, res)
	}
	check("ExecTaskStreaming", sout[:i], sout[i:])

	if _, err := inst.Driver.StopTask(ctxT(t, 30*time.Second), &driverpb.StopTaskRequest{TaskId: tk.cfg.Id, Timeout: durationpb.New(5 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	waitTask(t, inst, tk.cfg.Id, 10*time.Second)
	if _, err := os.Stat(memDir); err != nil {
		t.Errorf("Nomad's cgroup %s was removed by the driver (Nomad's client removes it): %v", memDir, err)
	}
}

// The task runs with Nomad's oom_score_adj (LinuxResources), not the
// plugin's, as under Nomad's executor.
func TestTaskGetsNomadOOMScoreAdj(t *testing.T) {
	t.Parallel()
	inst := load(t, "")
	tk := newTask(t, "oom", `
command = "/bin/sh"
args    = ["-c", "cat /proc/self/oom_score_adj > adj"]`, nil)
	tk.cfg.Resources = &driverpb.Resources{LinuxResources: &driverpb.LinuxResources{OomScoreAdj: 500}}
	start(t, inst, tk)
	waitTask(t, inst, tk.cfg.Id, 10*time.Second)
	if got := strings.TrimSpace(testwait.File(t, filepath.Join(tk.dir, "adj"), time.Second)); got != "500" {
		t.Fatalf("task oom_score_adj %q, want Nomad's 500", got)
	}
}

// A task without a gang barrier has started its command when StartTask
// returns, as under Nomad's executor: the first stats sample already
// lists its process (Nomad's executor tests take the first one).
func TestStartTaskReturnsOnceTheCommandRuns(t *testing.T) {
	t.Parallel()
	inst := load(t, "")
	tk := newTask(t, "started", `
command = "sleep"
args    = ["30"]`, nil)
	start(t, inst, tk)
	stream, err := inst.Driver.TaskStats(ctxT(t, 30*time.Second), &driverpb.TaskStatsRequest{TaskId: tk.cfg.Id, CollectionInterval: durationpb.New(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(first.GetStats().GetResourceUsageByPid()) == 0 {
		t.Fatalf("first stats sample lists no process: %+v", first.GetStats())
	}
}

// On cgroup v2 the task and its exec commands run in the cgroup Nomad
// made for it (LinuxResources.cpuset_cgroup, <root>/<parent>/share.slice/
// <alloc>.<task>.scope), the limits written there; the driver makes none
// of its own and leaves Nomad's in place.
func TestTaskAndExecInNomadCgroupV2(t *testing.T) {
	t.Parallel()
	root := executor.CgroupRoot
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
		t.Skip("not a cgroup v2 machine (v1 here): the v2 placement is not tested")
	}
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root: cgroup placement not tested")
	}
	inst := load(t, "")
	tk := newTask(t, "unified", `
command = "/bin/sh"
args    = ["-c", "cat /proc/self/cgroup > cg; exec sleep 60"]`, nil)
	parent := filepath.Join(root, fmt.Sprintf("impact-exec-test-%d.slice", time.Now().UnixNano()))
	share := filepath.Join(parent, "share.slice")
	dir := filepath.Join(share, tk.cfg.AllocId+"."+tk.cfg.Name+".scope")
	for _, d := range []string{parent, share, dir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Skipf("cannot create cgroup %s on this machine (%v): cgroup placement not tested", d, err)
		}
		_ = os.WriteFile(filepath.Join(filepath.Dir(d), "cgroup.subtree_control"), []byte("+memory +cpu"), 0o644)
	}
	t.Cleanup(func() {
		executor.KillCgroups(true, []string{dir})
		executor.RemoveCgroups([]string{parent, share, dir})
	})
	tk.cfg.Resources = &driverpb.Resources{LinuxResources: &driverpb.LinuxResources{MemoryLimitBytes: 256 << 20, CpusetCgroup: dir}}
	start(t, inst, tk)
	want := "0::" + strings.TrimPrefix(dir, root)
	if got := strings.TrimSpace(testwait.File(t, filepath.Join(tk.dir, "cg"), 10*time.Second)); !strings.Contains(got, want) {
		t.Fatalf("task cgroup %q, want %q", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "memory.max")); err == nil && strings.TrimSpace(string(b)) != strconv.Itoa(256<<20) {
		t.Errorf("memory.max in Nomad's cgroup: %q", b)
	}
	ex, err := inst.Driver.ExecTask(ctxT(t, 30*time.Second), &driverpb.ExecTaskRequest{TaskId: tk.cfg.Id,
		Command: []string{"cat", "/proc/self/cgroup"}, Timeout: durationpb.New(10 * time.Second)})
	if err != nil || !strings.Contains(string(ex.GetStdout()), want) {
		t.Fatalf("ExecTask ran in %q (%v), want %q", ex.GetStdout(), err, want)
	}
	if st := taskStatus(t, tk); st.Cgroups == nil || len(st.Cgroups.Created) != 0 {
		t.Errorf("cgroups %+v: the task should use Nomad's, creating none", st.Cgroups)
	}
}
