package executor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// State is what the driver keeps in its task handle to find a task again
// after a plugin restart. It is small and versioned with the handle.
type State struct {
	Dir           string `json:"dir"`
	SupervisorPID int    `json:"supervisor_pid"`
	// SupervisorStart is the process start time in clock ticks since boot
	// (/proc/PID/stat field 22), guarding against PID reuse.
	SupervisorStart uint64 `json:"supervisor_start"`
}

// Process is the plugin's view of one supervised task.
type Process struct {
	state  State
	logger hclog.Logger
	exited chan struct{} // closed once the supervisor is gone
	once   sync.Once

	release     chan struct{} // closed by Release: stop watching
	releaseOnce sync.Once

	exitMu sync.Mutex
	exit   *Exit // the exit file, once read
	lost   error // or why there is none, once found
}

// PollInterval is how often an attached (not our child) supervisor is
// checked for liveness.
const PollInterval = 100 * time.Millisecond

// Launch writes spec into dir and starts `exe supervise dir` in its own
// session, so it survives the plugin. It returns once the supervisor has
// installed its signal handlers.
func Launch(ctx context.Context, exe, dir string, spec Spec, logger hclog.Logger) (*Process, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("task spec: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating state dir: %w", err)
	}
	if err := writeJSONAtomic(dir, SpecFile, spec); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(dir, LogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening supervisor log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(exe, "supervise", dir)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting supervisor %s: %w", exe, err)
	}
	p := &Process{logger: logger, exited: make(chan struct{}), release: make(chan struct{})}
	p.state = State{Dir: dir, SupervisorPID: cmd.Process.Pid}
	// Read the start time before anything can reap the supervisor: once
	// cmd.Wait has run, /proc/PID is gone (or another process's) and the
	// PID-reuse guard would be lost.
	if st, err := procStat(cmd.Process.Pid); err == nil {
		p.state.SupervisorStart = st.start
	}
	go func() {
		_ = cmd.Wait()
		p.markExited()
	}()
	// Wait until the supervisor reports (its signal handlers are set).
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !fileExists(filepath.Join(dir, StatusFile)) && !fileExists(filepath.Join(dir, ExitFile)) {
		select {
		case <-p.exited:
			if fileExists(filepath.Join(dir, ExitFile)) {
				return p, nil
			}
			return nil, fmt.Errorf("supervisor exited at start-up (see %s)", filepath.Join(dir, LogFile))
		case <-deadline.C:
			_ = cmd.Process.Kill()
			return nil, fmt.Errorf("supervisor did not start within 30s (see %s)", filepath.Join(dir, LogFile))
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
	return p, nil
}

// WaitRunning waits until the task's command runs (or the task has
// ended), at most d: a task without a gang barrier is then started when
// StartTask returns, as under Nomad's executor, and its first stats
// sample already sees its processes.
func (p *Process) WaitRunning(ctx context.Context, d time.Duration) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, running := p.runningGroup(); running || p.Exited() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-p.exited:
			return
		case <-tick.C:
		}
	}
}

// ErrLost means the supervisor is gone without leaving an exit status.
var ErrLost = errors.New("task supervisor is gone and left no exit status")

// Attach re-finds a task from its state after a plugin restart.
func Attach(state State, logger hclog.Logger) (*Process, error) {
	if state.Dir == "" || state.SupervisorPID <= 0 {
		return nil, fmt.Errorf("task state is incomplete: dir %q, pid %d", state.Dir, state.SupervisorPID)
	}
	if _, err := os.Stat(filepath.Join(state.Dir, SpecFile)); err != nil {
		return nil, fmt.Errorf("task state dir: %w", err)
	}
	p := &Process{state: state, logger: logger, exited: make(chan struct{}), release: make(chan struct{})}
	if fileExists(filepath.Join(state.Dir, ExitFile)) {
		p.markExited()
		return p, nil
	}
	if !alive(state) {
		// Nomad answers a failed recovery by starting the task again: the
		// old command, orphaned by its dead supervisor, must not keep
		// running (and holding its GPUs) beside the new one.
		if pid := killLeftovers(state.Dir); pid > 0 {
			return nil, fmt.Errorf("supervisor pid %d: %w; its orphaned task (process group %d) was killed", state.SupervisorPID, ErrLost, pid)
		}
		return nil, fmt.Errorf("supervisor pid %d: %w", state.SupervisorPID, ErrLost)
	}
	go func() {
		t := time.NewTicker(PollInterval)
		defer t.Stop()
		for {
			select {
			case <-p.release:
				return
			case <-t.C:
			}
			if !alive(state) {
				p.markExited()
				return
			}
		}
	}()
	return p, nil
}

// Release stops watching an attached supervisor that is not wanted (the
// task is tracked already); the task itself is left alone.
func (p *Process) Release() { p.releaseOnce.Do(func() { close(p.release) }) }

func (p *Process) markExited() { p.once.Do(func() { close(p.exited) }) }

// State returns what to persist in the task handle.
func (p *Process) State() State { return p.state }

// Done is closed once the supervisor has exited.
func (p *Process) Done() <-chan struct{} { return p.exited }

// Exited reports whether the supervisor has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// Wait blocks until the task has ended and returns how.
func (p *Process) Wait(ctx context.Context) (Exit, error) {
	select {
	case <-p.exited:
	case <-ctx.Done():
		return Exit{}, ctx.Err()
	}
	return p.result()
}

// result reads the exit file once and keeps it: Destroy removes the state
// dir, and a WaitTask still pending (or called again) must get the same
// answer afterwards.
func (p *Process) result() (Exit, error) {
	p.exitMu.Lock()
	defer p.exitMu.Unlock()
	if p.exit != nil {
		return *p.exit, nil
	}
	if p.lost != nil {
		return Exit{}, p.lost
	}
	var ex Exit
	if err := readJSON(p.state.Dir, ExitFile, &ex); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// The supervisor died without cleaning up: its command (and
			// whatever it started) must not outlive it, nor hold its
			// cgroups, while Nomad starts the task again.
			p.lost = fmt.Errorf("supervisor pid %d: %w", p.state.SupervisorPID, ErrLost)
			if pid := killLeftovers(p.state.Dir); pid > 0 {
				p.lost = fmt.Errorf("supervisor pid %d: %w; its orphaned task (process group %d) was killed", p.state.SupervisorPID, ErrLost, pid)
			}
			return Exit{}, p.lost
		}
		return Exit{}, err
	}
	p.exit = &ex
	return ex, nil
}

// Status reads the supervisor's status file.
func (p *Process) Status() (Status, error) {
	var st Status
	err := readJSON(p.state.Dir, StatusFile, &st)
	return st, err
}

// Signal sends sig to the task: through the supervisor, which forwards it
// to the task's process group. SIGKILL and SIGSTOP cannot be caught, so
// the supervisor could not forward them (it would die or freeze itself,
// and a frozen member stops heartbeating and fails its gang): they go to
// the task's process group directly, and only once the command runs.
func (p *Process) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return fmt.Errorf("task has exited")
	}
	if uncatchable(sig) {
		pgid, ok := p.runningGroup()
		if !ok {
			return fmt.Errorf("task has not started its command yet: %s cannot be delivered", sig)
		}
		if err := syscall.Kill(-pgid, sig); err != nil {
			return fmt.Errorf("signalling task process group %d: %w", pgid, err)
		}
		return nil
	}
	if err := syscall.Kill(p.state.SupervisorPID, sig); err != nil {
		return fmt.Errorf("signalling supervisor %d: %w", p.state.SupervisorPID, err)
	}
	return nil
}

func uncatchable(sig syscall.Signal) bool { return sig == syscall.SIGKILL || sig == syscall.SIGSTOP }

// runningGroup returns the task's process group while its command runs.
func (p *Process) runningGroup() (int, bool) {
	st, err := p.Status()
	if err != nil || st.Phase != PhaseRunning || st.ChildPID <= 0 {
		return 0, false
	}
	return st.ChildPID, true
}

// Stop stops the task: sig to its process group, SIGKILL after timeout.
// It returns once the task has ended (or the supervisor had to be killed).
func (p *Process) Stop(sig syscall.Signal, timeout time.Duration) error {
	if p.Exited() {
		return nil
	}
	// The stop file tells the supervisor that sig is a stop even when it is
	// not a terminating signal and the task has not started yet; it names
	// the signal, which the exit then reports.
	if err := os.WriteFile(filepath.Join(p.state.Dir, StopFile), []byte(strconv.Itoa(int(sig))), 0o644); err != nil {
		p.logger.Warn("marking the stop", "error", err)
	}
	first := sig
	if _, running := p.runningGroup(); uncatchable(sig) && !running {
		// Before the command runs only the supervisor can abort the start
		// (and leave the gang): ask it with a signal it can catch.
		first = syscall.SIGTERM
	}
	if err := p.Signal(first); err != nil && !p.Exited() {
		p.logger.Warn("sending stop signal", "signal", sig, "error", err)
	}
	if p.waitExited(timeout) {
		return nil
	}
	if _, running := p.runningGroup(); running {
		_ = p.Signal(syscall.SIGKILL)
	}
	if p.waitExited(5 * time.Second) {
		return nil
	}
	// The supervisor itself is stuck: kill it and record the stop.
	_ = syscall.Kill(p.state.SupervisorPID, syscall.SIGKILL)
	if !fileExists(filepath.Join(p.state.Dir, ExitFile)) {
		_ = writeJSONAtomic(p.state.Dir, ExitFile, Exit{ExitCode: 137, Signal: int(syscall.SIGKILL), Stopped: true,
			Err: "supervisor did not stop in time and was killed", ExitedAt: time.Now()})
	}
	if !p.waitExited(5 * time.Second) {
		return fmt.Errorf("task supervisor %d did not exit after SIGKILL", p.state.SupervisorPID)
	}
	return nil
}

func (p *Process) waitExited(d time.Duration) bool { return waitClosed(p.exited, d) }

// waitClosed reports whether ch is closed within d.
func waitClosed(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// Destroy kills the task if it still runs and removes its state dir. It
// leaves no process and no cgroup of the task behind, whatever state the
// supervisor was in: one that died or had to be killed did not clean up,
// so what its status file names is killed and removed here.
func (p *Process) Destroy() error {
	if !p.Exited() {
		if err := p.Stop(syscall.SIGKILL, 0); err != nil {
			return err
		}
	}
	_, _ = p.result() // kept for a WaitTask still to answer
	killLeftovers(p.state.Dir)
	return os.RemoveAll(p.state.Dir)
}
