package executor

import (
	"fmt"
	"os"
	"os/exec"
)

// openLogs points the command's stdout and stderr at the task's log
// destinations (see openLog).
func openLogs(cmd *exec.Cmd, stdout, stderr string) error {
	var err error
	if cmd.Stdout, err = openLog(stdout); err != nil {
		return err
	}
	if cmd.Stderr, err = openLog(stderr); err != nil {
		closeLogs(cmd)
		return err
	}
	return nil
}

// closeLogs closes the supervisor's copies of the command's log files once
// the command has them.
func closeLogs(cmd *exec.Cmd) {
	for _, w := range []any{cmd.Stdout, cmd.Stderr} {
		if f, ok := w.(*os.File); ok {
			f.Close()
		}
	}
}

// openLog opens a log destination (usually a FIFO read by Nomad's logmon)
// for writing; empty means /dev/null. A FIFO is opened read-write: a
// write-only open blocks until a reader has it open, so a logmon that is
// not reading (restarting with its agent, or gone) would hang the
// supervisor before the task starts, deaf to stops. Read-write never
// blocks; the pipe keeps what the task writes (up to its capacity) until
// logmon reads again, and the task gets no EPIPE/SIGPIPE meanwhile.
func openLog(p string) (*os.File, error) {
	if p == "" {
		p = os.DevNull
	}
	flag := os.O_WRONLY | os.O_APPEND | os.O_CREATE
	if fi, err := os.Stat(p); err == nil && fi.Mode()&os.ModeNamedPipe != 0 {
		flag = os.O_RDWR
	}
	f, err := os.OpenFile(p, flag, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log %s: %w", p, err)
	}
	return f, nil
}
