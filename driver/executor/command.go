package executor

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// command builds the task's process: own process group, task env, dir,
// user and log FIFOs. The program is found as Nomad's executor finds it
// (see LookupCommand) and made executable if it is not; a task running as
// another user gets that user's USER, LOGNAME and HOME, as under Nomad's
// executor.
func command(sp Spec, env map[string]string) (*exec.Cmd, error) {
	path, err := LookupCommand(sp.Dir, sp.Command, env["PATH"])
	if err != nil {
		return nil, err
	}
	if err := makeExecutable(path); err != nil {
		return nil, err
	}
	cmd := exec.Command(path, sp.Args...)
	cmd.Args[0] = sp.Command
	cmd.Dir = sp.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if sp.User != "" {
		cred, err := Credential(sp.User)
		if err != nil {
			return nil, err
		}
		cmd.SysProcAttr.Credential = cred
		env = UserEnv(env, sp.User)
	}
	cmd.Env = envList(env)
	if err := openLogs(cmd, sp.StdoutPath, sp.StderrPath); err != nil {
		return nil, err
	}
	return cmd, nil
}

// LookupCommand finds a task's program as Nomad's executor does: in the
// task dir's local/, then at the root of the task dir, then (an absolute
// path) on the host, then in PATH (the task env's, pathEnv). It returns an
// absolute path.
func LookupCommand(taskDir, command, pathEnv string) (string, error) {
	for _, p := range []string{filepath.Join(taskDir, "local", command), filepath.Join(taskDir, command)} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	if filepath.IsAbs(command) {
		if _, err := os.Stat(command); err != nil {
			return "", fmt.Errorf("command %q: %w", command, err)
		}
		return command, nil
	}
	if !strings.Contains(command, "/") {
		for _, dir := range filepath.SplitList(pathEnv) {
			if dir == "" || !filepath.IsAbs(dir) {
				continue // never the supervisor's working dir
			}
			p := filepath.Join(dir, command)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("command %q not found in %s, %s or PATH %q", command,
		filepath.Join(taskDir, "local"), taskDir, pathEnv)
}

// makeExecutable adds the execute bits (r-x for all, as Nomad's executor)
// to a program that lacks them, so a script fetched by an artifact block
// without its mode runs.
func makeExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("command %s: %w", path, err)
	}
	if perm := fi.Mode().Perm(); perm&0o555 != 0o555 && fi.Mode().IsRegular() {
		if err := os.Chmod(path, perm|0o555); err != nil {
			return fmt.Errorf("making %s executable: %w", path, err)
		}
	}
	return nil
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
