package nomadagent

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// The cluster helper itself, on a real Nomad: two clients register as two
// distinct nodes, each runs a task of a two-group job, a killed client is
// marked down by the server and comes back as the same node when started
// again, and no task of a killed client outlives its KillTasks.
func TestClusterNodesDieAndReturn(t *testing.T) {
	c := StartCluster(t, ClusterConfig{
		Clients: 2,
		// A short heartbeat TTL so a killed client is marked down in
		// seconds rather than the default tens of seconds.
		ServerExtra: `
server {
  heartbeat_grace   = "1s"
  min_heartbeat_ttl = "2s"
}
`,
		ClientExtra: func(i int, cl *Client) string {
			return fmt.Sprintf(`
client {
  meta = { "e2e_index" = "%d" }
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
`, i)
		},
	})
	nodes := c.WaitNodes(60*time.Second, 2, "two nodes with raw_exec", func(ns []Node) (bool, string) {
		for _, n := range ns {
			if d, ok := n.Drivers["raw_exec"]; !ok || !d.Healthy {
				return false, n.Name + ": raw_exec not healthy yet"
			}
		}
		return true, ""
	})
	if len(nodes) != 2 || nodes[0].Name != "client-0" || nodes[1].Name != "client-1" || nodes[0].ID == nodes[1].ID {
		t.Fatalf("nodes = %+v, want client-0 and client-1 with distinct IDs", nodes)
	}

	job := `
job "spread" {
  datacenters = ["*"]
  type = "service"
  group "g" {
    count = 2
    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "while true; do sleep 1; done"]
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
`
	path := c.Dir + "/spread.nomad.hcl"
	if err := os.WriteFile(path, []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.CLI("job", "run", "-detach", path); err != nil {
		t.Fatalf("job run: %v\n%s", err, out)
	}
	Eventually(t, 60*time.Second, "one running allocation on each node", func() (bool, string) {
		var allocs []struct{ NodeID, ClientStatus string }
		if err := c.Get("/v1/job/spread/allocations", &allocs); err != nil {
			return false, err.Error()
		}
		on := map[string]bool{}
		for _, a := range allocs {
			if a.ClientStatus == "running" {
				on[a.NodeID] = true
			}
		}
		return on[nodes[0].ID] && on[nodes[1].ID], fmt.Sprint(allocs)
	})

	victim := c.Clients[1]
	victim.Kill()
	if n := victim.KillTasks(); n == 0 {
		t.Errorf("KillTasks found no process of the killed client's running task")
	}
	if n := KillUnder(victim.Dir); n != 0 {
		t.Errorf("%d process(es) still under %s after KillTasks", n, victim.Dir)
	}
	Eventually(t, 60*time.Second, "killed client marked down", func() (bool, string) {
		var n struct{ Status string }
		if err := c.Get("/v1/node/"+nodes[1].ID, &n); err != nil {
			return false, err.Error()
		}
		return n.Status == "down", n.Status
	})

	victim.Start()
	back := c.WaitNodes(60*time.Second, 2, "killed client back", nil)
	ids := []string{back[0].ID, back[1].ID}
	if strings.Join(ids, ",") != nodes[0].ID+","+nodes[1].ID {
		t.Fatalf("after restart node IDs = %v, want the same nodes %s, %s", ids, nodes[0].ID, nodes[1].ID)
	}
}
