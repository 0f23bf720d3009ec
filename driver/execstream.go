package driver

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/impact-sched/nomad-impact/driver/executor"
	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
)

// execChunk is the largest output chunk sent per message (as Nomad's SDK).
const execChunk = 1024

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
	if setup.GetTty() {
		master, slave, err := openPTY()
		if err != nil {
			return status.Errorf(codes.Internal, "ExecTaskStreaming: %v", err)
		}
		defer master.Close()
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
		if err := cmd.Start(); err != nil {
			slave.Close()
			return status.Errorf(codes.InvalidArgument, "ExecTaskStreaming: starting %s: %v", argv[0], err)
		}
		slave.Close()
		stdin = master
		resize = func(rows, cols int32) {
			_ = unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(rows), Col: uint16(cols)})
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
		if err := cmd.Start(); err != nil {
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

	// Output first (pipes hit EOF, a pty master EIO once the last holder
	// of the terminal exits), then the exit status.
	outputs.Wait()
	code, sig, err := executor.ExitStatus(cmd.Wait())
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

// openPTY opens a pseudo-terminal pair through /dev/ptmx.
func openPTY() (*os.File, *os.File, error) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("opening /dev/ptmx: %w", err)
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("unlocking pty: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("pty number: %w", err)
	}
	slave, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("opening pty slave: %w", err)
	}
	return master, slave, nil
}

func isPTYMaster(f *os.File) bool { return f.Name() == "/dev/ptmx" }
