package driver

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/impact-sched/nomad-impact/driver/executor"
	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
)

// execChunk is the largest output chunk sent per message (as Nomad's SDK).
const execChunk = 1024

// ttyDrain is how long a terminal's output is read after its command
// exited before the terminal is hung up.
const ttyDrain = 500 * time.Millisecond

// ExecTaskStreaming serves `nomad alloc exec`: a command in the task's
// directory and environment, with or without a terminal.
func (d *Driver) ExecTaskStreaming(stream driverpb.Driver_ExecTaskStreamingServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	setup := first.GetSetup()
	if setup == nil || len(setup.GetCommand()) == 0 {
		return status.Error(codes.InvalidArgument, "ExecTaskStreaming: the first message must carry setup with a command")
	}
	h, err := d.handle(setup.GetTaskId())
	if err != nil {
		return err
	}
	cmd, err := d.execCommand(h, setup.GetCommand())
	if err != nil {
		return status.Errorf(codes.FailedPrecondition, "ExecTaskStreaming: %v", err)
	}
	x := &execSession{stream: stream, cmd: cmd}
	start := func(c *exec.Cmd) error { return d.startExec(h, c) }
	if setup.GetTty() {
		err = x.startTTY(start, first.GetTtySize())
	} else {
		err = x.startPipes(start)
	}
	if err != nil {
		return err
	}
	if x.master != nil {
		defer x.master.Close()
	}
	x.input(first)
	go x.readClient()
	code, sig, err := executor.ExitStatus(x.wait())
	if err != nil {
		return status.Errorf(codes.Internal, "ExecTaskStreaming: %v", err)
	}
	res := &driverpb.ExitResult{ExitCode: int32(code), Signal: int32(sig)}
	return x.send(&driverpb.ExecTaskStreamingResponse{Exited: true, Result: res})
}

// execSession is one ExecTaskStreaming call: its command, whose output
// goes to the client as it comes, and the client's input.
type execSession struct {
	stream driverpb.Driver_ExecTaskStreamingServer
	sendMu sync.Mutex
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	master *os.File // the terminal (tty only)
	// outputs are the pumps forwarding the command's output.
	outputs sync.WaitGroup
}

func (x *execSession) send(r *driverpb.ExecTaskStreamingResponse) error {
	x.sendMu.Lock()
	defer x.sendMu.Unlock()
	return x.stream.Send(r)
}

// output forwards r to the client as stdout (or stderr) until it ends.
func (x *execSession) output(r io.Reader, stderr bool) {
	x.outputs.Add(1)
	go func() {
		defer x.outputs.Done()
		pump(r, func(op *driverpb.ExecTaskStreamingIOOperation) error {
			if stderr {
				return x.send(&driverpb.ExecTaskStreamingResponse{Stderr: op})
			}
			return x.send(&driverpb.ExecTaskStreamingResponse{Stdout: op})
		})
	}()
}

// startTTY starts the command on a new terminal, leading its own session,
// with the terminal size the client gave first.
func (x *execSession) startTTY(start func(*exec.Cmd) error, size *driverpb.ExecTaskStreamingRequest_TerminalSize) error {
	master, slave, err := openPTY()
	if err != nil {
		return status.Errorf(codes.Internal, "ExecTaskStreaming: %v", err)
	}
	// The first size is set before the command starts: set later, a
	// quick `stty size` could still read 0 0.
	if size != nil {
		setWinsize(master, size.GetHeight(), size.GetWidth())
	}
	cmd := x.cmd
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
	err = start(cmd)
	slave.Close()
	if err != nil {
		master.Close()
		return status.Errorf(codes.InvalidArgument, "ExecTaskStreaming: starting %s: %v", cmd.Args[0], err)
	}
	x.master, x.stdin = master, master
	x.output(master, false)
	return nil
}

// startPipes starts the command in its own process group with pipes for
// stdin, stdout and stderr.
func (x *execSession) startPipes(start func(*exec.Cmd) error) error {
	cmd := x.cmd
	cmd.SysProcAttr.Setpgid = true
	in, err := cmd.StdinPipe()
	if err != nil {
		return status.Errorf(codes.Internal, "ExecTaskStreaming: %v", err)
	}
	outR, err := cmd.StdoutPipe()
	if err != nil {
		return status.Errorf(codes.Internal, "ExecTaskStreaming: %v", err)
	}
	errR, err := cmd.StderrPipe()
	if err != nil {
		return status.Errorf(codes.Internal, "ExecTaskStreaming: %v", err)
	}
	if err := start(cmd); err != nil {
		return status.Errorf(codes.InvalidArgument, "ExecTaskStreaming: starting %s: %v", cmd.Args[0], err)
	}
	x.stdin = in
	x.output(outR, false)
	x.output(errR, true)
	return nil
}

// input applies one client message: a terminal resize, stdin.
func (x *execSession) input(msg *driverpb.ExecTaskStreamingRequest) {
	if sz := msg.GetTtySize(); sz != nil && x.master != nil {
		setWinsize(x.master, sz.GetHeight(), sz.GetWidth())
	}
	if op := msg.GetStdin(); op != nil {
		writeStdin(x.stdin, op)
	}
}

// readClient applies the client's messages until its stream ends or
// fails, which kills the command: its whole process group (with a
// terminal the command leads its own session and group), since a
// background child still holding the terminal would otherwise keep the
// output pump, and this call, alive after the client left.
func (x *execSession) readClient() {
	for {
		msg, err := x.stream.Recv()
		if err != nil {
			if x.cmd.Process != nil {
				_ = syscall.Kill(-x.cmd.Process.Pid, syscall.SIGKILL)
			}
			return
		}
		x.input(msg)
	}
}

// wait returns the command's end once its output is forwarded (pipes hit
// EOF once the command and its children are done). A terminal's session
// ends with its command, as when a terminal window closes: a background
// child still holding the terminal would otherwise keep the session (and
// the client waiting for the exit) open, so after a short drain the
// terminal is hung up.
func (x *execSession) wait() error {
	if x.master == nil {
		x.outputs.Wait()
		return x.cmd.Wait()
	}
	err := x.cmd.Wait()
	drained := make(chan struct{})
	go func() { x.outputs.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(ttyDrain):
		_ = x.master.Close()
		<-drained
	}
	return err
}

func writeStdin(w io.WriteCloser, op *driverpb.ExecTaskStreamingIOOperation) {
	if len(op.GetData()) > 0 {
		_, _ = w.Write(op.GetData())
	}
	if op.GetClose() {
		if f, ok := w.(*os.File); ok && isPTYMaster(f) {
			_, _ = w.Write([]byte{4}) // ^D: end of input on a terminal
			return
		}
		_ = w.Close()
	}
}

// pump forwards r in chunks, then a close op.
func pump(r io.Reader, send func(*driverpb.ExecTaskStreamingIOOperation) error) {
	buf := make([]byte, execChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if send(&driverpb.ExecTaskStreamingIOOperation{Data: append([]byte(nil), buf[:n]...)}) != nil {
				return
			}
		}
		if err != nil {
			_ = send(&driverpb.ExecTaskStreamingIOOperation{Close: true})
			return
		}
	}
}

// openPTY opens a pseudo-terminal pair through /dev/ptmx. The master is
// non-blocking, in Go's poller (never call its Fd, which would make it
// blocking again): closing it then ends a read that is waiting, which is
// how a session is hung up while a background child holds the terminal.
func openPTY() (*os.File, *os.File, error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("opening /dev/ptmx: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err == nil {
		err = unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0)
	}
	if err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("setting up pty: %w", err)
	}
	master := os.NewFile(uintptr(fd), "/dev/ptmx")
	slave, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("opening pty slave: %w", err)
	}
	return master, slave, nil
}

// setWinsize resizes the terminal without taking master out of the poller.
func setWinsize(master *os.File, rows, cols int32) {
	rc, err := master.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(rows), Col: uint16(cols)})
	})
}

func isPTYMaster(f *os.File) bool { return f.Name() == "/dev/ptmx" }
