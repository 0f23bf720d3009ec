package nomadagent

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ClusterConfig describes a real multi-node Nomad cluster on one machine:
// one server process and Clients client processes, each client with its
// own name, data_dir, alloc_dir, ports, plugin_dir, cgroup_parent and
// network_interface "lo". A single -dev node hides the bugs that matter
// (a lost node, a gang split over nodes, per-node GPU UUIDs); this does not.
type ClusterConfig struct {
	// Prefix names the working directory (default "impact-e2e-cluster-").
	Prefix string
	// Clients is the number of client processes (at least 1).
	Clients int
	// ACL enables ACLs on the server; the management token is then in
	// Cluster.Server.Token and is given to every client.
	ACL bool
	// LogLevel of every process (default "DEBUG").
	LogLevel string
	// Plugins are binaries copied into every client's plugin directory, by
	// the file name the plugin blocks use.
	Plugins map[string]string
	// ServerExtra is HCL appended to the server's config (telemetry...).
	ServerExtra string
	// ClientExtra returns the HCL appended to client i's config: its plugin
	// blocks (with a fake topology of its own, so GPU UUIDs are distinct),
	// node_pool, meta. c.Dir is already made, so a file written there (a
	// topology, a control file) can be named in the returned HCL. Nil adds
	// nothing.
	ClientExtra func(i int, c *Client) string
}

// Cluster is a running server with its client processes.
type Cluster struct {
	// Server answers the HTTP API (Addr, CLI, Get, Token).
	*Agent
	Clients []*Client
}

// Client is one Nomad client process of a Cluster.
type Client struct {
	// Name is the node name ("client-0", ...).
	Name string
	// Addr is the client's own HTTP API.
	Addr string
	// Dir holds its config, data_dir (Dir/data), alloc dir (Dir/alloc)
	// and PluginDir.
	Dir, PluginDir, ConfigPath string

	t     testing.TB
	nomad string
	proc  *Process
}

// StartCluster starts the server, then every client, and waits until all
// clients are registered and ready. At cleanup every job is stopped first
// (waiting for their allocations to end), then the clients, then any task
// process still running from a client's directory is killed (a client
// killed by the test cannot stop its tasks), then the server.
func StartCluster(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	if cfg.Clients < 1 {
		t.Fatalf("StartCluster: Clients = %d, need at least 1", cfg.Clients)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "impact-e2e-cluster-"
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "DEBUG"
	}
	srv := Start(t, Config{Prefix: cfg.Prefix + "server-", ACL: cfg.ACL, LogLevel: cfg.LogLevel, ServerOnly: true, Extra: cfg.ServerExtra})
	c := &Cluster{Agent: srv}
	for i := range cfg.Clients {
		cl := &Client{t: t, nomad: srv.nomad, Name: fmt.Sprintf("client-%d", i)}
		cl.Dir = Dir(t, cfg.Prefix+cl.Name+"-")
		cl.PluginDir = filepath.Join(cl.Dir, "plugins")
		cl.ConfigPath = filepath.Join(cl.Dir, "client.hcl")
		if err := os.MkdirAll(cl.PluginDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, src := range cfg.Plugins {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatalf("plugin %s: %v", name, err)
			}
			if err := os.WriteFile(filepath.Join(cl.PluginDir, name), b, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		extra := ""
		if cfg.ClientExtra != nil {
			extra = cfg.ClientExtra(i, cl)
		}
		ports := FreePorts(t, 3)
		cl.Addr = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
		hcl := fmt.Sprintf("name = %q\n", cl.Name) + localHCL(filepath.Join(cl.Dir, "data"), cl.PluginDir, cfg.LogLevel, ports) + fmt.Sprintf(`
server {
  enabled = false
}
client {
  enabled           = true
  servers           = [%q]
  alloc_dir         = %q
  cgroup_parent     = %q
  network_interface = "lo"
  no_host_uuid      = true
  options = {
    "fingerprint.denylist" = %q
  }
}
acl {
  enabled = %t
}
`, srv.RPC, filepath.Join(cl.Dir, "alloc"), "impact-e2e-"+cl.Name+"-"+strconv.Itoa(os.Getpid()), Denylist, cfg.ACL) + extra
		if err := os.WriteFile(cl.ConfigPath, []byte(hcl), 0o644); err != nil {
			t.Fatal(err)
		}
		cl.Start()
		// Cleanups run last-in first-out: registered here, this runs after
		// the cluster-wide StopAllJobs below and before the server stops.
		t.Cleanup(func() {
			cl.proc.stopAndReport(t)
			if n := KillUnder(cl.Dir); n > 0 {
				t.Logf("%s: killed %d task process(es) left running", cl.Name, n)
			}
		})
		c.Clients = append(c.Clients, cl)
	}
	t.Cleanup(c.StopAllJobs)
	c.WaitNodes(90*time.Second, cfg.Clients, "every client ready", nil)
	return c
}

// Start starts the client process (again, after Kill or Stop) with the same
// config and data, so it re-registers as the same node.
func (c *Client) Start() {
	c.t.Helper()
	c.proc = launch(c.t, "nomad client "+c.Name, nil, c.nomad, "agent", "-config", c.ConfigPath)
}

// Stop stops the client (SIGINT, then SIGKILL after 30s); its tasks keep
// running, as on a real client restart.
func (c *Client) Stop() { c.proc.Stop() }

// Kill kills the client with SIGKILL: the node stops heartbeating and the
// server marks it down after its heartbeat TTL, as when a machine dies.
// Its tasks keep running until KillTasks (or cleanup) kills them.
func (c *Client) Kill() { c.proc.Kill() }

// KillTasks kills every process still running from the client's
// directory (its plugins, their supervisors, task processes), as a machine
// that lost power would: use it after Kill to model a dead node. It returns
// how many it killed, once none is left (a process that a kill makes
// re-spawn a child is killed again), or fails the test after 10s.
func (c *Client) KillTasks() int {
	c.t.Helper()
	total := 0
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := KillUnder(c.Dir)
		if n == 0 {
			return total
		}
		total += n
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: processes under %s still running 10s after SIGKILL", c.Name, c.Dir)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Exited is closed when the client process has exited.
func (c *Client) Exited() <-chan struct{} { return c.proc.Exited() }

// Output is the tail of the client's log.
func (c *Client) Output() string { return c.proc.Output() }

// WaitNodes waits up to d until n nodes are ready and, if ok is not nil,
// ok holds for them; it returns them sorted by name.
func (a *Agent) WaitNodes(d time.Duration, n int, what string, ok func([]Node) (bool, string)) []Node {
	a.t.Helper()
	var nodes []Node
	Eventually(a.t, d, what, func() (bool, string) {
		var list []struct{ ID, Status string }
		if err := a.Get("/v1/nodes", &list); err != nil {
			return false, fmt.Sprint("nodes: ", err)
		}
		nodes = nodes[:0]
		for _, l := range list {
			if l.Status != "ready" {
				continue
			}
			var node Node
			if err := a.Get("/v1/node/"+l.ID, &node); err != nil {
				return false, err.Error()
			}
			if node.Status == "ready" {
				nodes = append(nodes, node)
			}
		}
		if len(nodes) < n {
			return false, fmt.Sprintf("%d of %d nodes ready", len(nodes), n)
		}
		sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
		if ok == nil {
			return true, ""
		}
		return ok(nodes)
	})
	return nodes
}

// KillUnder sends SIGKILL to every live process (zombies are skipped: they
// are dead, waiting for their parent) whose executable or working directory
// lies under dir, or whose command line names a path under it, and returns
// how many it signalled. It is the safety net that keeps a task of a
// killed client from outliving a test. The command line matters for
// Nomad's own task executor (`nomad executor {"LogFile":".../alloc/..."}`):
// its executable is the nomad binary and its working directory the test's,
// so neither places it under the client; seen outliving the lifecycle
// suite's killed client.
func KillUnder(dir string) int {
	dir = filepath.Clean(dir) + string(filepath.Separator)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self := os.Getpid()
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		exe, _ := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		cwd, _ := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		under := strings.HasPrefix(exe, dir) || strings.HasPrefix(cwd, dir)
		if !under {
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			under = strings.Contains(string(cmdline), dir)
		}
		if under && !zombie(pid) {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}

// zombie reports whether pid has exited and waits to be reaped (or is gone).
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || len(b) <= i+2 || b[i+2] == 'Z' || b[i+2] == 'X'
}

// gpuUUID matches a fake topology's uuid attribute: GPU-8-4-4-4-12 hex.
var gpuUUID = regexp.MustCompile(`(uuid\s*=\s*"GPU-[0-9a-fA-F]{8}-)([0-9a-fA-F]{4})(-[0-9a-fA-F-]+")`)

// NodeTopology copies the fake topology file src into dir for node i of a
// cluster, with every GPU UUID made distinct per node (its second group
// becomes i+1 in hex), so GPUs of different nodes never share an ID, as on
// real machines. A relative control_file in it then names dir's file.
// It returns the copy's path.
func NodeTopology(t testing.TB, src, dir string, i int) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	out := gpuUUID.ReplaceAll(b, []byte(fmt.Sprintf("${1}%04x${3}", i+1)))
	dst := filepath.Join(dir, filepath.Base(src))
	if err := os.WriteFile(dst, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}
