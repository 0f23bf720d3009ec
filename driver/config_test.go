package driver

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/driver/executor"
	"github.com/impact-sched/nomad-impact/internal/jobspectest"
	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/plugin/config"
	"github.com/impact-sched/nomad-impact/plugin/plugintest"
)

func decodeTask(t *testing.T, hcl string) TaskConfig {
	t.Helper()
	data, err := plugintest.EncodeConfig(taskConfigSpec, hcl)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	dec, err := config.NewDecoder(taskConfigSpec)
	if err != nil {
		t.Fatal(err)
	}
	var tc TaskConfig
	if err := dec.Decode(data, &tc); err != nil {
		t.Fatalf("decode: %v", err)
	}
	return tc
}

func TestGangSpec(t *testing.T) {
	t.Parallel()
	base := defaultConfig()
	withAddr := base
	withAddr.RendezvousAddr = "http://127.0.0.1:4690"
	env := map[string]string{"NOMAD_ALLOC_INDEX": "3", "NOMAD_IP_rdzv": "10.1.2.3", "NOMAD_HOST_PORT_rdzv": "31000",
		"NOMAD_META_impact_checkpoint_signal": "SIGUSR2", "NOMAD_META_impact_grace": "45s"}
	meta, err := taskContract(env)
	if err != nil {
		t.Fatal(err)
	}
	info := taskInfo{name: "trainer", allocID: "a1", group: "workers", namespace: "default", jobID: "train",
		nodeID: "n1", env: env, meta: meta}
	cases := []struct {
		name    string
		cfg     Config
		hcl     string
		wantErr string
		check   func(t *testing.T, s string, gid string, size, port int, addr string, ckpt string, grace time.Duration)
		nilSpec bool
	}{
		{name: "no gang block, no rendezvous: plain exec", cfg: base, hcl: `command = "x"`, nilSpec: true},
		{name: "gang disabled", cfg: withAddr, hcl: "command = \"x\"\ngang {\n enabled = false\n}", nilSpec: true},
		{name: "whole job by default", cfg: withAddr, hcl: `command = "x"`,
			check: func(t *testing.T, _ string, gid string, size, port int, _ string, ckpt string, grace time.Duration) {
				if gid != "default:train" || size != 0 || port != 29500 || ckpt != "SIGUSR2" || grace != 45*time.Second {
					t.Fatalf("gid %s size %d port %d ckpt %s grace %s", gid, size, port, ckpt, grace)
				}
			}},
		{name: "named, sized, port label", cfg: withAddr, hcl: "command = \"x\"\ngang {\n name = \"enc\"\n size = 4\n port_label = \"rdzv\"\n checkpoint_signal = \"SIGHUP\"\n grace = \"1m\"\n}",
			check: func(t *testing.T, _ string, gid string, size, port int, addr string, ckpt string, grace time.Duration) {
				if gid != "default:train:enc" || size != 4 || port != 31000 || addr != "10.1.2.3" || ckpt != "SIGHUP" || grace != time.Minute {
					t.Fatalf("gid %s size %d port %d addr %s ckpt %s grace %s", gid, size, port, addr, ckpt, grace)
				}
			}},
		{name: "gang without any address", cfg: base, hcl: "command = \"x\"\ngang {\n size = 2\n}", wantErr: "no rendezvous address"},
		{name: "bad timeout", cfg: withAddr, hcl: "command = \"x\"\ngang {\n timeout = \"soon\"\n}", wantErr: "gang.timeout"},
		{name: "bad checkpoint signal", cfg: withAddr, hcl: "command = \"x\"\ngang {\n checkpoint_signal = \"SIGNOPE\"\n}", wantErr: "gang.checkpoint_signal"},
		{name: "bad checkpoint_signal_to", cfg: withAddr, hcl: "command = \"x\"\ngang {\n checkpoint_signal_to = \"workers\"\n}", wantErr: `gang.checkpoint_signal_to "workers": want "group", "main" or "children"`},
		{name: "missing port label", cfg: withAddr, hcl: "command = \"x\"\ngang {\n port_label = \"nope\"\n}", wantErr: "gang.port_label \"nope\""},
		{name: "negative size", cfg: withAddr, hcl: "command = \"x\"\ngang {\n size = -1\n}", wantErr: "gang.size"},
		{name: "bad kill timeout", cfg: withAddr, hcl: "command = \"x\"\ngang {\n kill_timeout = \"0s\"\n}", wantErr: "gang.kill_timeout"},
		{name: "unknown discovery", cfg: withAddr, hcl: "command = \"x\"\ngang {\n discovery = \"dns\"\n}", wantErr: "gang.discovery \"dns\""},
		{name: "nomad discovery needs a service", cfg: base, hcl: "command = \"x\"\ngang {\n discovery = \"nomad\"\n size = 2\n}", wantErr: "gang.service"},
		{name: "nomad discovery sized by the job", cfg: base, hcl: "command = \"x\"\ngang {\n discovery = \"nomad\"\n service = \"s\"\n}",
			check: func(t *testing.T, _ string, gid string, size, _ int, _ string, _ string, _ time.Duration) {
				if gid != "default:train" || size != 0 {
					t.Fatalf("gid %s size %d: want the whole job, size 0 (the job's allocation count)", gid, size)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			task := decodeTask(t, tc.hcl)
			gs, _, _, err := gangSpec(tc.cfg, task, info)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.nilSpec {
				if gs != nil {
					t.Fatalf("want no gang, got %+v", gs)
				}
				return
			}
			if gs.Member != "a1.trainer" || gs.Join.AllocIndex != 3 || gs.Join.Group != "workers" {
				t.Fatalf("join: %+v", gs.Join)
			}
			tc.check(t, "", gs.ID, gs.Join.Size, gs.Join.Port, gs.Join.Addr, gs.CheckpointSignal, gs.Grace)
		})
	}
	// checkpoint_signal_to defaults to the process group and is passed on.
	for hcl, want := range map[string]string{
		`command = "x"`:                         "group",
		"command = \"x\"\ngang {\n size = 2\n}": "group",
		"command = \"x\"\ngang {\n checkpoint_signal_to = \"children\"\n}": "children",
		"command = \"x\"\ngang {\n checkpoint_signal_to = \"main\"\n}":     "main",
	} {
		gs, _, _, err := gangSpec(withAddr, decodeTask(t, hcl), info)
		if err != nil || gs.CheckpointTo != want {
			t.Errorf("%q: checkpoint_to %q (%v), want %q", hcl, gs.CheckpointTo, err, want)
		}
	}

	// Without rendezvous_addr, consul_service makes the whole job a gang
	// found through Consul.
	viaConsul := base
	viaConsul.ConsulService, viaConsul.ConsulTag, viaConsul.ConsulAddr = "impact-scheduler", "leader", "127.0.0.1:8500"
	gs, _, _, err := gangSpec(viaConsul, decodeTask(t, `command = "x"`), info)
	if err != nil || gs == nil || gs.URL != "" || gs.ConsulService != "impact-scheduler" || gs.ConsulTag != "leader" || gs.ID != "default:train" {
		t.Fatalf("consul: %+v %v", gs, err)
	}

	// Nomad discovery reads services through the task API socket when present.
	task := decodeTask(t, "command = \"x\"\ngang {\n discovery = \"nomad\"\n service = \"rdzv\"\n size = 2\n}")
	info.env["NOMAD_UNIX_ADDR"] = "/alloc/t/secrets/api.sock"
	info.env["NOMAD_TOKEN"] = "jwt"
	gs, _, _, err = gangSpec(base, task, info)
	if err != nil || gs.NomadAddr != "unix:///alloc/t/secrets/api.sock" || gs.NomadToken != "jwt" || gs.Service != "rdzv" {
		t.Fatalf("nomad discovery: %+v %v", gs, err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{BarrierTimeout: "x", HeartbeatInterval: "5s"}, "barrier_timeout"},
		{Config{BarrierTimeout: "1m", HeartbeatInterval: "-1s"}, "heartbeat_interval"},
		{Config{BarrierTimeout: "1m", HeartbeatInterval: "5s", RendezvousAddr: "localhost:4690"}, "rendezvous_addr"},
		{Config{BarrierTimeout: "1m", HeartbeatInterval: "5s", NomadAddr: "nomad"}, "nomad_addr"},
		{Config{BarrierTimeout: "1m", HeartbeatInterval: "5s", RendezvousAddr: "http://127.0.0.1:4690"}, ""},
	} {
		err := tc.cfg.validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: err %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// The driver reads each input of the jobspec contract's table (shared
// with the scheduler's TestContractAsTheSchedulerReadsIt) as the table
// says, through its own entry points: the task's meta from its
// environment (taskContract, which StartTask refuses a task on), and what
// it acts on (the checkpoint signal, grace and requeue exit code a task
// launches with, via gangSpec). The gang block's checkpoint_signal,
// kill_signal and grace take the same values with the same reasons.
func TestContractAgreesWithScheduler(t *testing.T) {
	t.Parallel()
	withAddr := defaultConfig()
	withAddr.RendezvousAddr = "http://127.0.0.1:4690"
	launch := func(meta contract, hcl string) (*executor.GangSpec, string, error) {
		info := taskInfo{name: "trainer", allocID: "a1", group: "workers", namespace: "default", jobID: "train",
			nodeID: "n1", env: map[string]string{}, meta: meta}
		gs, kill, _, err := gangSpec(withAddr, decodeTask(t, hcl), info)
		return gs, kill, err
	}
	for _, c := range jobspectest.Cases(t) {
		meta, err := taskContract(c.TaskEnv())
		if !c.Valid() {
			if err == nil || err.Error() != c.Err {
				t.Errorf("%s = %q: driver error %v, want the scheduler's %q", c.Key, c.Value, err, c.Err)
			}
		} else if err != nil {
			t.Errorf("%s = %q: driver error %v, want it to mean %q", c.Key, c.Value, err, c.Want)
			continue
		}
		// The same input in the gang block (fields that mirror a key).
		reason := strings.TrimPrefix(c.Err, fmt.Sprintf("job meta %s = %q: ", c.Key, c.Value))
		var fields []string
		switch c.Key {
		case jobspec.MetaCheckpointSignal:
			fields = []string{"checkpoint_signal", "kill_signal"}
		case jobspec.MetaGrace:
			fields = []string{"grace"}
		}
		for _, f := range fields {
			if c.Value == "" && f != "kill_signal" {
				continue // an empty checkpoint_signal or grace in the block defers to the meta
			}
			gs, kill, err := launch(contract{}, fmt.Sprintf("command = \"x\"\ngang {\n %s = %q\n}", f, c.Value))
			if !c.Valid() {
				if err == nil || err.Error() != fmt.Sprintf("gang.%s %q: %s", f, c.Value, reason) {
					t.Errorf("gang.%s = %q: error %v, want the reason %q", f, c.Value, err, reason)
				}
				continue
			}
			got := map[string]string{"checkpoint_signal": "", "kill_signal": kill, "grace": ""}[f]
			if err == nil {
				got = map[string]string{"checkpoint_signal": gs.CheckpointSignal, "kill_signal": kill, "grace": gs.Grace.String()}[f]
			}
			if err != nil || got != c.Want {
				t.Errorf("gang.%s = %q: %q, %v; want %q", f, c.Value, got, err, c.Want)
			}
		}
		if !c.Valid() {
			continue
		}
		// What the driver acts on means what the scheduler reads.
		gs, _, err := launch(meta, `command = "x"`)
		if err != nil {
			t.Errorf("%s = %q: gangSpec: %v", c.Key, c.Value, err)
			continue
		}
		var got string
		switch c.Key {
		case jobspec.MetaCheckpointSignal:
			got = gs.CheckpointSignal
		case jobspec.MetaGrace:
			got = gs.Grace.String()
		case jobspec.MetaRequeueExitCode:
			got = strconv.Itoa(meta.spec.RequeueCode())
		default:
			got = jobspectest.Meaning(meta.spec, c.Key)
		}
		if got != c.Want {
			t.Errorf("%s = %q: the driver acts on %q, the scheduler on %q", c.Key, c.Value, got, c.Want)
		}
	}
}

// A task that gives no impact_grace is stopped for a peer's failure
// defaultGrace after its checkpoint signal; one that gives "0s" at once.
func TestGraceDefault(t *testing.T) {
	t.Parallel()
	withAddr := defaultConfig()
	withAddr.RendezvousAddr = "http://127.0.0.1:4690"
	for env, want := range map[string]time.Duration{"": defaultGrace, "0s": 0, "2m": 2 * time.Minute} {
		e := map[string]string{}
		if env != "" {
			e["NOMAD_META_impact_grace"] = env
		}
		meta, err := taskContract(e)
		if err != nil {
			t.Fatal(err)
		}
		gs, _, _, err := gangSpec(withAddr, decodeTask(t, `command = "x"`), taskInfo{name: "t", allocID: "a", jobID: "j", env: e, meta: meta})
		if err != nil || gs.Grace != want {
			t.Errorf("impact_grace %q: grace %v, %v; want %v", env, gs.Grace, err, want)
		}
	}
}
