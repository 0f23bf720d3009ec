package driver

import (
	"maps"
	"slices"
	"strings"
)

// Visibility variables and the per-block variable impact-gpu sets on
// every reservation (device.EnvBlockPrefix; a test keeps them equal).
const (
	envCUDAVisible   = "CUDA_VISIBLE_DEVICES"
	envNVIDIAVisible = "NVIDIA_VISIBLE_DEVICES"
	envBlockPrefix   = "IMPACT_GPU_BLOCK_"
)

// withAllGPUs returns the task's env with both visibility variables set to
// every GPU reserved for the task, over all its device blocks. Nomad
// reserves each device block apart and merges their env last-wins, so
// CUDA_VISIBLE_DEVICES alone holds only the last block's GPUs; impact-gpu
// also names each block's GPUs under a key of its own
// (IMPACT_GPU_BLOCK_<first UUID>), and those all survive the merge. The
// union lists the blocks in key order, each in the NVLink-friendly order
// the plugin gave it, without repeats. A task without such variables
// (another device plugin, or no GPUs) keeps its env as it is; the input
// map is never modified.
func withAllGPUs(env map[string]string) map[string]string {
	var keys []string
	for k := range env {
		if strings.HasPrefix(k, envBlockPrefix) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return env
	}
	slices.Sort(keys)
	var ids []string
	seen := map[string]bool{}
	for _, k := range keys {
		for _, id := range strings.Split(env[k], ",") {
			if id = strings.TrimSpace(id); id != "" && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	out := maps.Clone(env)
	list := strings.Join(ids, ",")
	out[envCUDAVisible] = list
	out[envNVIDIAVisible] = list
	return out
}
