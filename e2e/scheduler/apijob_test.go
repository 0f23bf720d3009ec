package scheduler

import (
	"encoding/json"
	"time"
)

// apiJob is a batch job registered over Nomad's HTTP API (the JSON of
// /v1/jobs): one group "g" of count allocations that Nomad neither
// restarts nor reschedules, each one raw_exec task "t" running script
// under /bin/sh with a 2s kill timeout, asking cpu MHz, mem MB and gpus
// GPUs. priority 0 leaves Nomad's default (50); meta nil sets none.
type apiJob struct {
	name, pool            string
	meta                  map[string]string
	priority              int
	count, gpus, cpu, mem int
	script                string
}

func (j apiJob) json() []byte {
	job := map[string]any{
		"ID": j.name, "Name": j.name, "Type": "batch", "Datacenters": []string{"*"}, "NodePool": j.pool,
		"TaskGroups": []any{map[string]any{
			"Name": "g", "Count": j.count,
			"RestartPolicy":    map[string]any{"Attempts": 0, "Mode": "fail"},
			"ReschedulePolicy": map[string]any{"Attempts": 0, "Unlimited": false},
			"Tasks": []any{map[string]any{
				"Name": "t", "Driver": "raw_exec", "KillTimeout": int64(2 * time.Second),
				"Config": map[string]any{"command": "/bin/sh", "args": []string{"-c", j.script}},
				"Resources": map[string]any{"CPU": j.cpu, "MemoryMB": j.mem,
					"Devices": []any{map[string]any{"Name": "nvidia/gpu", "Count": j.gpus}}},
			}},
		}},
	}
	if j.meta != nil {
		job["Meta"] = j.meta
	}
	if j.priority != 0 {
		job["Priority"] = j.priority
	}
	b, _ := json.Marshal(map[string]any{"Job": job})
	return b
}
