package driver

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/impact-sched/nomad-impact/driver/executor"
	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
)

// StartTask launches the task's supervisor (taskSpec says what it runs).
// A task without a gang barrier has started its command when it returns.
func (d *Driver) StartTask(ctx context.Context, req *driverpb.StartTaskRequest) (*driverpb.StartTaskResponse, error) {
	tc := req.GetTask()
	if tc == nil || tc.GetId() == "" {
		return nil, fatal(codes.InvalidArgument, "StartTask: task config with an id is required")
	}
	done, err := d.starting(tc.GetId())
	if err != nil {
		return nil, err
	}
	defer done()
	pcfg, _ := d.config()
	spec, err := d.taskSpec(tc, pcfg)
	if err != nil {
		return nil, err
	}
	_, stateDir := taskDirs(tc)
	logger := d.logger.With("task_id", tc.GetId(), "task", tc.GetName())
	proc, err := executor.Launch(ctx, d.exe, stateDir, spec, logger)
	if err != nil {
		return nil, recoverable(codes.Internal, "task %s: %v", tc.GetName(), err)
	}
	if spec.Gang == nil {
		proc.WaitRunning(ctx, 10*time.Second)
	}
	now := time.Now()
	if !d.track(tc, proc, now) {
		_ = proc.Destroy()
		return nil, fatal(codes.AlreadyExists, "task %s was recovered while it was being started", tc.GetId())
	}
	hd, err := handleFor(tc, driverState{Executor: proc.State(), StartedAt: now})
	if err != nil {
		return nil, err
	}
	logger.Info("task started", "supervisor_pid", proc.State().SupervisorPID, "gang", spec.Gang != nil)
	return &driverpb.StartTaskResponse{Handle: hd}, nil
}

// starting marks a StartTask of task id in progress until done is called,
// so a second StartTask of the same task cannot launch it twice.
func (d *Driver) starting(id string) (done func(), err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, exists := d.tasks[id]; exists || d.startingIDs[id] {
		return nil, fatal(codes.AlreadyExists, "task %s is already started", id)
	}
	d.startingIDs[id] = true
	return func() {
		d.mu.Lock()
		delete(d.startingIDs, id)
		d.mu.Unlock()
	}, nil
}

func (d *Driver) RecoverTask(_ context.Context, req *driverpb.RecoverTaskRequest) (*driverpb.RecoverTaskResponse, error) {
	hd := req.GetHandle()
	if hd == nil || hd.GetConfig() == nil {
		return nil, status.Error(codes.InvalidArgument, "RecoverTask: handle with a task config is required")
	}
	id := hd.GetConfig().GetId()
	if id == "" {
		id = req.GetTaskId()
	}
	d.mu.Lock()
	_, known := d.tasks[id]
	d.mu.Unlock()
	if known {
		return &driverpb.RecoverTaskResponse{}, nil
	}
	st, err := stateOf(id, hd)
	if err != nil {
		return nil, err
	}
	proc, err := executor.Attach(st.Executor, d.logger.With("task_id", id))
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "task %s: %v", id, err)
	}
	tc := hd.GetConfig()
	if tc.GetId() == "" {
		tc.Id = id
	}
	if !d.track(tc, proc, st.StartedAt) {
		proc.Release() // recovered meanwhile by a concurrent call
		return &driverpb.RecoverTaskResponse{}, nil
	}
	d.logger.Info("task recovered", "task_id", id, "supervisor_pid", st.Executor.SupervisorPID, "exited", proc.Exited())
	return &driverpb.RecoverTaskResponse{}, nil
}

func (d *Driver) WaitTask(ctx context.Context, req *driverpb.WaitTaskRequest) (*driverpb.WaitTaskResponse, error) {
	h, err := d.handle(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	ex, err := h.proc.Wait(ctx)
	if err != nil && ctx.Err() != nil {
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	h.forwardEvents()
	d.events.drain(time.Second)
	if err != nil {
		return &driverpb.WaitTaskResponse{Result: lostResult(), Err: err.Error()}, nil
	}
	return &driverpb.WaitTaskResponse{Result: exitResult(ex), Err: ex.Err}, nil
}

// lostResult is the exit of a task whose supervisor was lost (no exit
// status): exit code -1 with the error, as Nomad reports a lost executor,
// so it is never taken for the command's own exit code.
func lostResult() *driverpb.ExitResult { return &driverpb.ExitResult{ExitCode: -1} }

func exitResult(ex executor.Exit) *driverpb.ExitResult {
	return &driverpb.ExitResult{ExitCode: int32(ex.ExitCode), Signal: int32(ex.Signal), OomKilled: ex.OOMKilled}
}

func (d *Driver) StopTask(_ context.Context, req *driverpb.StopTaskRequest) (*driverpb.StopTaskResponse, error) {
	h, err := d.handle(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	name := req.GetSignal()
	if name == "" {
		name = defaultKillSignal
	}
	sig, err := executor.ParseSignal(name)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "StopTask: %v", err)
	}
	timeout := req.GetTimeout().AsDuration()
	if err := h.proc.Stop(sig, timeout); err != nil {
		return nil, status.Errorf(codes.Internal, "stopping task %s: %v", h.id, err)
	}
	return &driverpb.StopTaskResponse{}, nil
}

func (d *Driver) DestroyTask(_ context.Context, req *driverpb.DestroyTaskRequest) (*driverpb.DestroyTaskResponse, error) {
	d.mu.Lock()
	h, ok := d.tasks[req.GetTaskId()]
	d.mu.Unlock()
	if !ok {
		return &driverpb.DestroyTaskResponse{}, nil
	}
	if !h.proc.Exited() && !req.GetForce() {
		return nil, status.Errorf(codes.FailedPrecondition, "task %s is still running; stop it or destroy with force", h.id)
	}
	if err := h.proc.Destroy(); err != nil {
		return nil, status.Errorf(codes.Internal, "destroying task %s: %v", h.id, err)
	}
	// Concurrent DestroyTasks of one task all get here: only the one that
	// removes the handle stops its event pump.
	d.mu.Lock()
	if d.tasks[h.id] == h {
		delete(d.tasks, h.id)
		close(h.stopPump)
	}
	d.mu.Unlock()
	return &driverpb.DestroyTaskResponse{}, nil
}

func (d *Driver) InspectTask(_ context.Context, req *driverpb.InspectTaskRequest) (*driverpb.InspectTaskResponse, error) {
	h, err := d.handle(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	// A running task's status still carries an (empty) exit result: Nomad's
	// driver client converts the reply and dereferences it unconditionally,
	// so a nil result panics the caller (its SDK always sends one).
	ts := &driverpb.TaskStatus{Id: h.id, Name: h.cfg.GetName(), State: driverpb.TaskState_RUNNING,
		StartedAt: timestamppb.New(h.startedAt), CompletedAt: timestamppb.New(time.Time{}),
		Result: &driverpb.ExitResult{}}
	attrs := map[string]string{"supervisor_pid": fmt.Sprint(h.proc.State().SupervisorPID)}
	if st, err := h.proc.Status(); err == nil {
		attrs["phase"] = string(st.Phase)
		if st.ChildPID > 0 {
			attrs["pid"] = fmt.Sprint(st.ChildPID)
		}
		for _, k := range []string{"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "IMPACT_GANG_ID"} {
			if v, ok := st.GangEnv[k]; ok {
				attrs["gang."+strings.ToLower(k)] = v
			}
		}
	}
	if h.proc.Exited() {
		if ex, err := h.proc.Wait(context.Background()); err == nil {
			ts.State = driverpb.TaskState_EXITED
			ts.Result = exitResult(ex)
			ts.CompletedAt = timestamppb.New(ex.ExitedAt)
		} else {
			ts.State = driverpb.TaskState_UNKNOWN
			ts.Result = lostResult()
			attrs["error"] = err.Error()
		}
	}
	return &driverpb.InspectTaskResponse{Task: ts, Driver: &driverpb.TaskDriverStatus{Attributes: attrs}}, nil
}

func (d *Driver) SignalTask(_ context.Context, req *driverpb.SignalTaskRequest) (*driverpb.SignalTaskResponse, error) {
	h, err := d.handle(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	sig, err := executor.ParseSignal(req.GetSignal())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "SignalTask: %v", err)
	}
	if err := h.proc.Signal(sig); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "signalling task %s: %v", h.id, err)
	}
	return &driverpb.SignalTaskResponse{}, nil
}
