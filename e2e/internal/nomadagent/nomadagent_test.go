package nomadagent

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestFreePortsAreDistinctAndFree(t *testing.T) {
	ports := FreePorts(t, 5)
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d twice in %v", p, ports)
		}
		seen[p] = true
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d not free: %v", p, err)
		}
		l.Close()
	}
}

// The helper end to end: an agent comes up with its node ready, a job
// runs, and StopAllJobs (which the cleanup runs) leaves nothing running.
func TestAgentRunsAndCleansUp(t *testing.T) {
	a := Start(t, Config{Prefix: "impact-e2e-helper-", LogLevel: "INFO", Extra: `
plugin "raw_exec" {
  config {
    enabled = true
  }
}
`})
	n := a.WaitNode(90*time.Second, "raw_exec on the node", func(n Node) (bool, string) {
		d := n.Drivers["raw_exec"]
		return d.Healthy, fmt.Sprintf("raw_exec %+v", d)
	})
	if n.ID == "" {
		t.Fatal("no node ID")
	}
	job := filepath.Join(a.Dir, "sleep.nomad.hcl")
	writeJob(t, job)
	if out, err := a.CLI("job", "run", "-detach", job); err != nil {
		t.Fatalf("job run: %v\n%s", err, out)
	}
	live := func() int {
		var allocs []struct{ ClientStatus string }
		if err := a.Get("/v1/allocations", &allocs); err != nil {
			return -1
		}
		c := 0
		for _, al := range allocs {
			if al.ClientStatus == "running" || al.ClientStatus == "pending" {
				c++
			}
		}
		return c
	}
	Eventually(t, 60*time.Second, "job running", func() (bool, string) {
		var allocs []struct{ ClientStatus string }
		err := a.Get("/v1/job/sleep/allocations", &allocs)
		return err == nil && len(allocs) == 1 && allocs[0].ClientStatus == "running", fmt.Sprintf("%+v %v", allocs, err)
	})
	a.StopAllJobs()
	if n := live(); n != 0 {
		t.Errorf("%d allocations still live after StopAllJobs", n)
	}
}

func writeJob(t *testing.T, path string) {
	t.Helper()
	src := `job "sleep" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
`
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}
