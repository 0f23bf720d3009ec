package cluster

import (
	"fmt"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
)

func specFor(j int) jobspec.Spec {
	return jobspec.Spec{
		Tier: "normal", Project: fmt.Sprintf("project-%d", j%50), Walltime: 6 * time.Hour,
		Grace: time.Minute, CheckpointSignal: "SIGUSR1", Topology: jobspec.TopologyNVLink, Pool: "gpu",
	}
}
