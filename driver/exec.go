package driver

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"sort"
	"syscall"
	"time"

	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
)

// runExec runs argv in dir with env, capturing output; a timeout kills it.
func runExec(ctx context.Context, argv []string, dir string, env map[string]string, timeout time.Duration) (*driverpb.ExecTaskResponse, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	sort.Strings(cmd.Env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := &driverpb.ExecTaskResponse{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), Result: &driverpb.ExitResult{}}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		ws := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			res.Result.Signal = int32(ws.Signal())
			res.Result.ExitCode = 128 + int32(ws.Signal())
		} else {
			res.Result.ExitCode = int32(ws.ExitStatus())
		}
	default:
		return nil, err
	}
	return res, nil
}
