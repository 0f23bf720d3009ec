package scheduler

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/e2e/internal/nomadagent"
)

// TestParkingCandidates pins down the Nomad behaviour behind the choice of
// the parking pool (scheduler/nomad/README.md, "What operators see"), on a real
// Nomad without the scheduler: a parked batch job is pending, makes
// `nomad job run` exit 2 and survives `nomad system gc`; the same job
// scaled to 0 (the "suspend" pattern) is dead and purged by it, versions
// and all; a parked service job cannot be scaled; a jobspec's ui block
// costs no extra version or evaluation.
func TestParkingCandidates(t *testing.T) {
	a := nomadagent.Start(t, nomadagent.Config{Prefix: "impact-e2e-parking-", Extra: `
plugin "raw_exec" {
  config {
    enabled = true
  }
}
`})
	dir := a.Dir
	if out, err := a.CLI("node", "pool", "apply", writeFile(t, dir, "pool.hcl", `node_pool "impact-queue" {}`)); err != nil {
		t.Fatalf("pool: %v\n%s", err, out)
	}
	spec := func(name, typ, extra string) string {
		return writeFile(t, dir, name+".nomad.hcl", fmt.Sprintf(`job %q {
  type      = %q
  node_pool = "impact-queue"
  %s
  group "g" {
    count = 2
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
      resources {
        cpu    = 20
        memory = 32
      }
    }
  }
}
`, name, typ, extra))
	}
	exitCode := func(err error) int {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		return 0
	}
	type jobInfo struct {
		Status  string
		Version int
	}
	info := func(id string) (jobInfo, bool) {
		var j jobInfo
		err := a.Get("/v1/job/"+id, &j)
		return j, err == nil
	}
	versions := func(id string) int {
		var v struct{ Versions []struct{ Version int } }
		_ = a.Get("/v1/job/"+id+"/versions", &v)
		return len(v.Versions)
	}
	evals := func(id string) int {
		var ev []struct{ ID string }
		_ = a.Get("/v1/job/"+id+"/evaluations", &ev)
		return len(ev)
	}

	out, err := a.CLI("job", "run", spec("parked", "batch", ""))
	if exitCode(err) != 2 || !strings.Contains(out, "No nodes were eligible for evaluation") {
		t.Errorf("nomad job run of a parked job: exit %d, want 2 with the placement failure\n%s", exitCode(err), out)
	}
	ui := `ui {
    description = "queued by the impact scheduler"
    link {
      label = "impact"
      url   = "http://127.0.0.1:4680/ui/job/default/withui"
    }
  }`
	if out, err := a.CLI("job", "run", "-detach", spec("withui", "batch", ui)); err != nil {
		t.Fatalf("withui: %v\n%s", err, out)
	}
	if out, err := a.CLI("job", "run", "-detach", spec("suspended", "batch", "")); err != nil {
		t.Fatalf("suspended: %v\n%s", err, out)
	}
	if out, err := a.CLI("job", "run", "-detach", spec("svc", "service", "")); err != nil {
		t.Fatalf("svc: %v\n%s", err, out)
	}
	eventually(t, 30*time.Second, "parked jobs pending with a blocked evaluation each", func() (bool, string) {
		var s []string
		ok := true
		for _, id := range []string{"parked", "withui", "suspended"} {
			j, _ := info(id)
			s = append(s, fmt.Sprintf("%s=%s/v%d/%d evals", id, j.Status, versions(id), evals(id)))
			ok = ok && j.Status == "pending" && versions(id) == 1 && evals(id) == 2
		}
		return ok, strings.Join(s, " ")
	})

	if out, err := a.CLI("job", "scale", "-detach", "suspended", "g", "0"); err != nil {
		t.Fatalf("scale to 0: %v\n%s", err, out)
	}
	eventually(t, 30*time.Second, "scaled job dead with a second version", func() (bool, string) {
		j, _ := info("suspended")
		return j.Status == "dead" && versions("suspended") == 2, fmt.Sprintf("%+v, %d versions", j, versions("suspended"))
	})
	out, err = a.CLI("job", "scale", "-detach", "svc", "g", "0")
	if err == nil || !strings.Contains(out, "active deployment") {
		t.Errorf("scaling a parked service job: %v\n%s\nwant it refused (active deployment)", err, out)
	}

	if out, err := a.CLI("system", "gc"); err != nil {
		t.Fatalf("system gc: %v\n%s", err, out)
	}
	eventually(t, 30*time.Second, "the job scaled to 0 purged by the GC", func() (bool, string) {
		_, exists := info("suspended")
		return !exists, "still there"
	})
	for _, id := range []string{"parked", "withui"} {
		if j, ok := info(id); !ok || j.Status != "pending" {
			t.Errorf("%s after nomad system gc: %+v (exists %v), want still pending", id, j, ok)
		}
	}
}
