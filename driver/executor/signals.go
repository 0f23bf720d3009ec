package executor

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"syscall"
)

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

// ParseSignal turns a signal name ("SIGUSR1", "USR1", "usr1") or number
// ("10") into a signal.
func ParseSignal(name string) (syscall.Signal, error) {
	n := strings.ToUpper(strings.TrimSpace(name))
	if n == "" {
		return 0, fmt.Errorf("empty signal name")
	}
	if v, err := strconv.Atoi(n); err == nil {
		if v <= 0 || v > 64 {
			return 0, fmt.Errorf("signal number %d out of range", v)
		}
		return syscall.Signal(v), nil
	}
	if !strings.HasPrefix(n, "SIG") {
		n = "SIG" + n
	}
	if s, ok := signalsByName[n]; ok {
		return s, nil
	}
	return 0, fmt.Errorf("unknown signal %q", name)
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
