package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/impact-sched/nomad-impact/driver/executor"
	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
)

// execCommand is a command run in a task's context (ExecTask and
// ExecTaskStreaming): its task dir, its env (with the rendezvous env once
// the gang has formed) and its user. Nothing of the plugin's own
// environment leaks in.
func (d *Driver) execCommand(h *taskHandle, argv []string) (*exec.Cmd, error) {
	taskDir, _ := taskDirs(h.cfg)
	env := make(map[string]string, len(h.cfg.GetEnv())+10)
	for k, v := range withAllGPUs(h.cfg.GetEnv()) {
		env[k] = v
	}
	if st, err := h.proc.Status(); err == nil {
		for k, v := range st.GangEnv {
			env[k] = v
		}
	}
	if u := h.cfg.GetUser(); u != "" {
		env = executor.UserEnv(env, u)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = taskDir
	cmd.Env = make([]string, 0, len(env))
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	sort.Strings(cmd.Env)
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if u := h.cfg.GetUser(); u != "" {
		cred, err := executor.Credential(u)
		if err != nil {
			return nil, err
		}
		cmd.SysProcAttr.Credential = cred
	}
	return cmd, nil
}

// execOutputMax is how much of an ExecTask's output is kept (the end of
// it): Nomad's check output buffer size (client/structs.CheckBufSize).
const execOutputMax = 4 << 10

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= b.max {
		b.buf = append(b.buf[:0], p[len(p)-b.max:]...)
		return n, nil
	}
	if over := len(b.buf) + len(p) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

// runExec runs cmd, capturing its merged output (see ExecTask); a timeout
// or ctx kills its process group.
func runExec(ctx context.Context, cmd *exec.Cmd, start func(*exec.Cmd) error, timeout time.Duration) (*driverpb.ExecTaskResponse, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	cmd.SysProcAttr.Setpgid = true
	// One writer for both: os/exec then gives the command a single pipe
	// for stdout and stderr, so the order of what it wrote is kept.
	out := &tailBuffer{max: execOutputMax}
	cmd.Stdout, cmd.Stderr = out, out
	if err := start(cmd); err != nil {
		return nil, err
	}
	pgid := cmd.Process.Pid
	stop := context.AfterFunc(ctx, func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	err := cmd.Wait()
	stop()
	res := &driverpb.ExecTaskResponse{Stdout: out.buf, Result: &driverpb.ExitResult{}}
	code, sig, err := executor.ExitStatus(err)
	if err != nil {
		return nil, err
	}
	res.Result.ExitCode, res.Result.Signal = int32(code), int32(sig)
	return res, nil
}

// startExec starts an exec command inside the task's cgroups, so what it
// uses is counted, limited and cleaned up with the task and it runs on
// the task's cpuset. On v2 it is cloned straight into the task's cgroup.
// On v1 it starts as `impact-exec exec-in`, which joins the cgroups, takes
// on the task user's credentials and only then executes the command, so
// nothing it starts is born outside. A task not (yet) in cgroups gets a
// plain start.
func (d *Driver) startExec(h *taskHandle, cmd *exec.Cmd) error {
	st, err := h.proc.Status()
	if err != nil || st.Cgroups == nil || len(st.Cgroups.Dirs) == 0 {
		return cmd.Start()
	}
	if cmd.Err != nil {
		return cmd.Err
	}
	if st.Cgroups.V2 {
		fd, err := syscall.Open(st.Cgroups.Dirs[0], syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening the task's cgroup: %w", err)
		}
		defer syscall.Close(fd)
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
		return cmd.Start()
	}
	in := execIn{Cgroups: st.Cgroups.Dirs, Path: cmd.Path}
	if c := cmd.SysProcAttr.Credential; c != nil {
		in.Cred = &execCred{UID: c.Uid, GID: c.Gid, Groups: c.Groups}
		cmd.SysProcAttr.Credential = nil // taken on by exec-in
	}
	spec, err := json.Marshal(in)
	if err != nil {
		return err
	}
	cmd.Args = append([]string{d.exe, "exec-in", string(spec), "--"}, cmd.Args...)
	cmd.Path = d.exe
	return cmd.Start()
}

// execIn is the argument of `impact-exec exec-in SPEC -- ARGV...`.
type execIn struct {
	Cgroups []string  `json:"cgroups"`
	Cred    *execCred `json:"cred,omitempty"`
	Path    string    `json:"path"`
}

type execCred struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups"`
}

// ErrExecInSpec is ExecIn's error for a SPEC it cannot read.
var ErrExecInSpec = errors.New("bad exec-in spec")

// ExecIn is the body of `impact-exec exec-in SPEC -- ARGV...`, run as
// root by startExec: join the cgroups of SPEC (a cpuset that refuses is
// skipped, as for the task itself), drop to its credentials, execute ARGV
// with its Path. It returns only on failure.
func ExecIn(spec string, argv []string) error {
	var in execIn
	if err := json.Unmarshal([]byte(spec), &in); err != nil || in.Path == "" {
		return fmt.Errorf("%w %q: %v", ErrExecInSpec, spec, err)
	}
	self := []byte(strconv.Itoa(os.Getpid()))
	for _, dir := range in.Cgroups {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), self, 0o644); err != nil {
			if isCpuset(dir) {
				continue
			}
			return fmt.Errorf("joining the task's cgroup %s: %w", dir, err)
		}
	}
	if c := in.Cred; c != nil {
		groups := make([]int, len(c.Groups))
		for i, g := range c.Groups {
			groups[i] = int(g)
		}
		if err := syscall.Setgroups(groups); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
		if err := syscall.Setgid(int(c.GID)); err != nil {
			return fmt.Errorf("setgid %d: %w", c.GID, err)
		}
		if err := syscall.Setuid(int(c.UID)); err != nil {
			return fmt.Errorf("setuid %d: %w", c.UID, err)
		}
	}
	err := syscall.Exec(in.Path, argv, os.Environ())
	return fmt.Errorf("executing %s: %w", in.Path, err)
}

// isCpuset reports whether a v1 cgroup dir is in the cpuset hierarchy.
func isCpuset(dir string) bool {
	rel, err := filepath.Rel(executor.CgroupRoot, dir)
	return err == nil && (rel == "cpuset" || len(rel) > 7 && rel[:7] == "cpuset/")
}

// ExecTask runs a command in the task's directory with its environment
// (script checks). Its stdout and stderr are merged, in the order written,
// into the reply's Stdout, keeping the last execOutputMax bytes, as
// Nomad's executor does: Nomad's script checks read only Stdout, so an
// error printed on stderr would otherwise be lost.
func (d *Driver) ExecTask(ctx context.Context, req *driverpb.ExecTaskRequest) (*driverpb.ExecTaskResponse, error) {
	h, err := d.handle(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if len(req.GetCommand()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "ExecTask: command is empty")
	}
	cmd, err := d.execCommand(h, req.GetCommand())
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "ExecTask: %v", err)
	}
	res, err := runExec(ctx, cmd, func(c *exec.Cmd) error { return d.startExec(h, c) }, req.GetTimeout().AsDuration())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "ExecTask: %v", err)
	}
	return res, nil
}
