package nomad

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// The fidelity test runs one park / admit / conflict / preempt / explain /
// lock scenario through the adapter against the in-process fake and, when
// a `nomad` binary is on PATH, against a real `nomad agent -dev`, and
// compares what the adapter observed on both. It is how the fake's
// behaviour is checked against the real agent.

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startDevAgent starts a Nomad dev agent on loopback ports of its own and
// returns its address.
func startDevAgent(t *testing.T, bin string) string {
	return startDevAgentWith(t, bin, agentDir(t), "").addr
}

// agentDir makes a directory for a dev agent. Nomad mounts a tmpfs for
// each task's secrets under its data dir and may leave them mounted at
// shutdown, so the cleanup unmounts what is left before removing it.
func agentDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "impact-nomad-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile("/proc/self/mounts"); err == nil {
			var mounts []string
			for _, line := range strings.Split(string(b), "\n") {
				if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
					mounts = append(mounts, f[1])
				}
			}
			sort.Sort(sort.Reverse(sort.StringSlice(mounts)))
			for _, m := range mounts {
				_ = syscall.Unmount(m, syscall.MNT_DETACH)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("leaving %s: %v", dir, err)
		}
	})
	return dir
}

type devAgent struct {
	addr  string
	ports [3]int
	stop  func()
	// token, when ACLs are on, lets stop clean up.
	token string
}

// startDevAgentWith starts a dev agent in dir with extra configuration,
// on fresh loopback ports.
func startDevAgentWith(t *testing.T, bin, dir, extra string) *devAgent {
	return startDevAgentOn(t, bin, dir, extra, [3]int{freePort(t), freePort(t), freePort(t)})
}

// startDevAgentOn starts a dev agent on the given http, rpc and serf ports.
// Its stop (also run at cleanup) stops every job, waits for the tasks to
// end (Nomad leaves tasks running when its agent stops, so that they
// survive a restart), then stops the agent.
func startDevAgentOn(t *testing.T, bin, dir, extra string, ports [3]int) *devAgent {
	t.Helper()
	cfg := fmt.Sprintf(`
bind_addr = "127.0.0.1"
data_dir  = %q
ports {
  http = %d
  rpc  = %d
  serf = %d
}
client {
  enabled = true
  options = {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
%s
`, filepath.Join(dir, "data"), ports[0], ports[1], ports[2], extra)
	cfgPath := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "agent", "-dev", "-config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nomad: %v", err)
	}
	addr := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	da := &devAgent{addr: addr, ports: ports}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			if c, err := api.NewClient(&api.Config{Address: addr, SecretID: da.token}); err == nil {
				jobs, _, _ := c.Jobs().List(&api.QueryOptions{Namespace: "*"})
				for _, j := range jobs {
					_, _, _ = c.Jobs().Deregister(j.ID, false, &api.WriteOptions{Namespace: j.Namespace})
				}
				for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
					as, _, err := c.Allocations().List(&api.QueryOptions{Namespace: "*"})
					live := 0
					for _, a := range as {
						if a.ClientStatus == "running" || a.ClientStatus == "pending" {
							live++
						}
					}
					if err != nil || live == 0 {
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
			}
			_ = cmd.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			logf.Close()
			if t.Failed() {
				b, _ := os.ReadFile(logf.Name())
				if len(b) > 4000 {
					b = b[len(b)-4000:]
				}
				t.Logf("nomad agent log (tail):\n%s", b)
			}
		})
	}
	da.stop = stop
	t.Cleanup(stop)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(addr + "/v1/nodes")
		if err == nil {
			var nodes []struct{ Status string }
			_ = json.NewDecoder(resp.Body).Decode(&nodes)
			resp.Body.Close()
			if len(nodes) == 1 && nodes[0].Status == "ready" {
				return da
			}
			if resp.StatusCode == http.StatusForbidden {
				// ACLs on: the node list needs a token; wait for the
				// leader instead.
				if r2, err := http.Get(addr + "/v1/status/leader"); err == nil {
					var leader string
					_ = json.NewDecoder(r2.Body).Decode(&leader)
					r2.Body.Close()
					if leader != "" {
						time.Sleep(3 * time.Second) // let the client register
						return da
					}
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("nomad dev agent not ready at %s", addr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
