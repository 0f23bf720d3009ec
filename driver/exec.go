package driver

import (
	"bytes"
	"context"
	"os/exec"
	"sort"
	"syscall"
	"time"

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
	for k, v := range h.cfg.GetEnv() {
		env[k] = v
	}
	if st, err := h.proc.Status(); err == nil {
		for k, v := range st.GangEnv {
			env[k] = v
		}
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

// runExec runs cmd, capturing output; a timeout or ctx kills its process
// group.
func runExec(ctx context.Context, cmd *exec.Cmd, timeout time.Duration) (*driverpb.ExecTaskResponse, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	cmd.SysProcAttr.Setpgid = true
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	pgid := cmd.Process.Pid
	stop := context.AfterFunc(ctx, func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	err := cmd.Wait()
	stop()
	res := &driverpb.ExecTaskResponse{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), Result: &driverpb.ExitResult{}}
	code, sig, err := executor.ExitStatus(err)
	if err != nil {
		return nil, err
	}
	res.Result.ExitCode, res.Result.Signal = int32(code), int32(sig)
	return res, nil
}
