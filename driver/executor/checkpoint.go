package executor

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/impact-sched/nomad-impact/gang"
	"github.com/impact-sched/nomad-impact/jobspec"
)

// LauncherExitWait is how long, in checkpoint_signal_to = "children", the
// main process (a launcher) is given to end on its own once every child
// that got the checkpoint signal has exited, before it gets the kill
// signal: a launcher that passes its workers' exit code on keeps it, one
// that notices its workers only at its next poll (torchrun: every
// --monitor-interval, 5s by default) is not waited for.
const LauncherExitWait = time.Second

// isCheckpoint reports whether sig is the task's checkpoint signal.
func (s *supervisor) isCheckpoint(sig os.Signal) bool {
	g := s.spec.Gang
	if g == nil || g.CheckpointSignal == "" {
		return false
	}
	c, err := ParseSignal(g.CheckpointSignal)
	return err == nil && sig == c
}

func (s *supervisor) checkpointTo() string {
	if g := s.spec.Gang; g != nil && g.CheckpointTo != "" {
		return g.CheckpointTo
	}
	return CheckpointToGroup
}

// sendCheckpoint delivers the checkpoint signal to the processes
// checkpoint_signal_to names; main is the task's main process (and its
// process group's id).
func (s *supervisor) sendCheckpoint(main int, sig syscall.Signal) {
	s.mu.Lock()
	s.checkpointAt = s.now()
	s.mu.Unlock()
	switch s.checkpointTo() {
	case CheckpointToMain:
		if err := syscall.Kill(main, sig); err != nil {
			s.logger.Warn("sending the checkpoint signal", "signal", sig, "pid", main, "error", err)
		}
	case CheckpointToChildren:
		kids := childrenOf(main)
		if len(kids) == 0 {
			s.event(fmt.Sprintf("Checkpoint signal %s not delivered: the main process (pid %d) has no child process (checkpoint_signal_to = \"children\")", sigName(sig), main), nil)
			return
		}
		pids := make([]string, 0, len(kids))
		for _, k := range kids {
			if err := syscall.Kill(k.pid, sig); err != nil {
				s.logger.Warn("sending the checkpoint signal", "signal", sig, "pid", k.pid, "error", err)
				continue
			}
			pids = append(pids, strconv.Itoa(k.pid))
		}
		s.event(fmt.Sprintf("Checkpoint signal %s sent to the main process's children (pids %s), not to the main process (checkpoint_signal_to = \"children\")",
			sigName(sig), strings.Join(pids, ", ")), nil)
		s.mu.Lock()
		watching := s.watchingKids
		s.watchingKids = true
		s.mu.Unlock()
		if !watching {
			go s.endLauncher(main, kids)
		}
	default:
		if err := syscall.Kill(-main, sig); err != nil {
			s.logger.Warn("sending the checkpoint signal", "signal", sig, "pgid", main, "error", err)
		}
	}
}

func (s *supervisor) lastCheckpointAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checkpointAt
}

// propagateStop stops the task because its gang failed or was stopped:
// the checkpoint signal, the grace period, then the kill signal and
// finally SIGKILL after the kill timeout.
func (s *supervisor) propagateStop(st gang.Status) {
	g := s.spec.Gang
	s.mu.Lock()
	s.gangStopped = true
	pgid := s.pgid
	s.mu.Unlock()
	msg := fmt.Sprintf("Gang %s is %s (%s): stopping this member", g.ID, st.State, st.Reason)
	// A checkpoint signal delivered less than the grace ago (the impact
	// agent's preemption, through Nomad) is not sent again: the task is in
	// its grace already, and a second one can cut a launcher's shutdown
	// short (torchrun stops waiting for its workers when a second SIGTERM
	// interrupts that wait).
	resend := true
	if at := s.lastCheckpointAt(); !at.IsZero() && s.now().Sub(at) < g.Grace {
		resend = false
	}
	switch {
	case g.CheckpointSignal != "" && resend:
		msg = fmt.Sprintf("Gang %s is %s (%s): sending checkpoint signal %s, stopping in %s", g.ID, st.State, st.Reason, g.CheckpointSignal, g.Grace)
	case g.CheckpointSignal != "":
		msg = fmt.Sprintf("Gang %s is %s (%s): checkpoint signal %s already sent %s ago, stopping in %s", g.ID, st.State, st.Reason,
			g.CheckpointSignal, s.now().Sub(s.lastCheckpointAt()).Round(time.Millisecond), g.Grace)
	}
	s.event(msg, map[string]string{"gang_state": string(st.State)})
	if g.CheckpointSignal != "" {
		if sig, err := ParseSignal(g.CheckpointSignal); err == nil {
			if resend {
				s.sendCheckpoint(pgid, sig)
			}
			if s.waitChild(g.Grace) {
				return
			}
		}
	}
	sig, err := ParseSignal(s.spec.KillSignal)
	if err != nil {
		sig = syscall.SIGINT
	}
	_ = syscall.Kill(-pgid, sig)
	if s.waitChild(s.spec.KillTimeout) {
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// waitChild reports whether the task's command ended within d.
func (s *supervisor) waitChild(d time.Duration) bool { return waitClosed(s.childDone, d) }

// endLauncher waits until every signalled child has exited, then gives the
// main process LauncherExitWait to end on its own before sending it the
// kill signal (it alone: the rest of its group is killed when it ends).
func (s *supervisor) endLauncher(main int, kids []procInfo) {
	defer func() {
		s.mu.Lock()
		s.watchingKids = false
		s.mu.Unlock()
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		left := 0
		for _, k := range kids {
			if !gone(k) {
				left++
			}
		}
		if left == 0 {
			break
		}
		select {
		case <-s.childDone:
			return
		case <-tick.C:
		}
	}
	if s.waitChild(LauncherExitWait) {
		return
	}
	sig, err := ParseSignal(s.spec.KillSignal)
	if err != nil {
		sig = syscall.SIGINT
	}
	s.event(fmt.Sprintf("The children that got the checkpoint signal have exited and the main process still runs %s later: sending it %s", LauncherExitWait, sigName(sig)), nil)
	_ = syscall.Kill(main, sig)
}

// applyRequeueFile turns a non-zero end into the requeue exit code when
// the task wrote its requeue file (its checkpoint is saved).
func (s *supervisor) applyRequeueFile(ex *Exit) {
	f := s.spec.RequeueFile
	if f == "" || ex.ExitCode == 0 || ex.Err != "" {
		return
	}
	if !fileExists(f) {
		return
	}
	code := s.spec.RequeueExitCode
	if code <= 0 {
		code = jobspec.DefaultRequeueExitCode
	}
	how := fmt.Sprintf("exit code %d", ex.ExitCode)
	if ex.Signal != 0 {
		how = "signal " + sigName(syscall.Signal(ex.Signal))
	}
	s.event(fmt.Sprintf("Task ended with %s after writing its requeue file %s (checkpoint saved): reporting the requeue exit code %d",
		how, filepath.Base(f), code), map[string]string{"requeue_file": "true", "main_exit_code": strconv.Itoa(ex.ExitCode)})
	ex.MainExitCode, ex.Requeued = ex.ExitCode, true
	ex.ExitCode, ex.Signal = code, 0
}

// launchers are programs known to start the training processes as their
// children: with checkpoint_signal_to = "group" they get the checkpoint
// signal too, and the ones that do not handle it die of it.
var launchers = []string{"torchrun", "torch.distributed.run", "torch.distributed.launch", "accelerate", "deepspeed"}

// warnLauncher records an event when the command visibly runs a launcher
// while the checkpoint signal goes to the whole process group and is not
// one the launchers forward (SIGTERM, SIGINT).
func (s *supervisor) warnLauncher() {
	g := s.spec.Gang
	if g == nil || g.CheckpointSignal == "" || s.checkpointTo() != CheckpointToGroup {
		return
	}
	sig, err := ParseSignal(g.CheckpointSignal)
	if err != nil || sig == syscall.SIGTERM || sig == syscall.SIGINT {
		return
	}
	words := strings.FieldsFunc(s.spec.Command+" "+strings.Join(s.spec.Args, " "), func(r rune) bool {
		return r == ' ' || r == '\t' || r == '\n' || r == ';' || r == '&' || r == '|' || r == '"' || r == '\''
	})
	for _, w := range words {
		for _, l := range launchers {
			if filepath.Base(w) == l {
				s.event(fmt.Sprintf("The command runs %s and the checkpoint signal %s goes to the whole process group (checkpoint_signal_to = \"group\"): "+
					"a launcher that does not handle %s dies of it, and its workers are killed with it before they checkpoint. "+
					"Set checkpoint_signal_to = \"children\" in the gang block (see the impact-exec documentation)", l, sigName(sig), sigName(sig)), nil)
				return
			}
		}
	}
}

// childrenOf lists the live (not zombie) processes whose parent is pid.
func childrenOf(pid int) []procInfo {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []procInfo
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ps, err := procStat(n)
		if err != nil || ps.ppid != pid || ps.state == 'Z' || ps.state == 'X' {
			continue
		}
		out = append(out, ps)
	}
	return out
}

// gone reports whether the process p has exited (or its PID is another
// process's by now).
func gone(p procInfo) bool {
	ps, err := procStat(p.pid)
	return err != nil || ps.start != p.start || ps.state == 'Z' || ps.state == 'X'
}

// sigName is "SIGUSR1" for syscall.SIGUSR1 (the number if unnamed).
func sigName(sig syscall.Signal) string {
	for n, v := range signalsByName {
		if v == sig {
			return n
		}
	}
	return strconv.Itoa(int(sig))
}
