package driver

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/impact-sched/nomad-impact/driver/executor"
	"github.com/impact-sched/nomad-impact/gang"
	"github.com/impact-sched/nomad-impact/internal/testwait"
	"github.com/impact-sched/nomad-impact/plugin"
	"github.com/impact-sched/nomad-impact/plugin/plugintest"
	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
)

// binary is impact-exec built once for the conformance tests, which
// launch it the way a Nomad client does.
var binary string

func TestMain(m *testing.M) {
	os.Exit(plugintest.RunWithMain(m, "../cmd/impact-exec", &binary))
}

func load(t *testing.T, cfgHCL string) *plugintest.Instance {
	t.Helper()
	return plugintest.LoadLikeNomad(t, binary, plugin.KindDriver, cfgHCL, plugintest.Options{})
}

type task struct {
	cfg    *driverpb.TaskConfig
	dir    string // task dir
	stdout string
}

// newTask builds a TaskConfig like the client's: alloc dir, task dir, log
// paths, env, and the config block encoded against the schema.
func newTask(t *testing.T, name, configHCL string, env map[string]string) task {
	t.Helper()
	data, err := plugintest.EncodeConfig(taskConfigSpec, configHCL)
	if err != nil {
		t.Fatalf("encode task config: %v", err)
	}
	allocDir := t.TempDir()
	allocID := fmt.Sprintf("%08x-alloc", time.Now().UnixNano()&0xffffffff)
	os.MkdirAll(filepath.Join(allocDir, "alloc", "logs"), 0o755)
	os.MkdirAll(filepath.Join(allocDir, name), 0o755)
	e := map[string]string{"PATH": "/usr/bin:/bin", "NOMAD_TASK_NAME": name}
	for k, v := range env {
		e[k] = v
	}
	cfg := &driverpb.TaskConfig{
		Id: allocID + "/" + name + "/abcd1234", Name: name, MsgpackDriverConfig: data, Env: e,
		AllocDir: allocDir, AllocId: allocID, TaskGroupName: "workers", JobName: "train", JobId: "train",
		Namespace: "default", NodeId: "node-1", NodeName: "node1",
		StdoutPath: filepath.Join(allocDir, "alloc", "logs", name+".stdout"),
		StderrPath: filepath.Join(allocDir, "alloc", "logs", name+".stderr"),
	}
	return task{cfg: cfg, dir: filepath.Join(allocDir, name), stdout: cfg.StdoutPath}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func start(t *testing.T, inst *plugintest.Instance, tk task) *driverpb.TaskHandle {
	t.Helper()
	resp, err := inst.Driver.StartTask(ctxT(t, 30*time.Second), &driverpb.StartTaskRequest{Task: tk.cfg})
	if err != nil {
		t.Fatalf("StartTask: %v", err)
	}
	// Tasks outlive the plugin by design: end this one with the test
	// (an error means it was stopped already, or its plugin is gone).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = inst.Driver.StopTask(ctx, &driverpb.StopTaskRequest{TaskId: tk.cfg.Id, Signal: "SIGKILL", Timeout: durationpb.New(0)})
	})
	if resp.GetHandle().GetConfig().GetId() != tk.cfg.Id || resp.GetHandle().GetVersion() != taskHandleVersion {
		t.Fatalf("handle: %+v", resp.GetHandle())
	}
	return resp.GetHandle()
}

func waitTask(t *testing.T, inst *plugintest.Instance, id string, d time.Duration) *driverpb.WaitTaskResponse {
	t.Helper()
	resp, err := inst.Driver.WaitTask(ctxT(t, d), &driverpb.WaitTaskRequest{TaskId: id})
	if err != nil {
		t.Fatalf("WaitTask: %v", err)
	}
	return resp
}

func TestConformanceBasics(t *testing.T) {
	t.Parallel()
	inst := load(t, "")
	ctx := ctxT(t, time.Minute)
	schema, err := inst.Driver.TaskConfigSchema(ctx, &driverpb.TaskConfigSchemaRequest{})
	if err != nil || schema.GetSpec() == nil {
		t.Fatalf("TaskConfigSchema: %v", err)
	}
	caps, err := inst.Driver.Capabilities(ctx, &driverpb.CapabilitiesRequest{})
	if err != nil || !caps.GetCapabilities().GetSendSignals() || !caps.GetCapabilities().GetExec() {
		t.Fatalf("Capabilities: %+v %v", caps, err)
	}
	fp, err := inst.Driver.Fingerprint(ctx, &driverpb.FingerprintRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := fp.Recv()
	if err != nil || first.GetHealth() != driverpb.FingerprintResponse_HEALTHY || first.GetAttributes()["driver.impact-exec"].GetBoolVal() != true {
		t.Fatalf("fingerprint: %+v %v", first, err)
	}
	// Exit codes and output.
	for _, code := range []int{0, 3} {
		tk := newTask(t, "main", fmt.Sprintf(`
command = "/bin/sh"
args    = ["-c", "echo hello $NOMAD_TASK_NAME; exit %d"]`, code), nil)
		start(t, inst, tk)
		res := waitTask(t, inst, tk.cfg.Id, 30*time.Second)
		if res.GetResult().GetExitCode() != int32(code) || res.GetResult().GetSignal() != 0 || res.GetErr() != "" {
			t.Fatalf("exit %d: %+v", code, res)
		}
		if out := testwait.File(t, tk.stdout, time.Second); strings.TrimSpace(out) != "hello main" {
			t.Fatalf("stdout %q", out)
		}
		// Waiting again returns at once; InspectTask says exited.
		if res := waitTask(t, inst, tk.cfg.Id, 5*time.Second); res.GetResult().GetExitCode() != int32(code) {
			t.Fatalf("second wait: %+v", res)
		}
		ins, err := inst.Driver.InspectTask(ctx, &driverpb.InspectTaskRequest{TaskId: tk.cfg.Id})
		if err != nil || ins.GetTask().GetState() != driverpb.TaskState_EXITED || ins.GetTask().GetCompletedAt() == nil {
			t.Fatalf("inspect: %+v %v", ins, err)
		}
		if _, err := inst.Driver.DestroyTask(ctx, &driverpb.DestroyTaskRequest{TaskId: tk.cfg.Id, Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	// DestroyTask tolerates unknown tasks; others answer NotFound.
	if _, err := inst.Driver.DestroyTask(ctx, &driverpb.DestroyTaskRequest{TaskId: "nope", Force: true}); err != nil {
		t.Fatalf("destroy unknown: %v", err)
	}
	if _, err := inst.Driver.WaitTask(ctx, &driverpb.WaitTaskRequest{TaskId: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("wait unknown: %v", err)
	}
	// A bad config is an unrecoverable StartTask error naming the field.
	bad := newTask(t, "bad", `command = "x"`, nil)
	bad.cfg.MsgpackDriverConfig = []byte{0x81, 0xa3, 'f', 'o', 'o', 0xc1}
	_, err = inst.Driver.StartTask(ctx, &driverpb.StartTaskRequest{Task: bad.cfg})
	if rec, ok := IsRecoverable(err); err == nil || !ok || rec {
		t.Fatalf("bad config: err %v recoverable %v/%v", err, rec, ok)
	}
	gangBad := newTask(t, "g", `
command = "/bin/true"
gang {
  size = 2
}`, nil)
	_, err = inst.Driver.StartTask(ctx, &driverpb.StartTaskRequest{Task: gangBad.cfg})
	if err == nil || !strings.Contains(err.Error(), "rendezvous") {
		t.Fatalf("gang without rendezvous address: %v", err)
	}
}

func TestConformanceStopSignalStatsExec(t *testing.T) {
	t.Parallel()
	inst := load(t, "")
	ctx := ctxT(t, time.Minute)

	// Stop: the kill signal is trapped and ignored, so SIGKILL follows the timeout.
	tk := newTask(t, "stubborn", `
command = "/bin/sh"
args    = ["-c", "trap 'echo term' TERM; echo x > ready; while true; do sleep 0.05; done"]`, nil)
	start(t, inst, tk)
	testwait.File(t, filepath.Join(tk.dir, "ready"), 10*time.Second)
	began := time.Now()
	if _, err := inst.Driver.StopTask(ctx, &driverpb.StopTaskRequest{TaskId: tk.cfg.Id, Signal: "SIGTERM", Timeout: durationpb.New(400 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(began); el < 400*time.Millisecond {
		t.Fatalf("StopTask returned after %s, before the timeout", el)
	}
	res := waitTask(t, inst, tk.cfg.Id, 10*time.Second)
	if res.GetResult().GetSignal() != int32(syscall.SIGKILL) || res.GetResult().GetExitCode() != 137 {
		t.Fatalf("stop result: %+v", res)
	}

	// Stop with the default signal (empty = SIGINT) ends a plain sleep at once.
	tk = newTask(t, "sleeper", `
command = "sleep"
args    = ["30"]`, nil)
	start(t, inst, tk)
	// Stats: samples come with timestamps and the process tree's memory.
	stream, err := inst.Driver.TaskStats(ctx, &driverpb.TaskStatsRequest{TaskId: tk.cfg.Id, CollectionInterval: durationpb.New(50 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	var got *driverpb.TaskStatsResponse
	for i := 0; i < 100; i++ {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.GetStats().GetTimestamp() == nil {
			t.Fatal("stats sample without timestamp")
		}
		if r.GetStats().GetAggResourceUsage().GetMemory().GetRss() > 0 && len(r.GetStats().GetResourceUsageByPid()) > 0 {
			got = r
			break
		}
	}
	if got == nil {
		t.Fatal("no stats sample with the task's memory")
	}
	// Exec runs in the task dir with the task env.
	ex, err := inst.Driver.ExecTask(ctx, &driverpb.ExecTaskRequest{TaskId: tk.cfg.Id, Command: []string{"/bin/sh", "-c", "echo $NOMAD_TASK_NAME; pwd; exit 4"}, Timeout: durationpb.New(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if string(ex.GetStdout()) != "sleeper\n"+tk.dir+"\n" || ex.GetResult().GetExitCode() != 4 {
		t.Fatalf("exec: %q %+v", ex.GetStdout(), ex.GetResult())
	}
	if _, err := inst.Driver.StopTask(ctx, &driverpb.StopTaskRequest{TaskId: tk.cfg.Id, Timeout: durationpb.New(10 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if res := waitTask(t, inst, tk.cfg.Id, 10*time.Second); res.GetResult().GetSignal() != int32(syscall.SIGINT) {
		t.Fatalf("default stop signal: %+v", res)
	}

	// SignalTask reaches the task by name.
	tk = newTask(t, "signalled", `
command = "/bin/sh"
args    = ["-c", "trap 'echo usr1 > got; exit 0' USR1; echo x > ready; while true; do sleep 0.05; done"]`, nil)
	start(t, inst, tk)
	testwait.File(t, filepath.Join(tk.dir, "ready"), 10*time.Second)
	if _, err := inst.Driver.SignalTask(ctx, &driverpb.SignalTaskRequest{TaskId: tk.cfg.Id, Signal: "SIGUSR1"}); err != nil {
		t.Fatal(err)
	}
	if res := waitTask(t, inst, tk.cfg.Id, 10*time.Second); res.GetResult().GetExitCode() != 0 {
		t.Fatalf("after signal: %+v", res)
	}
	if got := testwait.File(t, filepath.Join(tk.dir, "got"), time.Second); strings.TrimSpace(got) != "usr1" {
		t.Fatalf("signal file %q", got)
	}
	if _, err := inst.Driver.SignalTask(ctx, &driverpb.SignalTaskRequest{TaskId: tk.cfg.Id, Signal: "SIGBOGUS"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad signal name: %v", err)
	}
}

// The plugin process is killed while a task runs; a new plugin process
// recovers it from the handle alone and can wait, stat and stop it.
func TestConformanceRecoverAfterPluginRestart(t *testing.T) {
	t.Parallel()
	inst := load(t, "")
	tk := newTask(t, "survivor", `
command = "/bin/sh"
args    = ["-c", "echo x > ready; exec sleep 60"]`, nil)
	handle := start(t, inst, tk)
	testwait.File(t, filepath.Join(tk.dir, "ready"), 10*time.Second)
	// An event of the supervisor is forwarded once, not again by the next
	// plugin process.
	eventsFile := filepath.Join(tk.dir, ".impact-exec", "abcd1234", executor.EventsFile)
	appendEvent := func(msg string) {
		f, err := os.OpenFile(eventsFile, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, "{\"time\":%q,\"message\":%q}\n", time.Now().Format(time.RFC3339Nano), msg)
		f.Close()
	}
	recvUntil := func(inst *plugintest.Instance, want string) []string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := inst.Driver.TaskEvents(ctx, &driverpb.TaskEventsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		appendEvent(want)
		var got []string
		for {
			ev, err := s.Recv()
			if err != nil {
				t.Fatalf("no event %q (got %v): %v", want, got, err)
			}
			got = append(got, ev.GetMessage())
			if ev.GetMessage() == want {
				return got
			}
		}
	}
	recvUntil(inst, "before restart")
	// Forwarding is at least once: wait until the plugin has recorded it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		fi, err := os.Stat(eventsFile)
		b, _ := os.ReadFile(filepath.Join(filepath.Dir(eventsFile), executor.EventOffsetFile))
		if err == nil && strings.TrimSpace(string(b)) == fmt.Sprint(fi.Size()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("event offset not recorded: %q", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	inst.Kill()
	if !inst.Exited() {
		t.Fatal("plugin still running after Kill")
	}

	inst2 := load(t, "")
	ctx := ctxT(t, time.Minute)
	// As after an agent restart: no task_id, no msgpack config.
	handle.Config.MsgpackDriverConfig = nil
	if _, err := inst2.Driver.RecoverTask(ctx, &driverpb.RecoverTaskRequest{Handle: handle}); err != nil {
		t.Fatalf("RecoverTask: %v", err)
	}
	if got := recvUntil(inst2, "after restart"); len(got) != 1 {
		t.Fatalf("events after recovery: %q, want only the new one", got)
	}
	// Recovering twice is fine.
	if _, err := inst2.Driver.RecoverTask(ctx, &driverpb.RecoverTaskRequest{Handle: handle}); err != nil {
		t.Fatalf("RecoverTask again: %v", err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		ins, err := inst2.Driver.InspectTask(ctx, &driverpb.InspectTaskRequest{TaskId: tk.cfg.Id})
		if err == nil && ins.GetTask().GetState() == driverpb.TaskState_RUNNING && ins.GetDriver().GetAttributes()["pid"] != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("inspect recovered: %+v %v", ins, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stream, err := inst2.Driver.TaskStats(ctx, &driverpb.TaskStatsRequest{TaskId: tk.cfg.Id, CollectionInterval: durationpb.New(50 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.GetStats().GetAggResourceUsage().GetMemory().GetRss() == 0 {
		t.Fatalf("stats of recovered task: %+v %v", r, err)
	}
	waitDone := make(chan *driverpb.WaitTaskResponse, 1)
	go func() {
		r, err := inst2.Driver.WaitTask(ctx, &driverpb.WaitTaskRequest{TaskId: tk.cfg.Id})
		if err != nil {
			t.Error(err)
		}
		waitDone <- r
	}()
	if _, err := inst2.Driver.StopTask(ctx, &driverpb.StopTaskRequest{TaskId: tk.cfg.Id, Signal: "SIGTERM", Timeout: durationpb.New(5 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-waitDone:
		if r.GetResult().GetSignal() != int32(syscall.SIGTERM) {
			t.Fatalf("recovered task result: %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitTask on the recovered task did not return after StopTask")
	}
	// A handle whose supervisor is gone cannot be recovered.
	inst3 := load(t, "")
	os.Remove(filepath.Join(tk.dir, ".impact-exec", "abcd1234", "exit.json"))
	if _, err := inst3.Driver.RecoverTask(ctx, &driverpb.RecoverTaskRequest{Handle: handle}); err == nil {
		t.Fatal("recovering a task whose supervisor is gone should fail")
	}
}

// Gang members started through the driver rendezvous, get their rank, and
// a missing member times out with an event naming the arrived count.
func TestConformanceGang(t *testing.T) {
	t.Parallel()
	srv, err := gang.StartServer("127.0.0.1:0", gang.RegistryConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	inst := load(t, fmt.Sprintf(`
rendezvous_addr    = %q
heartbeat_interval = "200ms"`, srv.URL))
	ctx := ctxT(t, time.Minute)
	events, err := inst.Driver.TaskEvents(ctx, &driverpb.TaskEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var msgs []string
	go func() {
		for {
			ev, err := events.Recv()
			if err != nil {
				return
			}
			mu.Lock()
			msgs = append(msgs, ev.GetAllocId()+"|"+ev.GetTaskName()+"|"+ev.GetMessage())
			mu.Unlock()
		}
	}()
	hasEvent := func(sub string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			if strings.Contains(m, sub) {
				return true
			}
		}
		return false
	}

	// Two members of a gang of 2: the first starts only after the second arrives.
	cfg := `
command = "/bin/sh"
args    = ["-c", "echo $RANK $WORLD_SIZE $MASTER_PORT > rank"]
gang {
  size    = 2
  timeout = "20s"
}`
	a := newTask(t, "trainer", cfg, map[string]string{"NOMAD_ALLOC_INDEX": "0"})
	b := newTask(t, "trainer", cfg, map[string]string{"NOMAD_ALLOC_INDEX": "1"})
	b.cfg.AllocId += "b"
	start(t, inst, a)
	deadline := time.Now().Add(10 * time.Second)
	for !hasEvent("1 of 2 members arrived") {
		if time.Now().After(deadline) {
			t.Fatalf("no barrier progress event; events: %v", msgs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(a.dir, "rank")); err == nil {
		t.Fatal("member 0 started before member 1 was placed")
	}
	start(t, inst, b)
	for i, tk := range []task{a, b} {
		if res := waitTask(t, inst, tk.cfg.Id, 20*time.Second); res.GetResult().GetExitCode() != 0 {
			t.Fatalf("member %d: %+v", i, res)
		}
		if got := strings.TrimSpace(testwait.File(t, filepath.Join(tk.dir, "rank"), time.Second)); got != fmt.Sprintf("%d 2 29500", i) {
			t.Fatalf("member %d wrote %q", i, got)
		}
	}

	// A lone member of a gang of 3 times out with a clear event.
	lone := newTask(t, "lonely", `
command = "/bin/true"
gang {
  name    = "other"
  size    = 3
  timeout = "1s"
}`, nil)
	start(t, inst, lone)
	res := waitTask(t, inst, lone.cfg.Id, 10*time.Second)
	if res.GetResult().GetExitCode() == 0 || !strings.Contains(res.GetErr(), "1 of 3 members arrived") {
		t.Fatalf("lone member: %+v", res)
	}
	deadline = time.Now().Add(5 * time.Second)
	for !hasEvent(lone.cfg.AllocId + "|lonely|Gang barrier timed out after 1s: 1 of 3 members arrived") {
		if time.Now().After(deadline) {
			t.Fatalf("no timeout event; events: %v", msgs)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// A failing member stops its peer: the peer gets the job's checkpoint
	// signal (from its impact_* meta), then its kill signal after the grace.
	meta := map[string]string{"NOMAD_META_impact_checkpoint_signal": "SIGUSR1", "NOMAD_META_impact_grace": "300ms"}
	peerCfg := `
command = "/bin/sh"
args    = ["-c", "trap 'echo ckpt > ckpt' USR1; trap 'exit 130' INT; echo x > ready; while true; do sleep 0.05; done"]
gang {
  name = "prop"
  size = 2
}`
	failCfg := `
command = "/bin/sh"
args    = ["-c", "echo x > ready; while [ ! -f go ]; do sleep 0.05; done; exit 5"]
gang {
  name = "prop"
  size = 2
}`
	peer := newTask(t, "peer", peerCfg, merge(meta, map[string]string{"NOMAD_ALLOC_INDEX": "0"}))
	failing := newTask(t, "failing", failCfg, merge(meta, map[string]string{"NOMAD_ALLOC_INDEX": "1"}))
	start(t, inst, peer)
	start(t, inst, failing)
	testwait.File(t, filepath.Join(peer.dir, "ready"), 10*time.Second)
	testwait.File(t, filepath.Join(failing.dir, "ready"), 10*time.Second)
	os.WriteFile(filepath.Join(failing.dir, "go"), []byte("1"), 0o644)
	if res := waitTask(t, inst, failing.cfg.Id, 10*time.Second); res.GetResult().GetExitCode() != 5 {
		t.Fatalf("failing member: %+v", res)
	}
	res = waitTask(t, inst, peer.cfg.Id, 10*time.Second)
	if res.GetResult().GetExitCode() != 130 || !strings.Contains(res.GetErr(), "gang") {
		t.Fatalf("peer: %+v", res)
	}
	if got := strings.TrimSpace(testwait.File(t, filepath.Join(peer.dir, "ckpt"), time.Second)); got != "ckpt" {
		t.Fatalf("peer checkpoint file %q", got)
	}
	deadline = time.Now().Add(5 * time.Second)
	for !hasEvent("|peer|Gang default:train:prop is failed (member " + failing.cfg.AllocId + ".failing exited with code 5, signal 0): sending checkpoint signal SIGUSR1, stopping in 300ms") {
		if time.Now().After(deadline) {
			t.Fatalf("no propagation event; events: %v", msgs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// The task's memory is limited through cgroups and an OOM kill is reported.
func TestConformanceOOM(t *testing.T) {
	t.Parallel()
	probe := filepath.Join(executor.CgroupRoot, "memory", "impact-exec-probe")
	if _, err := os.Stat(filepath.Join(executor.CgroupRoot, "cgroup.controllers")); err != nil {
		if err := os.MkdirAll(probe, 0o755); err != nil {
			t.Skipf("cannot create cgroups here: %v", err)
		}
		os.Remove(probe)
	} else if os.Geteuid() != 0 {
		t.Skip("cgroup v2 needs root")
	}
	inst := load(t, "")
	tk := newTask(t, "hog", `
command = "/bin/sh"
args    = ["-c", "head -c 300000000 /dev/zero | tail > /dev/null"]`, nil)
	tk.cfg.Resources = &driverpb.Resources{
		AllocatedResources: &driverpb.AllocatedTaskResources{
			Memory: &driverpb.AllocatedMemoryResources{MemoryMb: 32},
			Cpu:    &driverpb.AllocatedCpuResources{CpuShares: 100},
		},
		LinuxResources: &driverpb.LinuxResources{MemoryLimitBytes: 32 << 20, CpuShares: 100},
	}
	start(t, inst, tk)
	res := waitTask(t, inst, tk.cfg.Id, 30*time.Second)
	if !res.GetResult().GetOomKilled() {
		t.Fatalf("result: %+v, want oom_killed", res)
	}
}

func execStream(t *testing.T, inst *plugintest.Instance, id string, tty bool, argv []string, stdin string) (string, string, *driverpb.ExitResult) {
	t.Helper()
	s, err := inst.Driver.ExecTaskStreaming(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	setup := &driverpb.ExecTaskStreamingRequest{Setup: &driverpb.ExecTaskStreamingRequest_Setup{TaskId: id, Command: argv, Tty: tty}}
	if tty {
		setup.TtySize = &driverpb.ExecTaskStreamingRequest_TerminalSize{Height: 40, Width: 100}
	}
	if err := s.Send(setup); err != nil {
		t.Fatal(err)
	}
	if stdin != "" {
		s.Send(&driverpb.ExecTaskStreamingRequest{Stdin: &driverpb.ExecTaskStreamingIOOperation{Data: []byte(stdin)}})
		s.Send(&driverpb.ExecTaskStreamingRequest{Stdin: &driverpb.ExecTaskStreamingIOOperation{Close: true}})
	}
	var out, errOut strings.Builder
	for {
		r, err := s.Recv()
		if err != nil {
			t.Fatalf("exec stream ended without an exit: %v", err)
		}
		out.Write(r.GetStdout().GetData())
		errOut.Write(r.GetStderr().GetData())
		if r.GetExited() {
			s.CloseSend()
			return out.String(), errOut.String(), r.GetResult()
		}
	}
}

func TestConformanceExecStreaming(t *testing.T) {
	t.Parallel()
	inst := load(t, "")
	tk := newTask(t, "shell", `
command = "sleep"
args    = ["30"]`, map[string]string{"GREETING": "hi"})
	start(t, inst, tk)
	out, errOut, res := execStream(t, inst, tk.cfg.Id, false, []string{"/bin/sh", "-c", "read x; echo $GREETING $x; echo oops >&2; exit 3"}, "there\n")
	if out != "hi there\n" || errOut != "oops\n" || res.GetExitCode() != 3 {
		t.Fatalf("non-tty exec: %q %q %+v", out, errOut, res)
	}
	if f, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0); err != nil {
		t.Logf("no pseudo-terminals here (%v): terminal exec not tested", err)
	} else {
		f.Close()
		out, _, res = execStream(t, inst, tk.cfg.Id, true, []string{"/bin/sh", "-c", "tty; stty size"}, "")
		if !strings.Contains(out, "/dev/pts/") || !strings.Contains(out, "40 100") || res.GetExitCode() != 0 {
			t.Fatalf("tty exec: %q %+v", out, res)
		}
	}
	if _, err := inst.Driver.StopTask(ctxT(t, 10*time.Second), &driverpb.StopTaskRequest{TaskId: tk.cfg.Id, Timeout: durationpb.New(5 * time.Second)}); err != nil {
		t.Fatal(err)
	}
}

// Exec commands (script checks, `nomad alloc exec`) run as the task's
// user, not as the plugin's, and see the task's env.
func TestExecRunsAsTaskUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root")
	}
	if _, err := user.Lookup("nobody"); err != nil {
		t.Skip("no user nobody")
	}
	inst := load(t, "")
	tk := newTask(t, "unprivileged", `
command = "sleep"
args    = ["30"]`, map[string]string{"GREETING": "hi"})
	tk.cfg.User = "nobody"
	// The task user needs to reach its task dir.
	for d := tk.dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	start(t, inst, tk)
	ctx := ctxT(t, 30*time.Second)
	ex, err := inst.Driver.ExecTask(ctx, &driverpb.ExecTaskRequest{TaskId: tk.cfg.Id, Command: []string{"/bin/sh", "-c", "id -un; echo $GREETING"}, Timeout: durationpb.New(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(ex.GetStdout()); got != "nobody\nhi\n" {
		t.Fatalf("exec ran as/with %q, want nobody and the task env", got)
	}
	out, _, res := execStream(t, inst, tk.cfg.Id, false, []string{"id", "-un"}, "")
	if out != "nobody\n" || res.GetExitCode() != 0 {
		t.Fatalf("streaming exec ran as %q (%+v)", out, res)
	}
	if _, err := inst.Driver.StopTask(ctx, &driverpb.StopTaskRequest{TaskId: tk.cfg.Id, Timeout: durationpb.New(5 * time.Second)}); err != nil {
		t.Fatal(err)
	}
}

// Concurrent calls for one task: a second StartTask is refused while the
// first launches, concurrent RecoverTasks track it once, and concurrent
// DestroyTasks all succeed without taking the plugin down.
func TestConcurrentCallsForOneTask(t *testing.T) {
	t.Parallel()
	inst := load(t, "")
	ctx := ctxT(t, time.Minute)
	tk := newTask(t, "once", `
command = "/bin/sh"
args    = ["-c", "echo run >> runs; exec sleep 30"]`, nil)
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	handles := make([]*driverpb.TaskHandle, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := inst.Driver.StartTask(ctx, &driverpb.StartTaskRequest{Task: tk.cfg})
			errs[i], handles[i] = err, r.GetHandle()
		}()
	}
	wg.Wait()
	var handle *driverpb.TaskHandle
	for i, err := range errs {
		switch {
		case err == nil && handle == nil:
			handle = handles[i]
		case err == nil:
			t.Fatal("the same task was started twice")
		case status.Code(err) != codes.AlreadyExists:
			t.Fatalf("StartTask: %v", err)
		}
	}
	if handle == nil {
		t.Fatal("no StartTask succeeded")
	}
	if got := testwait.File(t, filepath.Join(tk.dir, "runs"), 10*time.Second); got != "run\n" {
		t.Fatalf("command ran %q", got)
	}

	// A new plugin process recovers the task from several calls at once.
	inst.Kill()
	inst2 := load(t, "")
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := inst2.Driver.RecoverTask(ctx, &driverpb.RecoverTaskRequest{Handle: handle}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if _, err := inst2.Driver.StopTask(ctx, &driverpb.StopTaskRequest{TaskId: tk.cfg.Id, Signal: "SIGTERM", Timeout: durationpb.New(5 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := inst2.Driver.DestroyTask(ctx, &driverpb.DestroyTaskRequest{TaskId: tk.cfg.Id, Force: true}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if _, err := inst2.Driver.Capabilities(ctx, &driverpb.CapabilitiesRequest{}); err != nil {
		t.Fatalf("plugin after concurrent destroys: %v", err)
	}
	if _, err := inst2.Driver.InspectTask(ctx, &driverpb.InspectTaskRequest{TaskId: tk.cfg.Id}); status.Code(err) != codes.NotFound {
		t.Fatalf("destroyed task still tracked: %v", err)
	}
}

// fakeStream is a server stream whose context the test cancels.
type fakeStream[T any] struct {
	grpc.ServerStream
	ctx  context.Context
	sent chan *T
}

func (f *fakeStream[T]) Context() context.Context { return f.ctx }

func (f *fakeStream[T]) Send(m *T) error {
	select {
	case f.sent <- m:
	default:
	}
	return nil
}

func newFakeStream[T any]() (*fakeStream[T], context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	return &fakeStream[T]{ctx: ctx, sent: make(chan *T, 16)}, cancel
}

// returnsAfterCancel runs serve, waits for its first message, cancels its
// stream and requires it to return: no stream goroutine outlives its client.
func returnsAfterCancel[T any](t *testing.T, what string, serve func(*fakeStream[T]) error, first bool) {
	t.Helper()
	s, cancel := newFakeStream[T]()
	done := make(chan error, 1)
	go func() { done <- serve(s) }()
	if first {
		select {
		case <-s.sent:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no first message", what)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s after cancel: %v", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s still running 5s after its client went away", what)
	}
}

func TestStreamsEndWhenTheClientGoesAway(t *testing.T) {
	t.Parallel()
	d := New(hclog.NewNullLogger(), binary)
	returnsAfterCancel(t, "Fingerprint", func(s *fakeStream[driverpb.FingerprintResponse]) error {
		return d.Fingerprint(&driverpb.FingerprintRequest{}, s)
	}, true)

	returnsAfterCancel(t, "TaskEvents", func(s *fakeStream[driverpb.DriverTaskEvent]) error {
		return d.TaskEvents(&driverpb.TaskEventsRequest{}, s)
	}, false)
	d.events.mu.Lock()
	subs := len(d.events.subs)
	d.events.mu.Unlock()
	if subs != 0 {
		t.Fatalf("%d event subscriptions left after the streams ended", subs)
	}

	tk := newTask(t, "streamed", `
command = "sleep"
args    = ["30"]`, nil)
	ctx := ctxT(t, 30*time.Second)
	if _, err := d.StartTask(ctx, &driverpb.StartTaskRequest{Task: tk.cfg}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.DestroyTask(context.Background(), &driverpb.DestroyTaskRequest{TaskId: tk.cfg.Id, Force: true})
	})
	returnsAfterCancel(t, "TaskStats", func(s *fakeStream[driverpb.TaskStatsResponse]) error {
		return d.TaskStats(&driverpb.TaskStatsRequest{TaskId: tk.cfg.Id, CollectionInterval: durationpb.New(time.Hour)}, s)
	}, true)
}

// RecoverTask refuses handles it cannot read, naming why, without
// tracking anything; Nomad then destroys and restarts the task.
func TestRecoverRejectsBadHandles(t *testing.T) {
	t.Parallel()
	d := New(hclog.NewNullLogger(), binary)
	ctx := ctxT(t, 10*time.Second)
	tk := newTask(t, "old", `command = "true"`, nil)
	state := []byte(`{"executor":{"dir":"/nonexistent","supervisor_pid":1}}`)
	cases := []struct {
		name   string
		handle *driverpb.TaskHandle
		code   codes.Code
		says   string
	}{
		{"no handle", nil, codes.InvalidArgument, "handle"},
		{"newer version", &driverpb.TaskHandle{Version: taskHandleVersion + 1, Config: tk.cfg, DriverState: state}, codes.FailedPrecondition, "handle version 2"},
		{"pre-0.9 version", &driverpb.TaskHandle{Version: 0, Config: tk.cfg, DriverState: state}, codes.FailedPrecondition, "handle version 0"},
		{"bad state", &driverpb.TaskHandle{Version: taskHandleVersion, Config: tk.cfg, DriverState: []byte("{")}, codes.FailedPrecondition, "decoding driver state"},
		{"gone state dir", &driverpb.TaskHandle{Version: taskHandleVersion, Config: tk.cfg, DriverState: state}, codes.FailedPrecondition, "task state dir"},
	}
	for _, c := range cases {
		_, err := d.RecoverTask(ctx, &driverpb.RecoverTaskRequest{Handle: c.handle})
		if status.Code(err) != c.code || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %s saying %q", c.name, err, c.code, c.says)
		}
	}
	if _, err := d.InspectTask(ctx, &driverpb.InspectTaskRequest{TaskId: tk.cfg.Id}); status.Code(err) != codes.NotFound {
		t.Fatalf("a refused handle is tracked: %v", err)
	}
}

// A StartTask failure a retry may fix (the supervisor cannot be started)
// is recoverable, so Nomad's restart policy applies; a bad task config is
// not. The fingerprint says why the driver cannot work.
func TestStartFailuresRecoverableFlag(t *testing.T) {
	t.Parallel()
	d := New(hclog.NewNullLogger(), filepath.Join(t.TempDir(), "missing-impact-exec"))
	ctx := ctxT(t, 10*time.Second)
	if fp := d.fingerprint(defaultConfig()); fp.GetHealth() != driverpb.FingerprintResponse_UNHEALTHY || !strings.Contains(fp.GetHealthDescription(), "missing-impact-exec") {
		t.Fatalf("fingerprint without the supervisor binary: %+v", fp)
	}
	tk := newTask(t, "t", `command = "/bin/true"`, nil)
	_, err := d.StartTask(ctx, &driverpb.StartTaskRequest{Task: tk.cfg})
	if rec, ok := IsRecoverable(err); err == nil || !ok || !rec {
		t.Fatalf("supervisor start failure: err %v, recoverable %v (detail %v)", err, rec, ok)
	}
	bad := newTask(t, "bad", `
command = "/bin/true"
gang {
  size    = 2
  timeout = "soon"
  rendezvous_addr = "http://127.0.0.1:1"
}`, nil)
	_, err = d.StartTask(ctx, &driverpb.StartTaskRequest{Task: bad.cfg})
	if rec, ok := IsRecoverable(err); err == nil || !ok || rec || status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "gang.timeout") {
		t.Fatalf("bad gang timeout: err %v, recoverable %v (detail %v)", err, rec, ok)
	}
}

// A terminal exec whose shell leaves a background child holding the
// terminal (and ignoring the SIGHUP of the session's end): when the client
// goes away, the child is killed too (it kept the call alive).
func TestExecStreamingClientGoneKillsTerminalGroup(t *testing.T) {
	t.Parallel()
	inst, tk := terminalExecTask(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := inst.Driver.ExecTaskStreaming(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&driverpb.ExecTaskStreamingRequest{Setup: &driverpb.ExecTaskStreamingRequest_Setup{
		TaskId: tk.cfg.Id, Command: []string{"/bin/sh", "-c", "trap '' HUP; sleep 30 & echo bg=$!; wait"}, Tty: true}}); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	pid := 0
	for pid == 0 {
		r, err := s.Recv()
		if err != nil {
			t.Fatalf("no pid in %q: %v", out.String(), err)
		}
		out.Write(r.GetStdout().GetData())
		if _, rest, ok := strings.Cut(out.String(), "bg="); ok && strings.Contains(rest, "\n") {
			fmt.Sscan(rest, &pid)
		}
	}
	cancel()
	testwait.For(t, 10*time.Second, "background child of the terminal exec killed", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err != nil || strings.Contains(string(b), ") Z ")
	})
}

// A terminal exec ends with its command even when a background child
// (ignoring SIGHUP) still holds the terminal, as a closed terminal window
// would: the client gets the output and the exit, not a hang.
func TestExecStreamingTerminalEndsWithItsCommand(t *testing.T) {
	t.Parallel()
	inst, tk := terminalExecTask(t)
	done := make(chan struct{})
	var out string
	var res *driverpb.ExitResult
	go func() {
		defer close(done)
		out, _, res = execStream(t, inst, tk.cfg.Id, true, []string{"/bin/sh", "-c", "trap '' HUP; sleep 30 & echo bg=$!; exit 3"}, "")
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("terminal exec did not end with its command")
	}
	var pid int
	if _, rest, ok := strings.Cut(out, "bg="); ok {
		fmt.Sscan(rest, &pid)
	}
	if pid <= 0 || res.GetExitCode() != 3 {
		t.Fatalf("output %q, result %+v", out, res)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL) // it ignored the hang-up, as asked
}

// terminalExecTask starts a plugin and a sleeping task to run terminal
// execs in; it skips where there are no pseudo-terminals.
func terminalExecTask(t *testing.T) (*plugintest.Instance, task) {
	t.Helper()
	if f, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0); err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	} else {
		f.Close()
	}
	inst := load(t, "")
	tk := newTask(t, "shell", `
command = "sleep"
args    = ["30"]`, nil)
	start(t, inst, tk)
	return inst, tk
}
