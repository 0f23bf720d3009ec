package driver

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/impact-sched/nomad-impact/driver/executor"
	"github.com/impact-sched/nomad-impact/gang"
	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
)

// defaultKillSignal is Nomad's default kill_signal (the task block's
// documentation).
const defaultKillSignal = "SIGINT"

// taskSpec is what the supervisor of task tc runs, from its config and the
// plugin's (pcfg). A task that cannot run as configured (a config error,
// an unknown user, a program that is not there) is refused with a fatal
// error, before it joins its gang: a restart cannot fix it. It creates the
// task dir.
func (d *Driver) taskSpec(tc *driverpb.TaskConfig, pcfg Config) (executor.Spec, error) {
	cfg, err := d.taskConfig(tc)
	if err != nil {
		return executor.Spec{}, err
	}
	meta, err := taskContract(tc.GetEnv())
	if err != nil {
		return executor.Spec{}, fatal(codes.InvalidArgument, "task %s: %v", tc.GetName(), err)
	}
	info := taskInfo{name: tc.GetName(), allocID: tc.GetAllocId(), group: tc.GetTaskGroupName(),
		namespace: tc.GetNamespace(), jobID: tc.GetJobId(), jobName: tc.GetJobName(),
		nodeID: tc.GetNodeId(), nodeName: tc.GetNodeName(), env: tc.GetEnv(), meta: meta}
	gs, killSig, killTimeout, err := gangSpec(pcfg, cfg, info)
	if err != nil {
		return executor.Spec{}, fatal(codes.InvalidArgument, "task %s: config: %v", tc.GetName(), err)
	}
	if killSig == "" {
		killSig, killTimeout = defaultKillSignal, 30*time.Second
	}
	taskDir, _ := taskDirs(tc)
	if gs != nil && gs.Discovery != "nomad" {
		// identity { name = "impact" file = true }: Nomad writes (and
		// renews) the token in the task's secrets dir.
		gs.IdentityFile = filepath.Join(taskDir, "secrets", "nomad_"+gang.IdentityName+".jwt")
	}
	if err := os.MkdirAll(taskDir, 0o755); err != nil {
		return executor.Spec{}, recoverable(codes.Internal, "task %s: creating task dir: %v", tc.GetName(), err)
	}
	// A program that is not there is refused now, as Nomad's executor
	// refuses to launch it, before the task joins its gang (artifacts and
	// templates are in place by StartTask). The supervisor looks again.
	if _, err := executor.LookupCommand(taskDir, cfg.Command, tc.GetEnv()["PATH"]); err != nil {
		return executor.Spec{}, fatal(codes.InvalidArgument, "task %s: %v", tc.GetName(), err)
	}
	spec := executor.Spec{
		Version: executor.SpecVersion, TaskID: tc.GetId(), Command: cfg.Command, Args: cfg.Args,
		Dir: taskDir, Env: withAllGPUs(tc.GetEnv()), User: tc.GetUser(),
		StdoutPath: tc.GetStdoutPath(), StderrPath: tc.GetStderrPath(),
		KillSignal: killSig, KillTimeout: killTimeout, Gang: gs,
		RequeueFile: filepath.Join(taskDir, "local", requeueFileName), RequeueExitCode: meta.spec.RequeueCode(),
	}
	// The task always runs in the cgroups Nomad made for it (its cpuset
	// holds its reserved cores); limits are written only when enforcing.
	spec.Resources = resources(tc.GetResources(), pcfg.EnforceResources)
	if tc.GetAllocId() != "" {
		spec.Resources.NomadScope = tc.GetAllocId() + "." + tc.GetName()
	}
	return spec, nil
}

// taskConfig decodes the task's config block. An unknown task user (or
// one this plugin cannot switch to) is refused here, as Nomad's own
// drivers do, rather than started and left to fail.
func (d *Driver) taskConfig(tc *driverpb.TaskConfig) (TaskConfig, error) {
	var cfg TaskConfig
	if err := d.decoder.Decode(tc.GetMsgpackDriverConfig(), &cfg); err != nil {
		return cfg, fatal(codes.InvalidArgument, "task %s: config: %v", tc.GetName(), err)
	}
	if strings.TrimSpace(cfg.Command) == "" {
		return cfg, fatal(codes.InvalidArgument, "task %s: config: command is empty", tc.GetName())
	}
	if u := tc.GetUser(); u != "" {
		if _, err := executor.Credential(u); err != nil {
			return cfg, fatal(codes.InvalidArgument, "task %s: %v", tc.GetName(), err)
		}
	}
	return cfg, nil
}

// taskDirs returns the task's working dir and the supervisor's state dir
// (inside the task dir, so it lives and dies with the allocation).
func taskDirs(tc *driverpb.TaskConfig) (string, string) {
	suffix := tc.GetId()
	if i := strings.LastIndexByte(suffix, '/'); i >= 0 {
		suffix = suffix[i+1:]
	}
	if tc.GetAllocDir() == "" {
		base := filepath.Join(os.TempDir(), "impact-exec", sanitize(tc.GetId()))
		return base, filepath.Join(base, ".impact-exec")
	}
	taskDir := filepath.Join(tc.GetAllocDir(), tc.GetName())
	return taskDir, filepath.Join(taskDir, ".impact-exec", sanitize(suffix))
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == os.PathSeparator || r == 0 {
			return '_'
		}
		return r
	}, s)
}

// resources picks the task's cgroup and, when enforcing, its limits:
// Nomad's precomputed Linux values, else the allocated amounts.
func resources(r *driverpb.Resources, enforce bool) executor.Resources {
	lr, ar := r.GetLinuxResources(), r.GetAllocatedResources()
	out := executor.Resources{CgroupPath: lr.GetCpusetCgroup(), CpusetCpus: lr.GetCpusetCpus(), OOMScoreAdj: int32(lr.GetOomScoreAdj())}
	if !enforce {
		return out
	}
	out.MemoryLimitBytes, out.CPUShares = lr.GetMemoryLimitBytes(), lr.GetCpuShares()
	if out.MemoryLimitBytes == 0 {
		out.MemoryLimitBytes = max(ar.GetMemory().GetMemoryMb(), ar.GetMemory().GetMemoryMaxMb()) << 20
	}
	if out.CPUShares == 0 {
		out.CPUShares = ar.GetCpu().GetCpuShares()
	}
	return out
}
