package driver

import (
	"fmt"
	"io"
	"os"
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
	argv := cmd.Args

	var sendMu sync.Mutex
	send := func(r *driverpb.ExecTaskStreamingResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(r)
	}
	var stdin io.WriteCloser
	var outputs sync.WaitGroup
	var resize func(rows, cols int32)
	var hangUp func() // closes the terminal (tty only)
	if setup.GetTty() {
		master, slave, err := openPTY()
		if err != nil {
			return status.Errorf(codes.Internal, "ExecTaskStreaming: %v", err)
		}
		defer master.Close()
		// The first size is set before the command starts: set later, a
		// quick `stty size` could still read 0 0.
		if sz := first.GetTtySize(); sz != nil {
			setWinsize(master, sz.GetHeight(), sz.GetWidth())
		}
		hangUp = func() { _ = master.Close() }
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
		if err := d.startExec(h, cmd); err != nil {
			slave.Close()
			return status.Errorf(codes.InvalidArgument, "ExecTaskStreaming: starting %s: %v", argv[0], err)
		}
		slave.Close()
		stdin = master
		resize = func(rows, cols int32) {
			setWinsize(master, rows, cols)
		}
		outputs.Add(1)
		go func() {
			defer outputs.Done()
			pump(master, func(op *driverpb.ExecTaskStreamingIOOperation) error {
				return send(&driverpb.ExecTaskStreamingResponse{Stdout: op})
			})
		}()
	} else {
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
		if err := d.startExec(h, cmd); err != nil {
			return status.Errorf(codes.InvalidArgument, "ExecTaskStreaming: starting %s: %v", argv[0], err)
		}
		stdin = in
		outputs.Add(2)
		go func() {
			defer outputs.Done()
			pump(outR, func(op *driverpb.ExecTaskStreamingIOOperation) error {
				return send(&driverpb.ExecTaskStreamingResponse{Stdout: op})
			})
		}()
		go func() {
			defer outputs.Done()
			pump(errR, func(op *driverpb.ExecTaskStreamingIOOperation) error {
				return send(&driverpb.ExecTaskStreamingResponse{Stderr: op})
			})
		}()
	}
	if sz := first.GetTtySize(); sz != nil && resize != nil {
		resize(sz.GetHeight(), sz.GetWidth())
	}
	if op := first.GetStdin(); op != nil {
		writeStdin(stdin, op)
	}

	// Client input: stdin, resizes; the stream ending or failing kills
	// the command.
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				// The whole process group (with a terminal the command
				// leads its own session and group): a background child
				// still holding the terminal would otherwise keep the
				// output pump, and this call, alive after the client left.
				if cmd.Process != nil {
					_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				}
				return
			}
			if sz := msg.GetTtySize(); sz != nil && resize != nil {
				resize(sz.GetHeight(), sz.GetWidth())
			}
			if op := msg.GetStdin(); op != nil {
				writeStdin(stdin, op)
			}
		}
	}()

	// Output first (pipes hit EOF once the command and its children are
	// done), then the exit status. A terminal's session ends with its
	// command, as when a terminal window closes: a background child still
	// holding the terminal would otherwise keep the session (and the
	// client waiting for the exit) open, so after a short drain the
	// terminal is hung up.
	var waitErr error
	if hangUp != nil {
		waitErr = cmd.Wait()
		drained := make(chan struct{})
		go func() { outputs.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(ttyDrain):
			hangUp()
			<-drained
		}
	} else {
		outputs.Wait()
		waitErr = cmd.Wait()
	}
	code, sig, err := executor.ExitStatus(waitErr)
	if err != nil {
		return status.Errorf(codes.Internal, "ExecTaskStreaming: %v", err)
	}
	res := &driverpb.ExitResult{ExitCode: int32(code), Signal: int32(sig)}
	return send(&driverpb.ExecTaskStreamingResponse{Exited: true, Result: res})
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
