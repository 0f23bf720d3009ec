// Package nomadagent starts a real Nomad agent for the end-to-end suites:
// one process that is server and client, bound to 127.0.0.1 only, on free
// ports, with its own data and plugin directories, the fingerprint
// denylist every test agent needs, and a cleanup that stops every job
// before stopping the agent (so no task outlives the test) and removes
// what the client mounted.
//
// StartCluster starts a real multi-node cluster on the same machine: one
// server process and several client processes, each with its own name,
// data and alloc dirs, ports, plugin dir and cgroup parent; NodeTopology
// gives each client a fake GPU topology with GPU UUIDs of its own. Use it
// for everything multi-node (gangs over nodes, a node that dies).
//
// A test is skipped when no `nomad` binary is on PATH (run the suites with
// PATH=/opt/nomad-e2e:$PATH); each suite's TestMain (Main) then says so
// once, and `make test` lists those lines after the tests.
package nomadagent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Denylist keeps the client from probing cloud metadata endpoints, which
// stalls fingerprinting for a long time off-cloud.
const Denylist = "env_aws,env_gce,env_azure,env_digitalocean"

// SkipLogEnv names the file to which Main appends why a suite's tests
// were skipped; `make test` sets it and prints the file after the tests,
// since go test shows a passing package's output only with -v.
const SkipLogEnv = "IMPACT_E2E_SKIPPED"

// SkipReason is why the tests that need Nomad skip on this machine: "" when
// a nomad binary is on PATH.
func SkipReason() string {
	if _, err := exec.LookPath("nomad"); err != nil {
		return "no nomad binary on PATH (run them with make e2e, a nomad on PATH)"
	}
	return ""
}

// Main runs an end-to-end package's tests; call it from the package's
// TestMain with the package's path (e.g. "e2e/scheduler"). When its tests
// that need Nomad will skip (SkipReason), it says so once for the
// package, not once per test: on stdout (go test -v shows it) and, when
// SkipLogEnv names a file, as a line appended to it, for make test.
func Main(m *testing.M, pkg string) {
	if line := noteSkip(pkg); line != "" {
		fmt.Println(line)
	}
	os.Exit(m.Run())
}

// noteSkip returns the package's skip line ("" when nothing skips for
// want of Nomad), appended to the SkipLogEnv file when one is named.
func noteSkip(pkg string) string {
	why := SkipReason()
	if why == "" {
		return ""
	}
	line := pkg + ": skipped its tests that need Nomad: " + why
	if path := os.Getenv(SkipLogEnv); path != "" {
		if f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}
	return line
}

// Binary returns the path of the nomad binary on PATH, or skips the test.
func Binary(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("nomad")
	if err != nil {
		t.Skip("no nomad binary on PATH (run with PATH=/opt/nomad-e2e:$PATH)")
	}
	return p
}

// FreePorts returns n distinct free TCP ports on 127.0.0.1.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	out := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}

// Dir makes a working directory removed at cleanup. Not t.TempDir: a Nomad
// client mounts task secrets (tmpfs) inside its data dir and may leave them
// mounted, which would fail t.TempDir's removal; they are unmounted here
// first, and what still cannot be removed is logged, not fatal.
func Dir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unmountUnder(dir)
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("leaving %s: %v", dir, err)
		}
	})
	return dir
}

func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	lines := strings.Split(string(b), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		f := strings.Fields(lines[i])
		if len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			_ = syscall.Unmount(f[1], syscall.MNT_DETACH)
		}
	}
}

// RepoRoot is the repository's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// ImpactBinary puts a binary of this repository into dir and returns its
// path: $IMPACT_BIN/<rel> when `make e2e` built it there, else a fresh go
// build of pkg (e.g. rel "plugins/impact-gpu", pkg ".../cmd/impact-gpu").
func ImpactBinary(t testing.TB, dir, rel, pkg string) string {
	t.Helper()
	dst := filepath.Join(dir, filepath.Base(rel))
	if bin := os.Getenv("IMPACT_BIN"); bin != "" {
		if b, err := os.ReadFile(filepath.Join(bin, rel)); err == nil {
			if err := os.WriteFile(dst, b, 0o755); err != nil {
				t.Fatal(err)
			}
			return dst
		}
	}
	cmd := exec.Command("go", "build", "-o", dst, pkg)
	cmd.Dir = RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, out)
	}
	return dst
}

// Eventually polls cond every 250ms until it holds, failing the test with
// what and cond's last detail after d.
func Eventually(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, info := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (last: %s)", what, d, info)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Process is a child process whose output is kept for failure reports.
type Process struct {
	Name string
	Cmd  *exec.Cmd

	mu   sync.Mutex
	buf  bytes.Buffer
	done chan struct{}
}

func (p *Process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buf.Write(b)
}

// Output is the last 12,000 bytes the process wrote.
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.buf.String()
	if len(s) > 12000 {
		s = s[len(s)-12000:]
	}
	return s
}

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Stop interrupts the process and waits up to 30s before killing it.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
}

// Kill kills the process (SIGKILL: no clean shutdown) and waits for it.
func (p *Process) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.done
}

// StartProcess starts bin with args (env added to the test's environment);
// at cleanup it is stopped, and its output logged if the test failed.
func StartProcess(t testing.TB, name string, env []string, bin string, args ...string) *Process {
	t.Helper()
	p := launch(t, name, env, bin, args...)
	t.Cleanup(func() { p.stopAndReport(t) })
	return p
}

func launch(t testing.TB, name string, env []string, bin string, args ...string) *Process {
	t.Helper()
	p := &Process{Name: name, done: make(chan struct{})}
	p.Cmd = exec.Command(bin, args...)
	p.Cmd.Env = append(os.Environ(), env...)
	p.Cmd.Stdout, p.Cmd.Stderr = p, p
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { _ = p.Cmd.Wait(); close(p.done) }()
	return p
}

func (p *Process) stopAndReport(t testing.TB) {
	p.Stop()
	if t.Failed() {
		t.Logf("%s output (tail):\n%s", p.Name, p.Output())
	}
}

// Config is what differs between the suites' agents.
type Config struct {
	// Prefix names the working directory (default "impact-e2e-").
	Prefix string
	// Plugins are binaries copied into the plugin directory, by the file
	// name the agent's plugin blocks use.
	Plugins map[string]string
	// ACL enables ACLs; Start then bootstraps and keeps the management
	// token in Agent.Token.
	ACL bool
	// LogLevel of the agent (default "DEBUG", to diagnose failures).
	LogLevel string
	// ServerOnly starts a server with no client (StartCluster adds the
	// clients as processes of their own).
	ServerOnly bool
	// Extra is HCL appended to the generated config: plugin blocks,
	// telemetry. The generated part sets data_dir, plugin_dir, bind_addr,
	// ports, advertise, server, client (with the denylist) and acl.
	Extra string
}

// Agent is a running Nomad agent.
type Agent struct {
	// Addr is the HTTP API, http://127.0.0.1:<port>.
	Addr string
	// Dir holds the config, data_dir (Dir/data) and PluginDir.
	Dir, PluginDir, ConfigPath string
	// Token is the management token when ACLs are on.
	Token string
	// RPC is the server's RPC address (host:port), for clients to join.
	RPC string

	t     testing.TB
	nomad string
	proc  *Process
}

// Start writes the config, starts the agent and waits until its HTTP API
// answers with a leader. At cleanup every job is stopped (waiting for
// their allocations to end), then the agent, then its directory removed.
func Start(t testing.TB, cfg Config) *Agent {
	t.Helper()
	nomad := Binary(t)
	if cfg.Prefix == "" {
		cfg.Prefix = "impact-e2e-"
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "DEBUG"
	}
	dir := Dir(t, cfg.Prefix)
	a := &Agent{t: t, nomad: nomad, Dir: dir, PluginDir: filepath.Join(dir, "plugins"), ConfigPath: filepath.Join(dir, "agent.hcl")}
	if err := os.MkdirAll(a.PluginDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range cfg.Plugins {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatalf("plugin %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(a.PluginDir, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ports := FreePorts(t, 3)
	a.Addr = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	a.RPC = fmt.Sprintf("127.0.0.1:%d", ports[1])
	hcl := localHCL(filepath.Join(dir, "data"), a.PluginDir, cfg.LogLevel, ports) + fmt.Sprintf(`
server {
  enabled          = true
  bootstrap_expect = 1
}
client {
  enabled = %t
  servers = ["127.0.0.1:%d"]
  options = {
    "fingerprint.denylist" = %q
  }
}
acl {
  enabled = %t
}
`, !cfg.ServerOnly, ports[1], Denylist, cfg.ACL) + cfg.Extra
	if err := os.WriteFile(a.ConfigPath, []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	a.start()
	// Cleanups run last-in first-out: jobs stop before the agent (the one
	// running then, after any Restart), which stops before Dir is removed.
	t.Cleanup(func() { a.proc.stopAndReport(t) })
	t.Cleanup(a.StopAllJobs)
	if cfg.ACL {
		Eventually(t, 60*time.Second, "acl bootstrap", func() (bool, string) {
			out, err := a.CLI("acl", "bootstrap", "-json")
			if err != nil {
				return false, out
			}
			var tok struct{ SecretID string }
			if err := json.Unmarshal([]byte(out), &tok); err != nil || tok.SecretID == "" {
				return false, out
			}
			a.Token = tok.SecretID
			return true, ""
		})
	}
	Eventually(t, 60*time.Second, "nomad agent answering with a leader", func() (bool, string) {
		var leader string
		err := a.Get("/v1/status/leader", &leader)
		return err == nil && leader != "", fmt.Sprintf("%q %v", leader, err)
	})
	return a
}

// localHCL is the part of every agent's config that keeps it on this
// machine alone: its directories, log level, and ports bound and advertised
// on 127.0.0.1 (ports: http, rpc, serf).
func localHCL(dataDir, pluginDir, logLevel string, ports []int) string {
	return fmt.Sprintf(`
data_dir   = %q
plugin_dir = %q
bind_addr  = "127.0.0.1"
log_level  = %q
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
`, dataDir, pluginDir, logLevel, ports[0], ports[1], ports[2])
}

func (a *Agent) start() {
	a.proc = launch(a.t, "nomad agent", nil, a.nomad, "agent", "-config", a.ConfigPath)
}

// Stop stops the agent (SIGINT, then SIGKILL after 30s). A client stopped
// this way leaves its tasks running, for Restart to recover.
func (a *Agent) Stop() { a.proc.Stop() }

// Restart starts the agent again with the same config and data.
func (a *Agent) Restart() {
	a.t.Helper()
	a.Stop()
	a.start()
}

// RestartAfter stops the agent, keeps it down for down (an outage of that
// length, not a wait for anything), and starts it again with the same
// config and data.
func (a *Agent) RestartAfter(down time.Duration) {
	a.t.Helper()
	a.Stop()
	time.Sleep(down)
	a.start()
}

// Output is the tail of the agent's log.
func (a *Agent) Output() string { return a.proc.Output() }

// Exited is closed when the agent process has exited.
func (a *Agent) Exited() <-chan struct{} { return a.proc.Exited() }

// CLI runs the nomad CLI against the agent (with the management token).
func (a *Agent) CLI(args ...string) (string, error) {
	cmd := exec.Command(a.nomad, args...)
	cmd.Env = append(os.Environ(), "NOMAD_ADDR="+a.Addr, "NOMAD_TOKEN="+a.Token)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Get decodes the JSON answer of GET path (with the management token); out
// may be a *string for the raw body. A non-200 answer is an error.
func (a *Agent) Get(path string, out any) error {
	req, err := http.NewRequest(http.MethodGet, a.Addr+path, nil)
	if err != nil {
		return err
	}
	if a.Token != "" {
		req.Header.Set("X-Nomad-Token", a.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, bytes.TrimSpace(b))
	}
	if s, ok := out.(*string); ok {
		*s = string(b)
		return nil
	}
	return json.Unmarshal(b, out)
}

// Node is the part of a node the suites wait on.
type Node struct {
	ID     string
	Name   string
	Status string
	// Drivers by name.
	Drivers map[string]struct {
		Detected, Healthy bool
		HealthDescription string
	}
	NodeResources struct {
		Devices []struct {
			Vendor, Type, Name string
			Instances          []struct {
				ID      string
				Healthy bool
			}
		}
	}
}

// Devices counts the node's device instances of the given type ("gpu").
func (n Node) Devices(typ string) int {
	c := 0
	for _, d := range n.NodeResources.Devices {
		if d.Type == typ {
			c += len(d.Instances)
		}
	}
	return c
}

// WaitNode waits up to d for the (single) client node to be ready and to
// satisfy ok (nil: ready is enough), and returns it.
func (a *Agent) WaitNode(d time.Duration, what string, ok func(Node) (bool, string)) Node {
	a.t.Helper()
	var node Node
	Eventually(a.t, d, what, func() (bool, string) {
		var nodes []struct{ ID string }
		if err := a.Get("/v1/nodes", &nodes); err != nil || len(nodes) == 0 {
			return false, fmt.Sprint("nodes: ", err)
		}
		if err := a.Get("/v1/node/"+nodes[0].ID, &node); err != nil {
			return false, err.Error()
		}
		if node.Status != "ready" {
			return false, "status " + node.Status
		}
		if ok == nil {
			return true, ""
		}
		return ok(node)
	})
	return node
}

// StopAllJobs stops every job and waits (up to 30s) until no allocation is
// pending or running, so no task process outlives the suite.
func (a *Agent) StopAllJobs() {
	select {
	case <-a.proc.Exited():
		return
	default:
	}
	var jobs []struct{ ID, Namespace string }
	if err := a.Get("/v1/jobs?namespace=*", &jobs); err != nil {
		return
	}
	for _, j := range jobs {
		_, _ = a.CLI("job", "stop", "-detach", "-namespace", j.Namespace, j.ID)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var allocs []struct{ ClientStatus string }
		if err := a.Get("/v1/allocations?namespace=*", &allocs); err != nil {
			return
		}
		live := 0
		for _, al := range allocs {
			if al.ClientStatus == "running" || al.ClientStatus == "pending" {
				live++
			}
		}
		if live == 0 {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	a.t.Logf("allocations still live 30s after stopping every job")
}
