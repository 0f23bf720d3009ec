package driver

import (
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/impact-sched/nomad-impact/driver/executor"
	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
)

// eventPollPeriod is how often a task's events file is read.
const eventPollPeriod = 200 * time.Millisecond

// taskHandle is one task this plugin process tracks: its supervisor and
// the forwarding of its events to Nomad.
type taskHandle struct {
	id        string
	cfg       *driverpb.TaskConfig
	proc      *executor.Process
	startedAt time.Time
	stats     *executor.StatsTracker
	stopPump  chan struct{}
	events    *eventBroker
	logger    hclog.Logger

	evMu     sync.Mutex // guards the event forwarding offset
	evOff    int64
	evLoaded bool
}

// track starts tracking a task; false (and nothing done) when the ID is
// tracked already, e.g. by a concurrent RecoverTask.
func (d *Driver) track(tc *driverpb.TaskConfig, proc *executor.Process, started time.Time) bool {
	h := &taskHandle{id: tc.GetId(), cfg: tc, proc: proc, startedAt: started,
		stats: executor.NewStatsTracker(), stopPump: make(chan struct{}), events: d.events, logger: d.logger}
	d.mu.Lock()
	if _, ok := d.tasks[h.id]; ok {
		d.mu.Unlock()
		return false
	}
	d.tasks[h.id] = h
	d.mu.Unlock()
	go h.pumpEvents()
	return true
}

// handle is the tracked task id (codes.NotFound if none).
func (d *Driver) handle(id string) (*taskHandle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.tasks[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "task %q not found", id)
	}
	return h, nil
}

// pumpEvents forwards the supervisor's events to the TaskEvents streams
// until the task has exited.
func (h *taskHandle) pumpEvents() {
	t := time.NewTicker(eventPollPeriod)
	defer t.Stop()
	for {
		exited := h.proc.Exited()
		h.forwardEvents()
		if exited {
			return
		}
		select {
		case <-t.C:
		case <-h.stopPump:
			return
		}
	}
}

// forwardEvents publishes the events written since the last call and
// records the offset. WaitTask calls it too, so the last events of a task
// (a barrier timeout, say) reach Nomad before its exit does: Nomad drops
// events of tasks it no longer runs.
func (h *taskHandle) forwardEvents() {
	h.evMu.Lock()
	defer h.evMu.Unlock()
	if !h.evLoaded {
		h.evOff, h.evLoaded = h.proc.EventOffset(), true
	}
	evs, next, err := h.proc.Events(h.evOff)
	if err != nil {
		h.logger.Warn("reading task events", "task_id", h.id, "error", err)
	}
	for _, ev := range evs {
		h.events.publish(&driverpb.DriverTaskEvent{TaskId: h.id, AllocId: h.cfg.GetAllocId(),
			TaskName: h.cfg.GetName(), Timestamp: timestamppb.New(ev.Time), Message: ev.Message,
			Annotations: ev.Annotations})
	}
	if next != h.evOff {
		if err := h.proc.SaveEventOffset(next); err != nil {
			h.logger.Warn("saving task event offset", "task_id", h.id, "error", err)
		}
	}
	h.evOff = next
}
