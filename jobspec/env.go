package jobspec

import "strings"

// taskEnvMetaPrefix is how Nomad passes meta to a task: NOMAD_META_<key>,
// the key as written (it adds an upper-cased copy, which is not read).
const taskEnvMetaPrefix = "NOMAD_META_"

// MetaFromTaskEnv is the contract's meta as a task sees it: every
// NOMAD_META_impact_* variable of its environment, keyed by the meta key.
// Nomad has merged the job's, the group's and the task's meta into it,
// the innermost winning, so a group's impact_grace reaches its tasks. The
// driver parses it with ParseMeta(MetaFromTaskEnv(env), nil): one parse,
// the scheduler's.
func MetaFromTaskEnv(env map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		if key, ok := strings.CutPrefix(k, taskEnvMetaPrefix); ok && strings.HasPrefix(key, MetaPrefix) {
			out[key] = v
		}
	}
	return out
}
