package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/impact-sched/nomad-impact/driver/executor"
	"github.com/impact-sched/nomad-impact/gang"
	"github.com/impact-sched/nomad-impact/internal/version"
	"github.com/impact-sched/nomad-impact/plugin"
	"github.com/impact-sched/nomad-impact/plugin/config"
	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
	"github.com/impact-sched/nomad-impact/plugin/proto/hclspecpb"
	"github.com/impact-sched/nomad-impact/plugin/proto/structspb"
)

const (
	pluginName    = "impact-exec"
	pluginVersion = version.Version // the one of all three binaries
	// taskHandleVersion is the version of driverState in task handles.
	taskHandleVersion = 1
	fingerprintPeriod = 30 * time.Second
	eventPollPeriod   = 200 * time.Millisecond
	defaultKillSignal = "SIGINT" // Nomad's default kill_signal (the task block's documentation)
)

// Driver implements the Nomad Driver service.
type Driver struct {
	driverpb.UnimplementedDriverServer

	logger hclog.Logger
	exe    string // this binary, re-executed as `supervise`

	mu     sync.Mutex
	cfg    Config
	cfgGen chan struct{} // closed when the config changes
	tasks  map[string]*taskHandle
	// starting holds the IDs of StartTask calls in progress, so a second
	// StartTask of the same task cannot launch it twice.
	starting map[string]bool
	decoder  *config.Decoder
	events   *eventBroker
}

// New returns a driver. exe is the path of the impact-exec binary that
// tasks' supervisors run from (os.Executable() in production).
func New(logger hclog.Logger, exe string) *Driver {
	dec, err := config.NewDecoder(taskConfigSpec)
	if err != nil {
		panic(fmt.Sprintf("impact-exec task config schema is invalid: %v", err)) // a programming error
	}
	return &Driver{logger: logger.Named("driver"), exe: exe, cfg: defaultConfig(),
		cfgGen: make(chan struct{}), tasks: map[string]*taskHandle{}, starting: map[string]bool{}, decoder: dec, events: newEventBroker()}
}

var _ plugin.DriverPlugin = (*Driver)(nil)

// PluginInfo identifies the driver; jobs use driver = "impact-exec".
func (d *Driver) PluginInfo() plugin.Info {
	return plugin.Info{Name: pluginName, Version: pluginVersion}
}

// ConfigSchema is the plugin block's schema.
func (d *Driver) ConfigSchema() *hclspecpb.Spec { return configSpec }

// SetConfig validates and applies the plugin config (idempotent).
func (d *Driver) SetConfig(_ context.Context, c *plugin.Config) error {
	var cfg Config
	if err := c.Decode(&cfg); err != nil {
		return fmt.Errorf("impact-exec config: %w", err)
	}
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("impact-exec config: %w", err)
	}
	d.mu.Lock()
	d.cfg = cfg
	close(d.cfgGen)
	d.cfgGen = make(chan struct{})
	d.mu.Unlock()
	return nil
}

func (d *Driver) config() (Config, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg, d.cfgGen
}

// Init and Shutdown exist from Nomad 2.0.4; nothing to do (tasks outlive us).
func (d *Driver) Init(context.Context, *driverpb.InitRequest) (*driverpb.InitResponse, error) {
	return &driverpb.InitResponse{}, nil
}

func (d *Driver) Shutdown(context.Context, *driverpb.ShutdownRequest) (*driverpb.ShutdownResponse, error) {
	return &driverpb.ShutdownResponse{}, nil
}

func (d *Driver) TaskConfigSchema(context.Context, *driverpb.TaskConfigSchemaRequest) (*driverpb.TaskConfigSchemaResponse, error) {
	return &driverpb.TaskConfigSchemaResponse{Spec: taskConfigSpec}, nil
}

func (d *Driver) Capabilities(context.Context, *driverpb.CapabilitiesRequest) (*driverpb.CapabilitiesResponse, error) {
	return &driverpb.CapabilitiesResponse{Capabilities: &driverpb.DriverCapabilities{
		SendSignals: true,
		Exec:        true,
		FsIsolation: driverpb.DriverCapabilities_NONE,
		NetworkIsolationModes: []driverpb.NetworkIsolationSpec_NetworkIsolationMode{
			driverpb.NetworkIsolationSpec_HOST,
		},
		MountConfigs: driverpb.DriverCapabilities_NO_MOUNTS,
	}}, nil
}

// Fingerprint sends the driver's health now, on config changes and
// periodically, until the client goes away.
func (d *Driver) Fingerprint(_ *driverpb.FingerprintRequest, stream driverpb.Driver_FingerprintServer) error {
	ticker := time.NewTicker(fingerprintPeriod)
	defer ticker.Stop()
	for {
		cfg, changed := d.config()
		if err := stream.Send(d.fingerprint(cfg)); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-ticker.C:
		case <-changed:
		}
	}
}

func (d *Driver) fingerprint(cfg Config) *driverpb.FingerprintResponse {
	attrs := map[string]*structspb.Attribute{
		"driver." + pluginName:              {Value: &structspb.Attribute_BoolVal{BoolVal: true}},
		"driver." + pluginName + ".version": {Value: &structspb.Attribute_StringVal{StringVal: pluginVersion}},
	}
	desc := "healthy; gang barrier needs a rendezvous_addr in each task's gang block"
	switch {
	case cfg.RendezvousAddr != "":
		attrs["driver."+pluginName+".rendezvous"] = &structspb.Attribute{Value: &structspb.Attribute_StringVal{StringVal: cfg.RendezvousAddr}}
		desc = "healthy; rendezvous at " + cfg.RendezvousAddr
	case cfg.ConsulService != "":
		desc = "healthy; rendezvous found in consul: a passing instance of service " + cfg.ConsulService
		if cfg.ConsulTag != "" {
			desc += " with tag " + cfg.ConsulTag
		}
	}
	if _, err := os.Stat(d.exe); err != nil {
		return &driverpb.FingerprintResponse{Attributes: attrs, Health: driverpb.FingerprintResponse_UNHEALTHY,
			HealthDescription: fmt.Sprintf("supervisor binary %s missing: %v", d.exe, err)}
	}
	return &driverpb.FingerprintResponse{Attributes: attrs, Health: driverpb.FingerprintResponse_HEALTHY, HealthDescription: desc}
}

// driverState is persisted in the task handle (versioned by
// taskHandleVersion) so a new plugin process can find the task again.
type driverState struct {
	Executor  executor.State `json:"executor"`
	StartedAt time.Time      `json:"started_at"`
}

// taskHandle is one task this plugin process tracks.
type taskHandle struct {
	id        string
	cfg       *driverpb.TaskConfig
	proc      *executor.Process
	startedAt time.Time
	stats     *executor.StatsTracker
	stopPump  chan struct{}

	evMu     sync.Mutex // guards the event forwarding offset
	evOff    int64
	evLoaded bool
}

func (d *Driver) StartTask(ctx context.Context, req *driverpb.StartTaskRequest) (*driverpb.StartTaskResponse, error) {
	tc := req.GetTask()
	if tc == nil || tc.GetId() == "" {
		return nil, fatal(codes.InvalidArgument, "StartTask: task config with an id is required")
	}
	d.mu.Lock()
	_, exists := d.tasks[tc.GetId()]
	if exists || d.starting[tc.GetId()] {
		d.mu.Unlock()
		return nil, fatal(codes.AlreadyExists, "task %s is already started", tc.GetId())
	}
	d.starting[tc.GetId()] = true
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.starting, tc.GetId())
		d.mu.Unlock()
	}()
	var cfg TaskConfig
	if err := d.decoder.Decode(tc.GetMsgpackDriverConfig(), &cfg); err != nil {
		return nil, fatal(codes.InvalidArgument, "task %s: config: %v", tc.GetName(), err)
	}
	if strings.TrimSpace(cfg.Command) == "" {
		return nil, fatal(codes.InvalidArgument, "task %s: config: command is empty", tc.GetName())
	}
	// An unknown task user (or one this plugin cannot switch to) is refused
	// here, as Nomad's own drivers do, rather than started and left to
	// fail: a restart cannot fix it.
	if u := tc.GetUser(); u != "" {
		if _, err := executor.Credential(u); err != nil {
			return nil, fatal(codes.InvalidArgument, "task %s: %v", tc.GetName(), err)
		}
	}
	pcfg, _ := d.config()
	info := taskInfo{name: tc.GetName(), allocID: tc.GetAllocId(), group: tc.GetTaskGroupName(),
		namespace: tc.GetNamespace(), jobID: tc.GetJobId(), jobName: tc.GetJobName(),
		nodeID: tc.GetNodeId(), nodeName: tc.GetNodeName(), env: tc.GetEnv()}
	gs, killSig, killTimeout, err := gangSpec(pcfg, cfg, info)
	if err != nil {
		return nil, fatal(codes.InvalidArgument, "task %s: config: %v", tc.GetName(), err)
	}
	if killSig == "" {
		killSig, killTimeout = defaultKillSignal, 30*time.Second
	}

	taskDir, stateDir := taskDirs(tc)
	if gs != nil && gs.Discovery != "nomad" {
		// identity { name = "impact" file = true }: Nomad writes (and
		// renews) the token in the task's secrets dir.
		gs.IdentityFile = filepath.Join(taskDir, "secrets", "nomad_"+gang.IdentityName+".jwt")
	}
	if err := os.MkdirAll(taskDir, 0o755); err != nil {
		return nil, recoverable(codes.Internal, "task %s: creating task dir: %v", tc.GetName(), err)
	}
	// A program that is not there is refused now, as Nomad's executor
	// refuses to launch it, before the task joins its gang (artifacts and
	// templates are in place by StartTask). The supervisor looks again.
	if _, err := executor.LookupCommand(taskDir, cfg.Command, tc.GetEnv()["PATH"]); err != nil {
		return nil, fatal(codes.InvalidArgument, "task %s: %v", tc.GetName(), err)
	}
	spec := executor.Spec{
		Version: executor.SpecVersion, TaskID: tc.GetId(), Command: cfg.Command, Args: cfg.Args,
		Dir: taskDir, Env: withAllGPUs(tc.GetEnv()), User: tc.GetUser(),
		StdoutPath: tc.GetStdoutPath(), StderrPath: tc.GetStderrPath(),
		KillSignal: killSig, KillTimeout: killTimeout, Gang: gs,
		RequeueFile: filepath.Join(taskDir, "local", requeueFileName),
	}
	if spec.RequeueExitCode, err = requeueExitCode(tc.GetEnv()); err != nil {
		return nil, fatal(codes.InvalidArgument, "task %s: %v", tc.GetName(), err)
	}
	// The task always runs in the cgroups Nomad made for it (its cpuset
	// holds its reserved cores); limits are written only when enforcing.
	spec.Resources = resources(tc.GetResources(), pcfg.EnforceResources)
	if tc.GetAllocId() != "" {
		spec.Resources.NomadScope = tc.GetAllocId() + "." + tc.GetName()
	}
	logger := d.logger.With("task_id", tc.GetId(), "task", tc.GetName())
	proc, err := executor.Launch(ctx, d.exe, stateDir, spec, logger)
	if err != nil {
		return nil, recoverable(codes.Internal, "task %s: %v", tc.GetName(), err)
	}
	if gs == nil {
		proc.WaitRunning(ctx, 10*time.Second)
	}
	now := time.Now()
	if !d.track(tc, proc, now) {
		_ = proc.Destroy()
		return nil, fatal(codes.AlreadyExists, "task %s was recovered while it was being started", tc.GetId())
	}
	st, err := json.Marshal(driverState{Executor: proc.State(), StartedAt: now})
	if err != nil {
		return nil, fatal(codes.Internal, "encoding task state: %v", err)
	}
	logger.Info("task started", "supervisor_pid", proc.State().SupervisorPID, "gang", gs != nil)
	return &driverpb.StartTaskResponse{Handle: &driverpb.TaskHandle{
		Version: taskHandleVersion, Config: tc, State: driverpb.TaskState_RUNNING, DriverState: st,
	}}, nil
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

// track starts tracking a task; false (and nothing done) when the ID is
// tracked already, e.g. by a concurrent RecoverTask.
func (d *Driver) track(tc *driverpb.TaskConfig, proc *executor.Process, started time.Time) bool {
	h := &taskHandle{id: tc.GetId(), cfg: tc, proc: proc, startedAt: started,
		stats: executor.NewStatsTracker(), stopPump: make(chan struct{})}
	d.mu.Lock()
	if _, ok := d.tasks[h.id]; ok {
		d.mu.Unlock()
		return false
	}
	d.tasks[h.id] = h
	d.mu.Unlock()
	go d.pumpEvents(h)
	return true
}

// pumpEvents forwards the supervisor's events to the TaskEvents streams
// until the task has exited.
func (d *Driver) pumpEvents(h *taskHandle) {
	t := time.NewTicker(eventPollPeriod)
	defer t.Stop()
	for {
		exited := h.proc.Exited()
		d.forwardEvents(h)
		if exited {
			return
		}
		select {
		case <-t.C:
		case <-h.stopPump:
			return
		}
	}
}

// forwardEvents publishes the events written since the last call and
// records the offset. WaitTask calls it too, so the last events of a task
// (a barrier timeout, say) reach Nomad before its exit does: Nomad drops
// events of tasks it no longer runs.
func (d *Driver) forwardEvents(h *taskHandle) {
	h.evMu.Lock()
	defer h.evMu.Unlock()
	if !h.evLoaded {
		h.evOff, h.evLoaded = h.proc.EventOffset(), true
	}
	evs, next, err := h.proc.Events(h.evOff)
	if err != nil {
		d.logger.Warn("reading task events", "task_id", h.id, "error", err)
	}
	for _, ev := range evs {
		d.events.publish(&driverpb.DriverTaskEvent{TaskId: h.id, AllocId: h.cfg.GetAllocId(),
			TaskName: h.cfg.GetName(), Timestamp: timestamppb.New(ev.Time), Message: ev.Message,
			Annotations: ev.Annotations})
	}
	if next != h.evOff {
		if err := h.proc.SaveEventOffset(next); err != nil {
			d.logger.Warn("saving task event offset", "task_id", h.id, "error", err)
		}
	}
	h.evOff = next
}

func (d *Driver) handle(id string) (*taskHandle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.tasks[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "task %q not found", id)
	}
	return h, nil
}

func (d *Driver) RecoverTask(_ context.Context, req *driverpb.RecoverTaskRequest) (*driverpb.RecoverTaskResponse, error) {
	hd := req.GetHandle()
	if hd == nil || hd.GetConfig() == nil {
		return nil, status.Error(codes.InvalidArgument, "RecoverTask: handle with a task config is required")
	}
	id := hd.GetConfig().GetId()
	if id == "" {
		id = req.GetTaskId()
	}
	d.mu.Lock()
	_, known := d.tasks[id]
	d.mu.Unlock()
	if known {
		return &driverpb.RecoverTaskResponse{}, nil
	}
	if hd.GetVersion() != taskHandleVersion {
		return nil, status.Errorf(codes.FailedPrecondition, "task %s: handle version %d, this driver understands %d", id, hd.GetVersion(), taskHandleVersion)
	}
	var st driverState
	if err := json.Unmarshal(hd.GetDriverState(), &st); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "task %s: decoding driver state: %v", id, err)
	}
	proc, err := executor.Attach(st.Executor, d.logger.With("task_id", id))
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "task %s: %v", id, err)
	}
	tc := hd.GetConfig()
	if tc.GetId() == "" {
		tc.Id = id
	}
	if !d.track(tc, proc, st.StartedAt) {
		proc.Release() // recovered meanwhile by a concurrent call
		return &driverpb.RecoverTaskResponse{}, nil
	}
	d.logger.Info("task recovered", "task_id", id, "supervisor_pid", st.Executor.SupervisorPID, "exited", proc.Exited())
	return &driverpb.RecoverTaskResponse{}, nil
}

func (d *Driver) WaitTask(ctx context.Context, req *driverpb.WaitTaskRequest) (*driverpb.WaitTaskResponse, error) {
	h, err := d.handle(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	ex, err := h.proc.Wait(ctx)
	if err != nil && ctx.Err() != nil {
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	d.forwardEvents(h)
	d.events.drain(time.Second)
	if err != nil {
		return &driverpb.WaitTaskResponse{Result: lostResult(), Err: err.Error()}, nil
	}
	return &driverpb.WaitTaskResponse{Result: exitResult(ex), Err: ex.Err}, nil
}

// lostResult is the exit of a task whose supervisor was lost (no exit
// status): exit code -1 with the error, as Nomad reports a lost executor,
// so it is never taken for the command's own exit code.
func lostResult() *driverpb.ExitResult { return &driverpb.ExitResult{ExitCode: -1} }

func exitResult(ex executor.Exit) *driverpb.ExitResult {
	return &driverpb.ExitResult{ExitCode: int32(ex.ExitCode), Signal: int32(ex.Signal), OomKilled: ex.OOMKilled}
}

func (d *Driver) StopTask(_ context.Context, req *driverpb.StopTaskRequest) (*driverpb.StopTaskResponse, error) {
	h, err := d.handle(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	name := req.GetSignal()
	if name == "" {
		name = defaultKillSignal
	}
	sig, err := executor.ParseSignal(name)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "StopTask: %v", err)
	}
	timeout := req.GetTimeout().AsDuration()
	if err := h.proc.Stop(sig, timeout); err != nil {
		return nil, status.Errorf(codes.Internal, "stopping task %s: %v", h.id, err)
	}
	return &driverpb.StopTaskResponse{}, nil
}

func (d *Driver) DestroyTask(_ context.Context, req *driverpb.DestroyTaskRequest) (*driverpb.DestroyTaskResponse, error) {
	d.mu.Lock()
	h, ok := d.tasks[req.GetTaskId()]
	d.mu.Unlock()
	if !ok {
		return &driverpb.DestroyTaskResponse{}, nil
	}
	if !h.proc.Exited() && !req.GetForce() {
		return nil, status.Errorf(codes.FailedPrecondition, "task %s is still running; stop it or destroy with force", h.id)
	}
	if err := h.proc.Destroy(); err != nil {
		return nil, status.Errorf(codes.Internal, "destroying task %s: %v", h.id, err)
	}
	// Concurrent DestroyTasks of one task all get here: only the one that
	// removes the handle stops its event pump.
	d.mu.Lock()
	if d.tasks[h.id] == h {
		delete(d.tasks, h.id)
		close(h.stopPump)
	}
	d.mu.Unlock()
	return &driverpb.DestroyTaskResponse{}, nil
}

func (d *Driver) InspectTask(_ context.Context, req *driverpb.InspectTaskRequest) (*driverpb.InspectTaskResponse, error) {
	h, err := d.handle(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	// A running task's status still carries an (empty) exit result: Nomad's
	// driver client converts the reply and dereferences it unconditionally,
	// so a nil result panics the caller (its SDK always sends one).
	ts := &driverpb.TaskStatus{Id: h.id, Name: h.cfg.GetName(), State: driverpb.TaskState_RUNNING,
		StartedAt: timestamppb.New(h.startedAt), CompletedAt: timestamppb.New(time.Time{}),
		Result: &driverpb.ExitResult{}}
	attrs := map[string]string{"supervisor_pid": fmt.Sprint(h.proc.State().SupervisorPID)}
	if st, err := h.proc.Status(); err == nil {
		attrs["phase"] = string(st.Phase)
		if st.ChildPID > 0 {
			attrs["pid"] = fmt.Sprint(st.ChildPID)
		}
		for _, k := range []string{"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "IMPACT_GANG_ID"} {
			if v, ok := st.GangEnv[k]; ok {
				attrs["gang."+strings.ToLower(k)] = v
			}
		}
	}
	if h.proc.Exited() {
		if ex, err := h.proc.Wait(context.Background()); err == nil {
			ts.State = driverpb.TaskState_EXITED
			ts.Result = exitResult(ex)
			ts.CompletedAt = timestamppb.New(ex.ExitedAt)
		} else {
			ts.State = driverpb.TaskState_UNKNOWN
			ts.Result = lostResult()
			attrs["error"] = err.Error()
		}
	}
	return &driverpb.InspectTaskResponse{Task: ts, Driver: &driverpb.TaskDriverStatus{Attributes: attrs}}, nil
}

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

// TaskEvents streams driver events (gang barrier progress, propagation)
// for the plugin's lifetime.
func (d *Driver) TaskEvents(_ *driverpb.TaskEventsRequest, stream driverpb.Driver_TaskEventsServer) error {
	ch, cancel := d.events.subscribe()
	defer cancel()
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case ev := <-ch:
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}

func (d *Driver) SignalTask(_ context.Context, req *driverpb.SignalTaskRequest) (*driverpb.SignalTaskResponse, error) {
	h, err := d.handle(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	sig, err := executor.ParseSignal(req.GetSignal())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "SignalTask: %v", err)
	}
	if err := h.proc.Signal(sig); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "signalling task %s: %v", h.id, err)
	}
	return &driverpb.SignalTaskResponse{}, nil
}

// ExecTask runs a command in the task's directory with its environment
// (script checks). Its stdout and stderr are merged, in the order written,
// into the reply's Stdout, keeping the last execOutputMax bytes, as
// Nomad's executor does: Nomad's script checks read only Stdout, so an
// error printed on stderr would otherwise be lost.
func (d *Driver) ExecTask(ctx context.Context, req *driverpb.ExecTaskRequest) (*driverpb.ExecTaskResponse, error) {
	h, err := d.handle(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if len(req.GetCommand()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "ExecTask: command is empty")
	}
	cmd, err := d.execCommand(h, req.GetCommand())
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "ExecTask: %v", err)
	}
	res, err := runExec(ctx, cmd, func(c *exec.Cmd) error { return d.startExec(h, c) }, req.GetTimeout().AsDuration())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "ExecTask: %v", err)
	}
	return res, nil
}

// fatal is a StartTask failure a restart will not fix.
func fatal(code codes.Code, format string, args ...any) error {
	return withRecoverable(code, fmt.Sprintf(format, args...), false)
}

// recoverable is a failure a restart may fix (Nomad applies the restart
// policy).
func recoverable(code codes.Code, format string, args ...any) error {
	return withRecoverable(code, fmt.Sprintf(format, args...), true)
}

func withRecoverable(code codes.Code, msg string, rec bool) error {
	st, err := status.New(code, msg).WithDetails(&structspb.RecoverableError{Recoverable: rec})
	if err != nil {
		return status.Error(code, msg)
	}
	return st.Err()
}

// IsRecoverable reports the recoverable flag of a gRPC error from the driver.
func IsRecoverable(err error) (bool, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return false, false
	}
	for _, det := range st.Details() {
		if r, ok := det.(*structspb.RecoverableError); ok {
			return r.GetRecoverable(), true
		}
	}
	return false, false
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
