package executor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/gang"
)

// supervisor runs one task: the gang barrier (member.go), the command
// (command.go) in its cgroups (cgroup.go), signals (signals.go), the
// checkpoint signal and stops (checkpoint.go), and its end (exit.json).
type supervisor struct {
	dir    string
	spec   Spec
	logger hclog.Logger
	now    func() time.Time

	evMu   sync.Mutex
	events *os.File

	member member // nil without a gang; set before the barrier

	mu          sync.Mutex
	pgid        int // 0 until the child runs
	stopSig     os.Signal
	gangStopped bool
	// watchingKids: an endLauncher is waiting on the children that got
	// the checkpoint signal.
	watchingKids bool
	// checkpointAt: when the checkpoint signal was last delivered.
	checkpointAt time.Time
	childDone    chan struct{}
}

// Supervise is the body of `impact-exec supervise DIR`: it runs the task
// described by DIR/spec.json to completion and writes DIR/exit.json. It
// returns the supervisor's own exit code (0 once exit.json is written).
func Supervise(dir string, logger hclog.Logger) int {
	s := &supervisor{dir: dir, logger: logger.Named("supervisor"), now: time.Now, childDone: make(chan struct{})}
	ev, err := os.OpenFile(filepath.Join(dir, EventsFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.logger.Error("cannot open events file", "error", err)
		return 1
	}
	s.events = ev
	defer ev.Close()
	if err := readJSON(dir, SpecFile, &s.spec); err != nil {
		return s.finish(Exit{ExitCode: 1, Err: fmt.Sprintf("reading task spec: %v", err)})
	}
	if err := s.spec.Validate(); err != nil {
		return s.finish(Exit{ExitCode: 1, Err: fmt.Sprintf("invalid task spec: %v", err)})
	}
	if err := writeJSONAtomic(dir, SpecFile, s.spec.redacted()); err != nil {
		s.logger.Warn("removing the task env from the spec file", "error", err)
	}
	return s.run()
}

// run takes the task through its life, each step writing the status file
// the plugin reads: signal handlers in place (starting), the gang barrier
// (barrier), the command started in its cgroups (running), its end
// reported to the gang and written (exited).
func (s *supervisor) run() int {
	barrierCtx, cancelBarrier := context.WithCancel(context.Background())
	defer cancelBarrier()
	s.catchSignals(cancelBarrier)
	st := Status{Phase: PhaseStarting, SupervisorPID: os.Getpid()}
	if err := writeJSONAtomic(s.dir, StatusFile, st); err != nil { // the handlers are in place
		return s.finish(Exit{ExitCode: 1, Err: err.Error()})
	}
	env := make(map[string]string, len(s.spec.Env)+10)
	maps.Copy(env, s.spec.Env)
	st.Phase = PhaseRunning
	if s.spec.Gang != nil {
		st.Phase = PhaseBarrier
		a, ok, code := s.passBarrier(barrierCtx, st)
		if !ok {
			return code
		}
		maps.Copy(env, a.Env())
		st.GangEnv = a.Env()
	}
	s.setRequeueFile(env)
	s.warnLauncher()
	cmd, err := command(s.spec, env)
	if err != nil {
		return s.end(Exit{ExitCode: 1, Err: err.Error()}, gang.ExitRequest{ExitCode: 1, Reason: err.Error()})
	}
	cg := s.enterCgroups(cmd, st)
	defer cg.remove()
	if ok, code := s.start(cmd, cg); !ok {
		return code
	}
	closeLogs(cmd)
	st.Phase, st.ChildPID, st.StartedAt, st.Cgroups = PhaseRunning, cmd.Process.Pid, s.now(), cg.set()
	if ps, err := procStat(cmd.Process.Pid); err == nil {
		st.ChildStart = ps.start
	}
	if err := writeJSONAtomic(s.dir, StatusFile, st); err != nil {
		s.logger.Error("writing status", "error", err)
	}
	s.logger.Info("task started", "pid", cmd.Process.Pid)
	if s.member != nil {
		go s.watchGang()
	}
	ex := s.wait(cmd, cg)
	if s.member != nil {
		s.member.report(gang.ExitRequest{ExitCode: ex.ExitCode, Signal: ex.Signal, Stopped: ex.Stopped})
		if !ex.Stopped {
			s.member.linger()
		}
	}
	return s.finish(ex)
}

// passBarrier waits at the gang barrier (status st) and returns the
// member's assignment; without one (false) the task has ended, with the
// supervisor's exit code.
func (s *supervisor) passBarrier(ctx context.Context, st Status) (gang.Assignment, bool, int) {
	g := s.spec.Gang
	if err := writeJSONAtomic(s.dir, StatusFile, st); err != nil {
		return gang.Assignment{}, false, s.finish(Exit{ExitCode: 1, Err: err.Error()})
	}
	m, err := newMember(memberEnv{g: g, dir: s.dir, event: s.event, warn: s.logger.Warn, now: s.now})
	if err != nil {
		return gang.Assignment{}, false, s.finish(Exit{ExitCode: 1, Err: err.Error()})
	}
	s.member = m
	size := "all of the job's"
	if g.Join.Size > 0 {
		size = strconv.Itoa(g.Join.Size)
	}
	s.event(fmt.Sprintf("Waiting at gang barrier %s for %s members (timeout %s)", g.ID, size, g.Timeout), nil)
	a, err := m.join(ctx, func(arrived, size int) {
		if arrived < size {
			s.event(fmt.Sprintf("Gang %s: %d of %d members arrived", g.ID, arrived, size),
				map[string]string{"gang_arrived": strconv.Itoa(arrived), "gang_size": strconv.Itoa(size)})
		}
	})
	if err != nil {
		return gang.Assignment{}, false, s.barrierFailed(err)
	}
	s.event(fmt.Sprintf("Gang %s complete: rank %d of %d (node rank %d of %d, local rank %d of %d), master %s:%d",
		g.ID, a.Rank, a.WorldSize, a.NodeRank, a.NNodes, a.LocalRank, a.LocalWorldSize, a.MasterAddr, a.MasterPort),
		map[string]string{"rank": strconv.Itoa(a.Rank), "world_size": strconv.Itoa(a.WorldSize)})
	return a, true, 0
}

// barrierFailed ends a task that did not pass its barrier: stopped while
// waiting, or the barrier's error (with an event saying why).
func (s *supervisor) barrierFailed(err error) int {
	s.mu.Lock()
	stopSig := s.stopSig
	s.mu.Unlock()
	if stopSig != nil {
		s.event("Stopped while waiting at the gang barrier", nil)
		return s.finish(Exit{ExitCode: 128 + sigNum(stopSig), Signal: sigNum(stopSig), Stopped: true,
			Err: "stopped while waiting at the gang barrier"})
	}
	s.event(barrierEvent(err))
	return s.finish(Exit{ExitCode: 1, Err: err.Error()})
}

// setRequeueFile names the requeue file in the task's env, removing one
// left by an earlier run of this task (a restart in place keeps the task
// dir): it says nothing about this one.
func (s *supervisor) setRequeueFile(env map[string]string) {
	f := s.spec.RequeueFile
	if f == "" {
		return
	}
	if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.logger.Warn("removing a stale requeue file", "file", f, "error", err)
	}
	env[RequeueFileEnv] = f
}

// enterCgroups prepares cmd to start in the task's cgroups (and with
// Nomad's oom_score_adj, set here for it to inherit as Nomad's executor
// sets its own), and records the cgroups in the status before the command
// can run in them: if this supervisor dies, the plugin finds them there
// and cleans them up. Limits that cannot be set are a task event, not a
// failure.
func (s *supervisor) enterCgroups(cmd *exec.Cmd, st Status) *cgroups {
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(int(s.spec.Resources.OOMScoreAdj))), 0o644); err != nil {
		s.logger.Warn("setting oom_score_adj", "error", err)
	}
	cg, err := setupCgroups(cgroupName(s.spec.TaskID), s.spec.Resources)
	if err != nil {
		s.event(fmt.Sprintf("Resource limits not enforced: %v", err), nil)
	}
	cg.prepare(cmd.SysProcAttr)
	if st.Cgroups = cg.set(); st.Cgroups != nil {
		if st.Phase == PhaseRunning {
			st.Phase = PhaseStarting // no command yet
		}
		if err := writeJSONAtomic(s.dir, StatusFile, st); err != nil {
			s.logger.Error("writing status", "error", err)
		}
	}
	return cg
}

// start starts the command in its cgroups unless a stop came first
// (between the barrier and now); when it does not start (false) the task
// has ended, with the supervisor's exit code.
func (s *supervisor) start(cmd *exec.Cmd, cg *cgroups) (bool, int) {
	s.mu.Lock()
	if sig := s.stopSig; sig != nil {
		s.mu.Unlock()
		return false, s.end(Exit{ExitCode: 128 + sigNum(sig), Signal: sigNum(sig), Stopped: true},
			gang.ExitRequest{Stopped: true, Reason: "stopped before start"})
	}
	if err := cg.start(cmd, func(msg string) { s.event(msg, nil) }); err != nil {
		s.mu.Unlock()
		msg := fmt.Sprintf("starting %s: %v", s.spec.Command, err)
		return false, s.end(Exit{ExitCode: 1, Err: msg}, gang.ExitRequest{ExitCode: 1, Reason: msg})
	}
	s.pgid = cmd.Process.Pid
	s.mu.Unlock()
	return true, 0
}

// watchGang stops the task (if propagation is on) when its gang fails or
// is stopped while it runs.
func (s *supervisor) watchGang() {
	if st, ok := s.member.watch(s.childDone); ok && s.spec.Gang.Propagate {
		s.propagateStop(st)
	}
}

// wait waits for the command to end, kills what it left behind (the rest
// of its process group, and processes in its cgroups that left the group
// with setsid/setpgid), and says how the task ended.
func (s *supervisor) wait(cmd *exec.Cmd, cg *cgroups) Exit {
	werr := cmd.Wait()
	close(s.childDone)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cg.killAll()

	ex := Exit{}
	if ex.ExitCode, ex.Signal, werr = ExitStatus(werr); werr != nil {
		ex.ExitCode, ex.Err = 1, fmt.Sprintf("waiting for task: %v", werr)
	}
	ex.OOMKilled = cg.oomKilled()
	cg.remove()
	if ex.OOMKilled {
		s.event("OOM killed: the task exceeded its memory limit", map[string]string{"oom_killed": "true"})
	}
	s.applyRequeueFile(&ex)
	s.mu.Lock()
	ex.Stopped = s.gangStopped || fileExists(filepath.Join(s.dir, StopFile))
	gangStopped := s.gangStopped
	s.mu.Unlock()
	if gangStopped {
		ex.Err = "stopped because its gang failed or was stopped"
	}
	return ex
}

// end reports to the gang (if any) how a task ended before its command
// ran, and writes its exit.
func (s *supervisor) end(ex Exit, req gang.ExitRequest) int {
	if s.member != nil {
		s.member.report(req)
	}
	return s.finish(ex)
}

// event appends one task event for the plugin to forward to Nomad.
func (s *supervisor) event(msg string, ann map[string]string) {
	s.logger.Info("event", "message", msg)
	b, _ := jsonMarshal(Event{Time: s.now(), Message: msg, Annotations: ann})
	s.evMu.Lock()
	defer s.evMu.Unlock()
	if _, err := s.events.Write(append(b, '\n')); err != nil {
		s.logger.Error("writing event", "error", err)
	}
}

// finish writes the exit file; it is the supervisor's last act.
func (s *supervisor) finish(ex Exit) int {
	ex.ExitedAt = s.now()
	if err := writeJSONAtomic(s.dir, ExitFile, ex); err != nil {
		s.logger.Error("writing exit file", "error", err)
		return 1
	}
	st := Status{Phase: PhaseExited, SupervisorPID: os.Getpid()}
	_ = writeJSONAtomic(s.dir, StatusFile, st)
	s.logger.Info("task exited", "exit_code", ex.ExitCode, "signal", ex.Signal, "err", ex.Err)
	return 0
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
