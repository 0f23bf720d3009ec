package plugin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNomadAgentLoadsPlugins runs a real Nomad dev agent (only when a nomad
// binary is on PATH) with the test plugin installed twice, as a device
// plugin and as a task driver, and checks that the node reports the fake
// devices (with the typed config applied) and a healthy driver. Run with
// PATH=/opt/nomad-e2e:$PATH go test -run NomadAgent -v ./plugin/
func TestNomadAgentLoadsPlugins(t *testing.T) {
	nomad, dir, pluginDir := agentSetup(t, "impact-testdevice", "impact-testdriver")
	ports := freePorts(t, 3)
	cfg := agentConfig(dir, pluginDir, ports, `
plugin "impact-testdevice" {
  config {
    vendor  = "impact"
    devices = 3
    scale   = 0.1
    tags    = ["e2e"]
    island {
      id = 0
    }
  }
}
plugin "impact-testdriver" {
  args = ["-driver"]
  config {}
}
`)
	cfgFile := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(nomad, "agent", "-dev", "-config", cfgFile)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("agent log:\n%s", b)
		}
	})

	base := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var node nomadNode
	err = poll(ctx, exited, func() (bool, error) {
		var nodes []struct{ ID, Status string }
		if err := getJSON(ctx, base+"/v1/nodes", &nodes); err != nil {
			return false, nil // agent not up yet
		}
		if len(nodes) == 0 || nodes[0].Status != "ready" {
			return false, nil
		}
		if err := getJSON(ctx, base+"/v1/node/"+nodes[0].ID, &node); err != nil {
			return false, err
		}
		return len(node.NodeResources.Devices) > 0 && node.Drivers["impact-test-driver"].Detected, nil
	})
	if err != nil {
		t.Fatalf("waiting for the node to report the plugins: %v (last node: %+v)", err, node)
	}

	dev := node.NodeResources.Devices[0]
	t.Logf("device group %s/%s/%s with %d instances, attributes %s", dev.Vendor, dev.Type, dev.Name, len(dev.Instances), formatAttrs(dev.Attributes))
	if dev.Vendor != "impact" || dev.Type != "gpu" || dev.Name != "Fake GPU" || len(dev.Instances) != 3 {
		t.Errorf("device group = %+v", dev)
	}
	if a := dev.Attributes["scale"]; a.FloatVal == nil || *a.FloatVal != 0.1 {
		t.Errorf("scale attribute = %+v, want float 0.1 (sent by Nomad as the string \"0.1\")", a)
	}
	if a := dev.Attributes["islands"]; a.IntVal == nil || *a.IntVal != 1 {
		t.Errorf("islands attribute = %+v, want 1", a)
	}
	drv := node.Drivers["impact-test-driver"]
	t.Logf("driver impact-test-driver: detected=%v healthy=%v %q", drv.Detected, drv.Healthy, drv.HealthDescription)
	if !drv.Healthy {
		t.Errorf("driver = %+v", drv)
	}

	// A job asking for two devices gets them through Reserve.
	job := filepath.Join(dir, "job.hcl")
	if err := os.WriteFile(job, []byte(`
job "impact-plugin-e2e" {
  datacenters = ["*"]
  type        = "batch"
  group "g" {
    task "show" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo FAKE=$FAKE_VISIBLE_DEVICES"]
      }
      resources {
        cpu    = 50
        memory = 32
        device "impact/gpu" {
          count = 2
        }
      }
    }
  }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	run := exec.CommandContext(ctx, nomad, "job", "run", "-detach", job)
	run.Env = append(os.Environ(), "NOMAD_ADDR="+base)
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("nomad job run: %v\n%s", err, out)
	}
	var allocID string
	err = poll(ctx, exited, func() (bool, error) {
		var allocs []struct{ ID, ClientStatus string }
		if err := getJSON(ctx, base+"/v1/job/impact-plugin-e2e/allocations", &allocs); err != nil {
			return false, err
		}
		if len(allocs) == 0 {
			return false, nil
		}
		switch allocs[0].ClientStatus {
		case "complete":
			allocID = allocs[0].ID
			return true, nil
		case "failed", "lost":
			return false, fmt.Errorf("allocation %s is %s", allocs[0].ID, allocs[0].ClientStatus)
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for the job: %v", err)
	}
	logs, err := getText(ctx, base+"/v1/client/fs/logs/"+allocID+"?task=show&type=stdout&plain=true&origin=start")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("task stdout: %s", strings.TrimSpace(logs))
	ids := strings.Split(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(logs), "FAKE=")), ",")
	if len(ids) != 2 || !strings.HasPrefix(ids[0], "fake-") || !strings.HasPrefix(ids[1], "fake-") {
		t.Errorf("task saw FAKE_VISIBLE_DEVICES %q, want two fake-N ids", logs)
	}
}

func formatAttrs(attrs map[string]nomadAttr) string {
	var parts []string
	for k, a := range attrs {
		var v string
		switch {
		case a.FloatVal != nil:
			v = fmt.Sprint(*a.FloatVal)
		case a.IntVal != nil:
			v = fmt.Sprint(*a.IntVal)
		case a.StringVal != nil:
			v = fmt.Sprintf("%q", *a.StringVal)
		case a.BoolVal != nil:
			v = fmt.Sprint(*a.BoolVal)
		}
		parts = append(parts, k+"="+strings.TrimSpace(v+" "+a.Unit))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func getText(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return string(body), nil
}

// TestNomadAgentRefusesBadPluginConfig: a config the plugin rejects aborts
// the agent's start-up, and the agent's output names the bad field.
func TestNomadAgentRefusesBadPluginConfig(t *testing.T) {
	nomad, dir, pluginDir := agentSetup(t, "impact-testdevice")
	cfg := agentConfig(dir, pluginDir, freePorts(t, 3), `
plugin "impact-testdevice" {
  config {
    vendor  = "impact"
    devices = 100
  }
}
`)
	cfgFile := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, nomad, "agent", "-dev", "-config", cfgFile).CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("agent did not fail on a bad plugin config (err=%v)\n%s", err, out)
	}
	var line string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, `config field \"devices\"`) || strings.Contains(l, `config field "devices"`) {
			line = strings.TrimSpace(l)
		}
	}
	if line == "" {
		t.Fatalf("agent output does not name the field:\n%s", out)
	}
	t.Logf("agent refused to start: %s", line)
}

// agentSetup skips the test without a nomad binary on PATH; otherwise it
// returns it, a temporary directory for the agent and a plugin directory
// in it holding the test plugin under each name (the file names must match
// the plugin blocks; PluginInfo names differ).
func agentSetup(t *testing.T, names ...string) (nomad, dir, pluginDir string) {
	t.Helper()
	nomad, err := exec.LookPath("nomad")
	if err != nil {
		t.Skip("no nomad binary on PATH")
	}
	dir = t.TempDir()
	pluginDir = filepath.Join(dir, "plugins")
	if err := os.MkdirAll(pluginDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		copyExecutable(t, testPluginBin, filepath.Join(pluginDir, name))
	}
	return nomad, dir, pluginDir
}

// agentConfig is a dev agent's configuration on 127.0.0.1 with its own
// ports and data directory under dir, followed by the plugin blocks.
func agentConfig(dir, pluginDir string, ports []int, plugins string) string {
	return fmt.Sprintf(`
bind_addr  = "127.0.0.1"
data_dir   = %q
plugin_dir = %q
ports {
  http = %d
  rpc  = %d
  serf = %d
}
advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
client {
  options = {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}
`, filepath.Join(dir, "data"), pluginDir, ports[0], ports[1], ports[2]) + plugins
}

// nomadAttr is a device attribute as Nomad's HTTP API renders it.
type nomadAttr struct {
	FloatVal  *float64 `json:"Float"`
	IntVal    *int64   `json:"Int"`
	StringVal *string  `json:"String"`
	BoolVal   *bool    `json:"Bool"`
	Unit      string
}

type nomadNode struct {
	NodeResources struct {
		Devices []struct {
			Vendor, Type, Name string
			Instances          []struct {
				ID      string
				Healthy bool
			}
			Attributes map[string]nomadAttr
		}
	}
	Drivers map[string]struct {
		Detected, Healthy bool
		HealthDescription string
	}
}

func getJSON(ctx context.Context, url string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return json.Unmarshal(body, out)
}

// poll calls check every 500ms until it reports done, fails, the agent
// exits or ctx ends.
func poll(ctx context.Context, exited <-chan struct{}, check func() (bool, error)) error {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		done, err := check()
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return fmt.Errorf("agent exited")
		case <-tick.C:
		}
	}
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

func copyExecutable(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
