// Package jobspec is the jobspec contract: the `impact_*` meta keys a job
// sets for the impact scheduler and the impact-exec driver, their parsing
// and their errors. Both binaries read a job's meta with it (the agent
// from Nomad's job, the driver from the task's NOMAD_META_* environment:
// MetaFromTaskEnv), so an input means the same to both or is the same
// error; it imports neither (make check holds that).
//
//   - spec.go: the keys, Spec (what a job's meta says; zero means "not
//     given") and the defaults a Spec resolves itself (requeue exit code,
//     max failed runs). What a missing tier, project or preemptibility
//     becomes is the policy's call (scheduler/policy), as is whether a
//     tier exists.
//   - parse.go: ParseMeta and ParseGroupMeta (which keys a task group may
//     override), one parser per key, ValidName (the name rule the policy
//     file's tiers and projects follow too) and ParseDuration.
//   - signal.go: the signal vocabulary, Nomad's kill_signal spelling
//     ("SIGUSR1"); the driver numbers each name (driver/executor).
//   - errors.go: MetaError names the key, its value and the group;
//     MetaErrors lists every problem of one job at once; JoinMetaErrors
//     merges a job's parses.
//
// The table in internal/jobspectest holds the scheduler's and the driver's
// tests to one answer per input.
package jobspec
