package jobspec

import (
	"errors"
	"maps"
	"slices"
	"strings"
)

// signalNames is the vocabulary of signal names: the Linux signals a task
// can be sent, written as Nomad's own kill_signal takes them ("SIGUSR1").
// The driver maps each to its number (driver/executor); its tests check
// that every name here has one.
var signalNames = map[string]bool{
	"SIGABRT": true, "SIGALRM": true, "SIGBUS": true, "SIGCHLD": true, "SIGCONT": true,
	"SIGFPE": true, "SIGHUP": true, "SIGILL": true, "SIGINT": true, "SIGIO": true,
	"SIGKILL": true, "SIGPIPE": true, "SIGPROF": true, "SIGQUIT": true, "SIGSEGV": true,
	"SIGSTOP": true, "SIGSYS": true, "SIGTERM": true, "SIGTRAP": true, "SIGTSTP": true,
	"SIGTTIN": true, "SIGTTOU": true, "SIGURG": true, "SIGUSR1": true, "SIGUSR2": true,
	"SIGVTALRM": true, "SIGWINCH": true, "SIGXCPU": true, "SIGXFSZ": true,
}

// SignalNames lists the signal names ParseSignal accepts, sorted.
func SignalNames() []string {
	return slices.Sorted(maps.Keys(signalNames))
}

// ParseSignal reads a signal name as every signal setting of the contract
// takes it: impact_checkpoint_signal, and the driver's gang.checkpoint_signal
// and gang.kill_signal, and the signals Nomad hands the driver. The rule is
// Nomad's kill_signal's: the full upper-case name ("SIGUSR1"), surrounding
// spaces ignored. "USR1", "usr1" and "10" are errors (a number means
// different signals on different architectures; a name that is not
// Nomad's spelling would be read one way by one component and rejected by
// another), whose text suggests the name meant. It returns the name.
func ParseSignal(v string) (string, error) {
	name, why := signalName(v)
	if why != "" {
		return "", errors.New(why)
	}
	return name, nil
}

// signalName is ParseSignal with the reason as a string (for MetaError).
func signalName(v string) (string, string) {
	n := strings.TrimSpace(v)
	if signalNames[n] {
		return n, ""
	}
	why := "must be a signal name such as SIGUSR1 or SIGTERM"
	up := strings.ToUpper(n)
	if !strings.HasPrefix(up, "SIG") {
		up = "SIG" + up
	}
	if signalNames[up] {
		why += ` (did you mean "` + up + `"?)`
	}
	return "", why
}
