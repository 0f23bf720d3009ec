package executor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Resources are the limits enforced on a task through cgroups (v2, or v1's
// memory and cpu controllers). Zero values mean no limit.
type Resources struct {
	MemoryLimitBytes int64 `json:"memory_limit_bytes"`
	CPUShares        int64 `json:"cpu_shares"`
	// CgroupPath is the cgroup Nomad prepared for the task
	// (LinuxResources.cpuset_cgroup). On cgroup v2 it is per task and the
	// task is placed there; on v1 it is a shared cpuset and is not used.
	CgroupPath string `json:"cgroup_path,omitempty"`
}

// CgroupRoot is where cgroup file systems are mounted.
const CgroupRoot = "/sys/fs/cgroup"

// cgroups is the set of cgroups one task runs in.
type cgroups struct {
	v2      bool
	dirs    []string // v1: memory (first, if any) and cpu dirs; v2: one dir
	ctrls   []string // v1: the controller of each dir
	memDir  string   // where OOM kills are counted
	created []string // dirs we made and remove at the end
	fd      int      // v2: open dir fd for clone-into-cgroup, else -1
}

// setupCgroups creates the task's cgroups and writes its limits. name must
// be unique per task. It returns nil (and no error) when there is nothing
// to enforce.
func setupCgroups(name string, r Resources) (*cgroups, error) {
	if r.MemoryLimitBytes <= 0 && r.CPUShares <= 0 {
		return nil, nil
	}
	if _, err := os.Stat(filepath.Join(CgroupRoot, "cgroup.controllers")); err == nil {
		return setupV2(name, r)
	}
	return setupV1(name, r)
}

func setupV2(name string, r Resources) (*cgroups, error) {
	cg := &cgroups{v2: true, fd: -1}
	dir := r.CgroupPath
	if dir == "" || !strings.HasPrefix(filepath.Clean(dir), filepath.Clean(CgroupRoot)+"/") {
		parent := filepath.Join(CgroupRoot, "impact-exec.slice")
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup v2: %w", err)
		}
		// Let the parent hand memory and cpu down to task cgroups.
		_ = os.WriteFile(filepath.Join(CgroupRoot, "cgroup.subtree_control"), []byte("+memory +cpu"), 0o644)
		_ = os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory +cpu"), 0o644)
		dir = filepath.Join(parent, name+".scope")
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup v2: creating %s: %w", dir, err)
		}
		cg.created = append(cg.created, dir)
	}
	cg.dirs, cg.memDir = []string{dir}, dir
	if r.MemoryLimitBytes > 0 {
		if err := writeFile(dir, "memory.max", strconv.FormatInt(r.MemoryLimitBytes, 10)); err != nil {
			cg.remove()
			return nil, err
		}
		_ = writeFile(dir, "memory.swap.max", "0")
	}
	if r.CPUShares > 0 {
		// cpu.shares (2..262144) to cpu.weight (1..10000), as runc does.
		w := 1 + ((max(r.CPUShares, 2)-2)*9999)/262142
		_ = writeFile(dir, "cpu.weight", strconv.FormatInt(w, 10))
	}
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		cg.remove()
		return nil, fmt.Errorf("cgroup v2: opening %s: %w", dir, err)
	}
	cg.fd = fd
	return cg, nil
}

func setupV1(name string, r Resources) (*cgroups, error) {
	cg := &cgroups{fd: -1}
	mk := func(ctrl string) (string, error) {
		base := filepath.Join(CgroupRoot, ctrl)
		if _, err := os.Stat(base); err != nil {
			return "", fmt.Errorf("cgroup v1: no %s controller at %s", ctrl, base)
		}
		dir := filepath.Join(base, "impact-exec", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", fmt.Errorf("cgroup v1: creating %s: %w", dir, err)
		}
		cg.created = append(cg.created, dir)
		cg.dirs = append(cg.dirs, dir)
		cg.ctrls = append(cg.ctrls, ctrl)
		return dir, nil
	}
	if r.MemoryLimitBytes > 0 {
		dir, err := mk("memory")
		if err != nil {
			cg.remove()
			return nil, err
		}
		if err := writeFile(dir, "memory.limit_in_bytes", strconv.FormatInt(r.MemoryLimitBytes, 10)); err != nil {
			cg.remove()
			return nil, err
		}
		cg.memDir = dir
	}
	if r.CPUShares > 0 {
		dir, err := mk("cpu")
		if err != nil {
			cg.remove()
			return nil, err
		}
		_ = writeFile(dir, "cpu.shares", strconv.FormatInt(max(r.CPUShares, 2), 10))
	}
	return cg, nil
}

// prepare sets up clone-into-cgroup on v2 (the child is born inside).
func (cg *cgroups) prepare(attr *syscall.SysProcAttr) {
	if cg != nil && cg.v2 && cg.fd >= 0 {
		attr.UseCgroupFD = true
		attr.CgroupFD = cg.fd
	}
}

// start starts cmd inside the task's cgroups. On v2 the child is cloned
// straight into its cgroup (see prepare). On v1 the supervisor joins the
// task's cgroups for the instant of the fork and then returns to its own,
// so the child is born inside and no process of the task escapes.
func (cg *cgroups) start(cmd interface{ Start() error }) error {
	if cg == nil || cg.v2 || len(cg.dirs) == 0 {
		return cmd.Start()
	}
	self := strconv.Itoa(os.Getpid())
	orig := ownCgroupsV1()
	var back []string
	for i, d := range cg.dirs {
		if err := writeFile(d, "cgroup.procs", self); err != nil {
			for _, b := range back {
				_ = writeFile(b, "cgroup.procs", self)
			}
			return err
		}
		back = append(back, filepath.Join(CgroupRoot, cg.ctrls[i], orig[cg.ctrls[i]]))
	}
	err := cmd.Start()
	for _, b := range back {
		_ = writeFile(b, "cgroup.procs", self)
	}
	return err
}

// ownCgroupsV1 maps each v1 controller to this process's cgroup path.
func ownCgroupsV1() map[string]string {
	out := map[string]string{}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
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

// oomKilled reports whether the kernel's OOM killer killed a process of
// the task's memory cgroup.
func (cg *cgroups) oomKilled() bool {
	if cg == nil || cg.memDir == "" {
		return false
	}
	file := "memory.oom_control"
	if cg.v2 {
		file = "memory.events"
	}
	f, err := os.Open(filepath.Join(cg.memDir, file))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == "oom_kill" {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n > 0
		}
	}
	return false
}

// killAll kills every process left in the task's cgroups, so no
// grandchild that escaped the task's process group (setsid, setpgid)
// outlives it: v2's cgroup.kill (Linux 5.14+), else SIGKILL to each PID
// listed in cgroup.procs until none is left. The cgroups are the task's
// own: ours, or the per-task one Nomad made on v2.
func (cg *cgroups) killAll() {
	if cg == nil || len(cg.dirs) == 0 {
		return
	}
	if cg.v2 && writeFile(cg.dirs[0], "cgroup.kill", "1") == nil {
		return
	}
	for try := 0; try < 10; try++ {
		left := 0
		for _, d := range cg.dirs {
			b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 && pid != os.Getpid() {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					left++
				}
			}
		}
		if left == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond) // let the killed leave before looking again
	}
}

// remove deletes the cgroups this task created (they must be empty).
func (cg *cgroups) remove() {
	if cg == nil {
		return
	}
	if cg.fd >= 0 {
		syscall.Close(cg.fd)
		cg.fd = -1
	}
	for i := len(cg.created) - 1; i >= 0; i-- {
		// Killed processes may take a moment to leave the cgroup.
		for try := 0; try < 50; try++ {
			err := os.Remove(cg.created[i])
			if err == nil || errors.Is(err, os.ErrNotExist) || !errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	cg.created = nil
}

func writeFile(dir, name, val string) error {
	if err := os.WriteFile(filepath.Join(dir, name), []byte(val), 0o644); err != nil {
		return fmt.Errorf("cgroup: writing %s=%s: %w", filepath.Join(dir, name), val, err)
	}
	return nil
}
