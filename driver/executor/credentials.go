package executor

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// Credential is what a process started as the task's user (Nomad's
// task.user) runs with; nil when that is already this process's user.
// The driver's exec commands use it too, so `nomad alloc exec` never
// runs as the plugin's user (root) in a task that runs as another.
func Credential(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("task user %q: %w", name, err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	if os.Geteuid() != 0 {
		if uint64(os.Geteuid()) == uid {
			return nil, nil
		}
		return nil, fmt.Errorf("task user %q: running as another user needs the plugin to run as root", name)
	}
	var groups []uint32
	if gids, err := u.GroupIds(); err == nil {
		for _, g := range gids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				groups = append(groups, uint32(n))
			}
		}
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups}, nil
}

// UserEnv returns env with USER, LOGNAME and HOME of the named user (the
// task's command and the driver's exec commands).
func UserEnv(env map[string]string, name string) map[string]string {
	u, err := user.Lookup(name)
	if err != nil {
		return env
	}
	out := make(map[string]string, len(env)+3)
	for k, v := range env {
		out[k] = v
	}
	out["USER"], out["LOGNAME"], out["HOME"] = u.Username, u.Username, u.HomeDir
	return out
}
