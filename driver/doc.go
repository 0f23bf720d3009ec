// Package driver is the impact-exec Nomad task driver: exec-style tasks held
// at a gang barrier until every member of their job is placed, given
// rendezvous env, stopped together with a checkpoint signal when one member
// fails or is preempted, and surviving plugin and agent restarts through a
// detached supervisor per task (package driver/executor). The rendezvous
// protocol (registry, HTTP endpoint and client) is package gang at the top
// of the module, shared with the impact agent; the rendezvous through Nomad's
// own service discovery is driver-only, in driver/internal/nomadbarrier.
//
// # Plugin config (agent: plugin "impact-exec" { config { ... } })
//
//	rendezvous_addr    string  ""     base URL of the rendezvous endpoint: an impact
//	                                  agent (serves /v1/gang/) or `impact-exec
//	                                  gang-server`. Empty: tasks without a gang block
//	                                  run without a barrier.
//	barrier_timeout    string  "10m"  default barrier timeout
//	heartbeat_interval string  "5s"   gang heartbeat period (member TTL = 3x)
//	advertise_addr     string  ""     address for MASTER_ADDR when the task names no
//	                                  port label (default: the local address that
//	                                  routes to the rendezvous server)
//	enforce_resources  bool    true   memory limit (OOM reported) and cpu shares via
//	                                  cgroups v2, or v1 memory+cpu controllers (in
//	                                  Nomad's cgroups for the task where it made them)
//	nomad_addr         string  ""     Nomad API for discovery = "nomad" when the task
//	                                  has no task API socket
//	consul_service     string  ""     without rendezvous_addr: find the impact agent in
//	                                  Consul (it registers "impact-scheduler"); members
//	                                  follow a failover to the new leader
//	consul_tag         string  leader only instances with this tag
//	consul_addr        string  ""     Consul HTTP address (default CONSUL_HTTP_ADDR or
//	                                  127.0.0.1:8500)
//	rendezvous_ca_cert string  ""     CA file verifying an https rendezvous endpoint
//	rendezvous_client_cert, rendezvous_client_key
//	                   string  ""     client certificate for an endpoint that wants
//	                                  mTLS (the agent's http.tls_client_ca)
//
// # Workload identity (what a gang job's tasks need)
//
// The impact agent (and `impact-exec gang-server` without -dev) accepts a
// member only with its task's Nomad workload identity. Each impact-exec
// task of a gang job needs
//
//	identity {
//	  name = "impact"     # Nomad writes secrets/nomad_impact.jwt
//	  aud  = ["impact"]   # the agent's auth.identity_audience
//	  file = true
//	  ttl  = "1h"         # renewed by Nomad before it expires
//	}
//
// The supervisor reads <task dir>/secrets/nomad_impact.jwt on every call
// (so Nomad's renewals are used), else NOMAD_TOKEN_impact from the task env
// (env = true; not renewed in a running task), and sends it as
// Authorization: Bearer. Without it, the join is refused and the task fails
// at the barrier with "missing workload identity: ... which impact-exec
// presents when the task has identity { ... } (impact-exec found no
// workload identity for this task: no file ..., no NOMAD_TOKEN_impact in
// the task env)". A running member whose identity is refused (expired
// while its Nomad client could not renew it) keeps running and retries.
//
// # Task config (task "x" { driver = "impact-exec"; config { ... } })
//
//	command  string        required  program (PATH of the task env, or a path
//	                                 relative to the task dir)
//	args     list(string)  []
//	gang {                           optional; without it the whole job is one gang
//	                                 when rendezvous_addr or consul_service is set
//	  enabled           bool    true
//	  name              string  ""      narrows the gang: "<ns>:<job>:<name>"
//	  size              number  0       members; 0 = the job's allocation count, asked
//	                                    of the rendezvous server (discovery = "nomad":
//	                                    of Nomad's job API, needs read-job)
//	  timeout           string  ""      barrier timeout (default barrier_timeout)
//	  port_label        string  ""      group port whose address/port is MASTER_ADDR/
//	                                    MASTER_PORT when this member is rank 0
//	  master_port       number  29500   MASTER_PORT without a port label
//	  checkpoint_signal string  ""      sent when a peer fails (default: job meta
//	                                    impact_checkpoint_signal)
//	  grace             string  ""      checkpoint -> kill delay (default: meta
//	                                    impact_grace, else 30s)
//	  checkpoint_signal_to
//	                    string  group   whom the checkpoint signal reaches: "group"
//	                                    (the task's process group), "main" (its
//	                                    main process) or "children" (the main
//	                                    process's children); see "The checkpoint
//	                                    signal" below
//	  propagate_failure bool    true    stop this member when a peer fails or stops
//	  kill_signal       string  SIGINT  how this member is stopped after the grace
//	  kill_timeout      string  "30s"   then SIGKILL
//	  rendezvous_addr   string  ""      overrides the plugin's
//	  discovery         string  impact  "impact" or "nomad" (Nomad-native service)
//	  service           string  ""      the group's Nomad service (discovery = "nomad")
//	}
//
// With discovery = "nomad" a member that passed the barrier does not end
// (its service registration stays) until nomadbarrier.NomadHold(heartbeat_interval)
// after passing, so a member whose command ends at once cannot strand a
// slower peer; a member that can no longer complete fails fast with an
// event naming the members that left.
//
// Injected env after the barrier: WORLD_SIZE, RANK, NODE_RANK, NNODES,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, IMPACT_GANG_ID,
// IMPACT_GANG_EPOCH.
//
// GPUs: CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES list every GPU
// reserved for the task, over all its device blocks (withAllGPUs). Nomad
// merges the blocks' reservation env last-wins, which would leave only the
// last block's GPUs; impact-gpu names each block's GPUs in a variable of
// its own (IMPACT_GPU_BLOCK_<first UUID>), and the driver sets both
// visibility variables to their union. Other drivers (exec, docker,
// raw_exec) do not: a task there with several GPU device blocks sees only
// the last block's GPUs in those variables (all device nodes are still
// mounted, and the IMPACT_GPU_BLOCK_* variables are there to read), and
// the impact scheduler warns when it admits one. With one device block
// every driver sees all of the task's GPUs.
//
// # Processes
//
// A task's command runs in its own process group, as the task's user, with
// the task's env plus the rendezvous env; a task running as another user
// gets that user's USER, LOGNAME and HOME. The command is looked up as
// Nomad's executor does: the task dir's local/, then the task dir, then
// PATH of the task env; a program without the execute bit is made
// executable. An unknown task user, or a program that cannot be found, is
// refused at StartTask (not recoverable), before the task joins its gang.
// A task without a gang barrier has started its command when StartTask
// returns. Exec commands (script checks, `nomad alloc exec`) get the same
// user and env; ExecTask merges their stdout and stderr into Stdout (the
// last 4 KiB), as Nomad's executor does for script checks. The task runs
// with Nomad's oom_score_adj (LinuxResources), not the plugin's.
//
// Stops send the kill signal to the group, then SIGKILL after the kill
// timeout. When the task's main process ends, whatever it left behind is
// killed: the rest of its process group and (with cgroups) every process
// in its cgroups. This is deliberate and differs from Nomad's raw_exec,
// which leaves such children running until the task is destroyed: a
// member's end is what its gang, the impact scheduler and Nomad's restart
// policy act on, so a leftover child (a data loader, a worker still
// holding a GPU) would hold resources the scheduler already counts as
// free, and on a restart would run beside the task's next attempt.
//
// # The checkpoint signal
//
// The checkpoint signal (gang.checkpoint_signal, else the job's
// impact_checkpoint_signal) reaches a task two ways: from the supervisor
// when a peer of its gang fails or stops, and from Nomad (`nomad alloc
// signal`, which the impact agent uses to preempt). Both go where
// checkpoint_signal_to says; any other signal, and every stop, still goes
// to the whole process group. When a peer fails less than the grace after
// the checkpoint signal was delivered (a preemption stops every member),
// the supervisor does not send it again: a second SIGTERM would interrupt
// torchrun's wait for its workers, and it would end before they saved.
//
//   - "group" (the default): every process in the task's process group.
//     Right for one training process per allocation (`python train.py`),
//     whose fork-started helpers (DataLoader workers) inherit its handler,
//     and for launchers that survive the signal (mpirun forwards SIGUSR1
//     and SIGUSR2 to its ranks; torchrun and accelerate handle SIGTERM and
//     SIGINT and pass them on, so with those the workers get it twice).
//   - "main": the main process only, as `nomad alloc signal` does for
//     Nomad's exec and raw_exec. For a launcher that forwards the signal
//     and a trainer that must not see it twice: torchrun or `accelerate
//     launch` with impact_checkpoint_signal = "SIGTERM" (on SIGTERM
//     torchrun sends SIGTERM to each worker, waits up to 30s for them and
//     exits 1), mpirun with SIGUSR1.
//   - "children": the main process's direct children, not the main process
//     nor their own children (a worker's DataLoader processes). For a
//     launcher that dies of the signal or does not forward it: torchrun or
//     accelerate with SIGUSR1 (no handler: the launcher dies at once, and
//     since the end of a task's main process kills what is left of it, its
//     workers were killed before they had saved anything), a shell script
//     that runs the trainer without exec. Once every signalled child has
//     exited, the main process is given LauncherExitWait (1s) to end on
//     its own, then gets the task's kill signal: torchrun notices a
//     worker's end only at its next --monitor_interval poll (5s by default)
//     and would add that to every preemption.
//
// The default stays "group" because it is what a single-process trainer
// needs and what this driver has always done; a task whose command names a
// known launcher (torchrun, torch.distributed.run, accelerate, deepspeed)
// with "group" and a checkpoint signal other than SIGTERM or SIGINT gets a
// task event at start saying so. DeepSpeed's launcher (`deepspeed`) handles
// only SIGINT and SIGTERM, and by killing its workers: run DeepSpeed
// without it (one process per allocation, deepspeed.init_distributed reads
// RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT) or under torchrun.
//
// With torchrun the least work is lost with checkpoint_signal_to =
// "children" and SIGUSR1, or "main" and SIGTERM: the workers finish the
// step in flight, save, and exit with the requeue code. torchrun turns
// that into exit 1; see the requeue file below.
//
// # Exit codes (the preemption outcome contract)
//
// The impact scheduler decides what a preempted or requeued job's end
// means from the exit code Nomad reports for each task (its Terminated
// event), so WaitTask reports the task's own exit code unchanged: 0 means
// the work is done (the job completes and is never run again, whether or
// not the checkpoint signal came first); the job's impact_requeue_exit_code
// (default 75, EX_TEMPFAIL) means "checkpoint saved, requeue me"; anything
// else, or a task still running at the end of its grace, is stopped and
// requeued. A trainer that checkpoints on the signal and wants to resume
// must exit with the requeue code, not 0. See scheduler/nomad's package
// documentation.
//
// The requeue file: a launcher may not pass its workers' exit code on
// (torchrun exits 1 whatever its workers' codes). Every task gets
// IMPACT_REQUEUE_FILE, a path in its local/ dir (removed before the command
// starts, so a restart in place does not inherit it). A process that has
// saved its checkpoint and exits with the requeue code should first write
// that file (any content). When the task's main process then ends with
// anything but 0 (an exit code or a signal), the driver reports the
// job's impact_requeue_exit_code (default 75) instead, with a task event
// naming the main process's own end. An exit 0 is always reported as 0, and
// without the file the exit code is the main process's own.
//
// # Cgroups
//
// A task runs in the cgroups Nomad's client made for it, whatever
// enforce_resources says: on v2 the task's cgroup (LinuxResources
// cpuset_cgroup); on v1 the cpuset Nomad gives (reserve/<alloc>.<task>,
// where the reserved cores are written, as Nomad's executor does, or the
// shared one) and Nomad's per-task freezer, cpu and memory cgroups
// (<parent>/<alloc>.<task>) where they exist. Limits go there; only a
// controller Nomad did not provide gets a cgroup of the driver's own
// (impact-exec/<task id>), removed when the task ends. Exec commands run
// in the same cgroups: cloned into the task's cgroup on v2; on v1 started
// as `impact-exec exec-in`, which joins them and takes the task user's
// credentials before executing the command.
//
// A task whose supervisor died cannot be recovered: its orphaned command
// is killed so Nomad's restart does not run it twice. WaitTask then
// reports exit code -1 with an error naming the lost supervisor (as Nomad
// reports a lost executor), and a forced DestroyTask, whatever state the
// supervisor is in, kills what is left in the task's process group and
// cgroups and removes the cgroups the supervisor made. The
// task's env values do not stay on disk: the supervisor drops them from
// its spec file once read (the state dir lies in the task dir, readable
// through `nomad alloc fs`).
//
// # Gangs for any driver (impact-exec gang-join)
//
// A task of another driver (docker, exec, raw_exec) gets the same barrier
// and rendezvous env from `impact-exec gang-join`, run as a prestart
// lifecycle task (raw_exec, or exec with the binary inside its chroot) in
// each allocation of the gang: it joins "<namespace>:<job_id>" (with
// -name, "<namespace>:<job_id>:<name>") as member "<alloc_id>.<its task>" with its own "impact"
// workload identity (the identity block above, on the prestart task),
// waits for every member (-timeout, default 10m), writes the rendezvous env
// to $NOMAD_ALLOC_DIR/impact/gang.env (KEY="value" lines, values JSON
// escaped: the format of a Nomad template with env = true; written
// atomically, an older file removed first) and exits 0, after reporting
// its end to the rendezvous server (the member is done, so the next run of
// the job rendezvouses as a new generation). Nomad starts the main task
// only then; its template { source = "../alloc/impact/gang.env"
// destination = "local/gang.env" env = true } puts the variables in its
// env. Flags: -addr (default $IMPACT_RENDEZVOUS_ADDR, else $IMPACT_ADDR),
// -port-label, -master-port, -advertise, -node-id (pass
// "${node.unique.id}": NODE_RANK and NNODES count nodes; default
// $IMPACT_NODE_ID, else the host name), -size, -name, -identity, -out,
// -ca-cert, -client-cert, -client-key. Exit 1 when the barrier times out,
// the gang fails or is stopped while waiting, or the join is refused
// (a 401 names the identity file it looked for); 2 for bad usage. Its
// stdout says how many members have arrived.
//
// What such a task does not get from impact-exec: nothing watches it after
// the rendezvous, so a failed member stops its peers through the impact
// agent (which requeues a gang that lost a member whole, with the
// checkpoint signal and grace) rather than at once; the checkpoint signal
// reaches the task as Nomad's driver delivers `nomad alloc signal` (docker:
// the container's PID 1); checkpoint_signal_to and the requeue file
// (IMPACT_REQUEUE_FILE) are impact-exec's only; and the GPU visibility
// variables are Nomad's device reservation env as is (with one device
// block, exactly the task's GPUs). example/jobs/docker-gang.nomad.hcl is
// the jobspec.
//
// The binary also runs `impact-exec supervise DIR` (one per task, started by
// the driver), `impact-exec exec-in SPEC -- ARGV` (an exec command joining
// its task's v1 cgroups, started by the driver) and `impact-exec gang-server -nomad-addr URL [-listen ADDR]
// [-ttl D]` (a standalone rendezvous server, authenticated like the
// agent's; `-dev` serves without authentication, on loopback only unless
// -dev-remote).
package driver
