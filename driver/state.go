package driver

import (
	"encoding/json"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/impact-sched/nomad-impact/driver/executor"
	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
)

// taskHandleVersion is the version of driverState in task handles.
const taskHandleVersion = 1

// driverState is persisted in the task handle (versioned by
// taskHandleVersion) so a new plugin process can find the task again.
type driverState struct {
	Executor  executor.State `json:"executor"`
	StartedAt time.Time      `json:"started_at"`
}

// handleFor is the task handle Nomad keeps for a started task.
func handleFor(tc *driverpb.TaskConfig, st driverState) (*driverpb.TaskHandle, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fatal(codes.Internal, "encoding task state: %v", err)
	}
	return &driverpb.TaskHandle{Version: taskHandleVersion, Config: tc, State: driverpb.TaskState_RUNNING, DriverState: b}, nil
}

// stateOf reads back the state of task id from the handle Nomad kept.
func stateOf(id string, hd *driverpb.TaskHandle) (driverState, error) {
	var st driverState
	if hd.GetVersion() != taskHandleVersion {
		return st, status.Errorf(codes.FailedPrecondition, "task %s: handle version %d, this driver understands %d", id, hd.GetVersion(), taskHandleVersion)
	}
	if err := json.Unmarshal(hd.GetDriverState(), &st); err != nil {
		return st, status.Errorf(codes.FailedPrecondition, "task %s: decoding driver state: %v", id, err)
	}
	return st, nil
}
