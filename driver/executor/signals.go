package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/impact-sched/nomad-impact/jobspec"
)

// signalsByName numbers each name of jobspec's signal vocabulary
// (jobspec.SignalNames; TestSignalNumbers holds the two lists equal).
var signalsByName = map[string]syscall.Signal{
	"SIGABRT": syscall.SIGABRT, "SIGALRM": syscall.SIGALRM, "SIGBUS": syscall.SIGBUS,
	"SIGCHLD": syscall.SIGCHLD, "SIGCONT": syscall.SIGCONT, "SIGFPE": syscall.SIGFPE,
	"SIGHUP": syscall.SIGHUP, "SIGILL": syscall.SIGILL, "SIGINT": syscall.SIGINT,
	"SIGIO": syscall.SIGIO, "SIGKILL": syscall.SIGKILL, "SIGPIPE": syscall.SIGPIPE,
	"SIGPROF": syscall.SIGPROF, "SIGQUIT": syscall.SIGQUIT, "SIGSEGV": syscall.SIGSEGV,
	"SIGSTOP": syscall.SIGSTOP, "SIGSYS": syscall.SIGSYS, "SIGTERM": syscall.SIGTERM,
	"SIGTRAP": syscall.SIGTRAP, "SIGTSTP": syscall.SIGTSTP, "SIGTTIN": syscall.SIGTTIN,
	"SIGTTOU": syscall.SIGTTOU, "SIGURG": syscall.SIGURG, "SIGUSR1": syscall.SIGUSR1,
	"SIGUSR2": syscall.SIGUSR2, "SIGVTALRM": syscall.SIGVTALRM, "SIGWINCH": syscall.SIGWINCH,
	"SIGXCPU": syscall.SIGXCPU, "SIGXFSZ": syscall.SIGXFSZ,
}

// ParseSignal turns a signal name into the signal, by the contract's one
// rule (jobspec.ParseSignal: the full upper-case name, "SIGUSR1", as
// Nomad's kill_signal takes it), for the job's checkpoint signal, the gang
// block's kill signal and the signals Nomad hands the driver alike.
func ParseSignal(name string) (syscall.Signal, error) {
	n, err := jobspec.ParseSignal(name)
	if err != nil {
		return 0, fmt.Errorf("signal %q: %w", name, err)
	}
	s, ok := signalsByName[n]
	if !ok {
		// jobspec's vocabulary and this table are one list (a test holds
		// them equal); reaching here is that test failing.
		return 0, fmt.Errorf("signal %q: no number on this platform", n)
	}
	return s, nil
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// forwarded are the signals the supervisor relays to the task's process
// group (SIGKILL and SIGSTOP cannot be caught; the plugin sends SIGKILL to
// the group directly).
var forwarded = []os.Signal{
	syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGUSR1,
	syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGCONT, syscall.SIGTSTP, syscall.SIGWINCH,
	syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGXCPU, syscall.SIGPROF, syscall.SIGVTALRM,
}

// terminating signals abort a wait at the gang barrier.
func terminating(s os.Signal) bool {
	return s == syscall.SIGINT || s == syscall.SIGTERM || s == syscall.SIGQUIT || s == syscall.SIGHUP
}

// catchSignals relays the forwarded signals from now on (relaySignals);
// cancelBarrier aborts the wait at the gang barrier.
func (s *supervisor) catchSignals(cancelBarrier context.CancelFunc) {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	// A broken stderr must not kill the supervisor: without a Notify for
	// SIGPIPE, a write to a broken pipe on fd 1 or 2 kills a Go program
	// (os/signal, "SIGPIPE").
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	go s.relaySignals(sigs, cancelBarrier)
}

// relaySignals forwards signals to the task's process group. Before the
// task has started (gang barrier), a terminating signal, or any signal
// after the plugin has marked a stop (the stop file), aborts the start.
func (s *supervisor) relaySignals(sigs <-chan os.Signal, cancelBarrier context.CancelFunc) {
	for sig := range sigs {
		s.mu.Lock()
		pgid := s.pgid
		stopSig, stopping := s.stopSignal()
		abort := pgid == 0 && (terminating(sig) || stopping)
		if abort && s.stopSig == nil {
			s.stopSig = sig
			if stopSig != 0 {
				// The plugin's stop names the signal Nomad asked for (it
				// may be one the supervisor cannot catch, like SIGKILL).
				s.stopSig = stopSig
			}
		}
		s.mu.Unlock()
		if pgid == 0 {
			if abort {
				s.logger.Info("stop requested before the task started", "signal", sig)
				cancelBarrier()
			}
			continue
		}
		if s.isCheckpoint(sig) && !stopping {
			s.sendCheckpoint(pgid, sig.(syscall.Signal))
			continue
		}
		if err := syscall.Kill(-pgid, sig.(syscall.Signal)); err != nil {
			s.logger.Warn("forwarding signal", "signal", sig, "error", err)
		}
	}
}

// stopSignal reports whether the plugin has marked a stop, and the signal
// it named (0 if none or unreadable).
func (s *supervisor) stopSignal() (syscall.Signal, bool) {
	b, err := os.ReadFile(filepath.Join(s.dir, StopFile))
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 || n > 64 {
		return 0, true
	}
	return syscall.Signal(n), true
}

// ExitStatus turns the error of an exec.Cmd's Wait into an exit code and
// signal, a signal death counting as 128+signal as in a shell; err is
// returned only when the process's end is unknown.
func ExitStatus(waitErr error) (code, signal int, err error) {
	var ee *exec.ExitError
	switch {
	case waitErr == nil:
		return 0, 0, nil
	case errors.As(waitErr, &ee):
		ws, ok := ee.Sys().(syscall.WaitStatus)
		if !ok {
			return ee.ExitCode(), 0, nil
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal()), int(ws.Signal()), nil
		}
		return ws.ExitStatus(), 0, nil
	default:
		return 0, 0, waitErr
	}
}

func sigNum(s os.Signal) int {
	if ss, ok := s.(syscall.Signal); ok {
		return int(ss)
	}
	return 0
}
