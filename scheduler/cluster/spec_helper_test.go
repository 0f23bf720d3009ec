package cluster

import (
	"fmt"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

func specFor(j int) policy.Spec {
	return policy.Spec{
		Tier: "normal", Project: fmt.Sprintf("project-%d", j%50), Walltime: 6 * time.Hour,
		Grace: time.Minute, CheckpointSignal: "SIGUSR1", Topology: policy.TopologyNVLink, Pool: "gpu",
	}
}
