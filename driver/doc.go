// Package driver is the impact-exec Nomad task driver: exec-style tasks
// held at a gang barrier until every member of their job is placed, given
// rendezvous env, stopped together with a checkpoint signal when one member
// fails or is preempted, and surviving plugin and agent restarts through a
// detached supervisor per task. driver/README.md is the reference for
// operators and job authors (plugin and task config, workload identity,
// processes, the checkpoint signal, exit codes, cgroups, gang-join). The
// package is a library: the binary's command line (serving the driver, and
// the supervise, exec-in, gang-server and gang-join subcommands) is
// cmd/impact-exec.
//
// # Layout
//
//	driver.go      the Driver service: plugin config, capabilities, fingerprint
//	config.go      the plugin and task config blocks, and the job's impact_*
//	               meta as the driver reads it (jobspec's contract)
//	gangspec.go    the supervisor's gang spec built from a task's gang block
//	               and meta: discovery, stopping, master address, identity
//	taskspec.go    what a task's supervisor runs (executor.Spec); a task that
//	               cannot run is refused here, before it joins its gang
//	lifecycle.go   StartTask, RecoverTask, WaitTask, StopTask, DestroyTask,
//	               InspectTask, SignalTask
//	handle.go      one tracked task and the forwarding of its events
//	state.go       the driver state kept in Nomad's task handle
//	events.go      task events fanned out to TaskEvents streams
//	exec.go        ExecTask and exec commands in the task's user, env and
//	               cgroups (ExecIn joins v1 cgroups); execstream.go serves
//	               `nomad alloc exec` (ExecTaskStreaming)
//	stats.go       TaskStats
//	visible.go     GPU visibility over all of a task's device blocks
//	gangjoin.go    the gang barrier for a task of another driver (GangJoin)
//	errors.go      fatal and recoverable errors as Nomad reads them
//
// driver/executor is the supervisor, one detached process per task: the
// plugin side (process.go, events.go) and the supervisor talk only through
// the files in the task's state dir (spec.go) and signals, so a new plugin
// process can take over at any time. The supervisor's parts: supervise.go
// (a task's life, step by step), member.go (the gang barrier and watching
// the gang while the task runs), command.go (finding the program),
// credentials.go, logs.go, signals.go (relaying signals, exit statuses),
// checkpoint.go (the checkpoint signal, stops, the requeue file),
// cgroup.go, procfs.go (the task's processes in /proc) and stats.go.
//
// The rendezvous protocol (registry, HTTP endpoint and client) is package
// gang, shared with the impact agent; the rendezvous through Nomad's own
// service discovery is driver/internal/nomadbarrier.
package driver
