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

// Resources say which cgroups a task runs in and the limits enforced
// there (v2, or v1's memory and cpu controllers). Zero limits mean none.
type Resources struct {
	MemoryLimitBytes int64 `json:"memory_limit_bytes"`
	CPUShares        int64 `json:"cpu_shares"`
	// CgroupPath is the cgroup Nomad prepared for the task
	// (LinuxResources.cpuset_cgroup): on v2 the task's own cgroup; on v1
	// its cpuset, <root>/cpuset/<parent>/reserve/<scope> when it reserved
	// cores, else the shared <root>/cpuset/<parent>/share. The task is
	// always placed there, so reserved cores are honoured.
	CgroupPath string `json:"cgroup_path,omitempty"`
	// NomadScope is "<alloc id>.<task>", the name of the per-task cgroups
	// Nomad's client makes on v1 (<root>/{freezer,cpu,memory}/<parent>/<scope>);
	// the task joins those that exist, so Nomad's own cleanup (freeze and
	// kill) reaches it.
	NomadScope string `json:"nomad_scope,omitempty"`
	// CpusetCpus are the cores Nomad reserved for the task
	// (LinuxResources.cpuset_cpus), written into its own cpuset (v1
	// reserve/<scope>, or its v2 cgroup) as Nomad's executor does.
	CpusetCpus string `json:"cpuset_cpus,omitempty"`
	// OOMScoreAdj is the task's oom_score_adj (LinuxResources
	// oom_score_adj, 0 by default), so the task does not inherit the
	// plugin's (a Nomad agent's may be lowered to protect it).
	OOMScoreAdj int32 `json:"oom_score_adj"`
}

// CgroupRoot is where cgroup file systems are mounted.
const CgroupRoot = "/sys/fs/cgroup"

// cgroupV2 reports whether the unified hierarchy is mounted at CgroupRoot.
func cgroupV2() bool {
	_, err := os.Stat(filepath.Join(CgroupRoot, "cgroup.controllers"))
	return err == nil
}

// cgroups is the set of cgroups one task runs in.
type cgroups struct {
	v2     bool
	dirs   []string // every cgroup the task joins (v2: one)
	ctrls  []string // v1: the controller of each dir
	own    []string // dirs holding only this task: killAll empties them
	memDir string   // where OOM kills are counted
	// created are the dirs made here and removed at the end; Nomad's are
	// left to Nomad.
	created []string
	fd      int // v2: open dir fd for clone-into-cgroup, else -1
}

// setupCgroups picks the task's cgroups, creates those Nomad did not
// provide and writes its limits. name must be unique per task. It returns
// nil (and no error) when there is no cgroup to place the task in.
func setupCgroups(name string, r Resources) (*cgroups, error) {
	if cgroupV2() {
		return setupV2(name, r)
	}
	return setupV1(name, r)
}

// cgroupName is a file-name-safe, per-start-attempt name for the task's cgroups.
func cgroupName(taskID string) string {
	return strings.NewReplacer("/", ".", " ", "_").Replace(taskID)
}

func underRoot(p string) bool {
	return p != "" && strings.HasPrefix(filepath.Clean(p), filepath.Clean(CgroupRoot)+"/")
}

func setupV2(name string, r Resources) (*cgroups, error) {
	cg := &cgroups{v2: true, fd: -1}
	dir := r.CgroupPath
	if fi, err := os.Stat(dir); !underRoot(dir) || err != nil || !fi.IsDir() {
		if r.MemoryLimitBytes <= 0 && r.CPUShares <= 0 {
			return nil, nil
		}
		parent := filepath.Join(CgroupRoot, "impact-exec.slice")
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup v2: %w", err)
		}
		// Let the parent hand memory and cpu down to task cgroups.
		_ = os.WriteFile(filepath.Join(CgroupRoot, "cgroup.subtree_control"), []byte("+memory +cpu"), 0o644)
		_ = os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory +cpu"), 0o644)
		dir = filepath.Join(parent, name+".scope")
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("cgroup v2: creating %s: %w", dir, err)
		}
		cg.created = append(cg.created, dir)
	}
	cg.dirs, cg.own, cg.memDir = []string{dir}, []string{dir}, dir
	if r.CpusetCpus != "" && dir == r.CgroupPath {
		_ = writeFile(dir, "cpuset.cpus", r.CpusetCpus)
	}
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

// nomadParentV1 returns the cgroup parent ("nomad" by default) of a v1
// cpuset path Nomad handed out, and whether that cpuset is the task's own
// (reserve/<scope>) rather than the shared one; "" when the path is not
// of Nomad's shape.
func nomadParentV1(cpuset string) (parent string, own bool) {
	base := filepath.Join(CgroupRoot, "cpuset") + "/"
	rel, ok := strings.CutPrefix(filepath.Clean(cpuset), base)
	if !ok {
		return "", false
	}
	switch {
	case filepath.Base(rel) == "share" && filepath.Dir(rel) != ".":
		return filepath.Dir(rel), false
	case filepath.Base(filepath.Dir(rel)) == "reserve" && filepath.Dir(filepath.Dir(rel)) != ".":
		return filepath.Dir(filepath.Dir(rel)), true
	}
	return "", false
}

func setupV1(name string, r Resources) (*cgroups, error) {
	cg := &cgroups{fd: -1}
	cg.joinNomadV1(r)
	if err := cg.limitV1(name, r); err != nil {
		cg.remove()
		return nil, err
	}
	cg.memDir = cg.dirOf("memory")
	if len(cg.dirs) == 0 {
		return nil, nil
	}
	return cg, nil
}

// joinNomadV1 adds Nomad's v1 cgroups for the task: its cpuset (with the
// reserved cores written where the cpuset is the task's own), and the
// per-task freezer, cpu and memory cgroups where its client made them.
func (cg *cgroups) joinNomadV1(r Resources) {
	parent, ownCpuset := nomadParentV1(r.CgroupPath)
	if fi, err := os.Stat(r.CgroupPath); underRoot(r.CgroupPath) && err == nil && fi.IsDir() {
		cg.join("cpuset", r.CgroupPath, ownCpuset)
		if ownCpuset && r.CpusetCpus != "" {
			// A failure shows when the task joins (see start).
			_ = writeFile(r.CgroupPath, "cpuset.cpus", r.CpusetCpus)
		}
	}
	if parent != "" && r.NomadScope != "" {
		for _, ctrl := range []string{"freezer", "cpu", "memory"} {
			d := filepath.Join(CgroupRoot, ctrl, parent, r.NomadScope)
			if fi, err := os.Stat(d); err == nil && fi.IsDir() {
				cg.join(ctrl, d, true)
			}
		}
	}
}

// limitV1 writes the memory limit and cpu shares, in Nomad's cgroups for
// the task where it made them, else in cgroups of the driver's own (name).
func (cg *cgroups) limitV1(name string, r Resources) error {
	if r.MemoryLimitBytes > 0 {
		dir, err := cg.controllerV1("memory", name)
		if err != nil {
			return err
		}
		if err := writeFile(dir, "memory.limit_in_bytes", strconv.FormatInt(r.MemoryLimitBytes, 10)); err != nil {
			return err
		}
	}
	if r.CPUShares > 0 {
		dir, err := cg.controllerV1("cpu", name)
		if err != nil {
			return err
		}
		_ = writeFile(dir, "cpu.shares", strconv.FormatInt(max(r.CPUShares, 2), 10))
	}
	return nil
}

// controllerV1 is the task's cgroup of v1 controller ctrl: the one it
// joined, else impact-exec/<name> made (and joined) here.
func (cg *cgroups) controllerV1(ctrl, name string) (string, error) {
	if d := cg.dirOf(ctrl); d != "" {
		return d, nil
	}
	base := filepath.Join(CgroupRoot, ctrl)
	if _, err := os.Stat(base); err != nil {
		return "", fmt.Errorf("cgroup v1: no %s controller at %s", ctrl, base)
	}
	dir := filepath.Join(base, "impact-exec", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("cgroup v1: creating %s: %w", dir, err)
	}
	cg.created = append(cg.created, dir)
	cg.join(ctrl, dir, true)
	return dir, nil
}

// dirOf is the v1 cgroup of controller ctrl the task joins ("" if none).
func (cg *cgroups) dirOf(ctrl string) string {
	for i, c := range cg.ctrls {
		if c == ctrl {
			return cg.dirs[i]
		}
	}
	return ""
}

// join adds dir (of v1 controller ctrl) to the task's cgroups; own: it
// holds only this task.
func (cg *cgroups) join(ctrl, dir string, own bool) {
	cg.dirs, cg.ctrls = append(cg.dirs, dir), append(cg.ctrls, ctrl)
	if own {
		cg.own = append(cg.own, dir)
	}
}

// set is what the status file records of the task's cgroups.
func (cg *cgroups) set() *CgroupSet {
	if cg == nil {
		return nil
	}
	return &CgroupSet{V2: cg.v2, Dirs: cg.dirs, Own: cg.own, Created: cg.created}
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
// so the child is born inside and no process of the task escapes. A
// cpuset that cannot be joined (Nomad left it without cpus or mems) is
// reported in warn and skipped, as Nomad's executor does; any other
// cgroup that cannot be joined fails the start.
func (cg *cgroups) start(cmd interface{ Start() error }, warn func(string)) error {
	if cg == nil || cg.v2 || len(cg.dirs) == 0 {
		return cmd.Start()
	}
	self := strconv.Itoa(os.Getpid())
	orig := ownCgroupsV1()
	var back []string
	for i, d := range cg.dirs {
		if err := writeFile(d, "cgroup.procs", self); err != nil {
			if cg.ctrls[i] == "cpuset" {
				warn(fmt.Sprintf("Task not placed in its cpuset %s: %v", d, err))
				continue
			}
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
	if cg == nil {
		return
	}
	KillCgroups(cg.v2, cg.own)
}

// KillCgroups kills every process in dirs, cgroups that hold only one
// task (never a shared cpuset): v2's cgroup.kill (Linux 5.14+), else
// SIGKILL to each PID listed in cgroup.procs until none is left (bounded).
func KillCgroups(v2 bool, dirs []string) {
	if len(dirs) == 0 {
		return
	}
	if v2 && len(dirs) == 1 && writeFile(dirs[0], "cgroup.kill", "1") == nil {
		return
	}
	for try := 0; try < 200; try++ {
		left := 0
		for _, d := range dirs {
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
	RemoveCgroups(cg.created)
	cg.created = nil
}

// RemoveCgroups deletes cgroup dirs (in reverse order), waiting a moment
// for killed processes to leave them.
func RemoveCgroups(dirs []string) {
	for i := len(dirs) - 1; i >= 0; i-- {
		for try := 0; try < 50; try++ {
			err := os.Remove(dirs[i])
			if err == nil || errors.Is(err, os.ErrNotExist) || !errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func writeFile(dir, name, val string) error {
	if err := os.WriteFile(filepath.Join(dir, name), []byte(val), 0o644); err != nil {
		return fmt.Errorf("cgroup: writing %s=%s: %w", filepath.Join(dir, name), val, err)
	}
	return nil
}
