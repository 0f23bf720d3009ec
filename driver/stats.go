package driver

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/impact-sched/nomad-impact/driver/executor"
	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
)

// TaskStats streams CPU and memory of the task's process tree every
// collection_interval until the client goes away or the task exits.
func (d *Driver) TaskStats(req *driverpb.TaskStatsRequest, stream driverpb.Driver_TaskStatsServer) error {
	h, err := d.handle(req.GetTaskId())
	if err != nil {
		return err
	}
	interval := req.GetCollectionInterval().AsDuration()
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		pid := 0
		if st, err := h.proc.Status(); err == nil {
			pid = st.ChildPID
		}
		if err := stream.Send(&driverpb.TaskStatsResponse{Stats: toTaskStats(h.id, h.stats.Sample(pid))}); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-h.proc.Done():
			return nil
		case <-t.C:
		}
	}
}

func toTaskStats(id string, s executor.Sample) *driverpb.TaskStats {
	byPid := make(map[string]*driverpb.TaskResourceUsage, len(s.ByPID))
	for pid, u := range s.ByPID {
		byPid[fmt.Sprint(pid)] = toUsage(u)
	}
	return &driverpb.TaskStats{Id: id, Timestamp: timestamppb.New(s.Time), AggResourceUsage: toUsage(s.Agg), ResourceUsageByPid: byPid}
}

func toUsage(u executor.Usage) *driverpb.TaskResourceUsage {
	return &driverpb.TaskResourceUsage{
		Cpu: &driverpb.CPUUsage{SystemMode: u.SystemPct, UserMode: u.UserPct, TotalTicks: u.TotalTicks, Percent: u.Percent,
			MeasuredFields: []driverpb.CPUUsage_Fields{driverpb.CPUUsage_SYSTEM_MODE, driverpb.CPUUsage_USER_MODE,
				driverpb.CPUUsage_TOTAL_TICKS, driverpb.CPUUsage_PERCENT}},
		Memory: &driverpb.MemoryUsage{Rss: u.RSS, Swap: u.Swap,
			MeasuredFields: []driverpb.MemoryUsage_Fields{driverpb.MemoryUsage_RSS, driverpb.MemoryUsage_SWAP}},
	}
}
