package driver

import (
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/driver/executor"
	"github.com/impact-sched/nomad-impact/plugin/config"
	"github.com/impact-sched/nomad-impact/plugin/plugintest"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
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
	info := taskInfo{name: "trainer", allocID: "a1", group: "workers", namespace: "default", jobID: "train",
		nodeID: "n1", env: map[string]string{"NOMAD_ALLOC_INDEX": "3", "NOMAD_IP_rdzv": "10.1.2.3", "NOMAD_HOST_PORT_rdzv": "31000",
			envCheckpointSignal: "SIGUSR2", envGrace: "45s"}}
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

func TestRequeueExitCode(t *testing.T) {
	t.Parallel()
	if executor.DefaultRequeueExitCode != policy.DefaultRequeueExitCode {
		t.Fatalf("the driver's default requeue exit code %d is not the scheduler's %d", executor.DefaultRequeueExitCode, policy.DefaultRequeueExitCode)
	}
	for v, want := range map[string]int{"": 75, "75": 75, " 99 ": 99} {
		if got, err := requeueExitCode(map[string]string{envRequeueExitCode: v}); err != nil || got != want {
			t.Errorf("meta %q: %d %v, want %d", v, got, err, want)
		}
	}
	for _, v := range []string{"0", "-1", "256", "seventy-five"} {
		if _, err := requeueExitCode(map[string]string{envRequeueExitCode: v}); err == nil || !strings.Contains(err.Error(), "impact_requeue_exit_code") {
			t.Errorf("meta %q: err %v, want one naming impact_requeue_exit_code", v, err)
		}
	}
}
