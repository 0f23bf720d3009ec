// Package auth is the end-to-end suite of the authenticated impact API on
// a real Nomad agent with ACLs enabled. It is skipped unless a `nomad`
// binary is on PATH.
//
// One Nomad agent (server + client, ACLs bootstrapped) loads impact-exec
// pointed at an `impact agent` that runs with a token of
// example/acl/impact-scheduler.policy.hcl. Then:
//
//  1. a 2-member impact-exec gang whose task has the "impact" identity
//     block rendezvouses through the agent with the workload identities
//     Nomad signed: both members start with RANK 0 and 1 of WORLD_SIZE 2;
//  2. a task without the identity block fails at the barrier, and its
//     task event says which identity block to add;
//  3. the agent's API refuses curl-style requests with no token, a bogus
//     token and a token of another namespace (queue filtered, explain and
//     gang stop refused), and a read-only token may read but not stop;
//  4. `impact queue` with the operator's (management) token lists the
//     managed job (and fails without a token); stopping the gang with it
//     works and its members end.
package auth

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/e2e/internal/nomadagent"
)

var eventually = nomadagent.Eventually

type allocStub struct {
	ID           string
	ClientStatus string
	TaskStates   map[string]struct {
		State  string
		Failed bool
		Events []struct {
			Type           string
			DisplayMessage string
		}
	}
}

func gangJob(name string, withIdentity bool) string {
	identity := ""
	if withIdentity {
		identity = `
      identity {
        name = "impact"
        aud  = ["impact"]
        file = true
        ttl  = "1h"
      }`
	}
	return fmt.Sprintf(`
job %q {
  type = "batch"
  group "workers" {
    count = 2
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "trainer" {
      driver = "impact-exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"RANK=$RANK WORLD_SIZE=$WORLD_SIZE MASTER=$MASTER_ADDR:$MASTER_PORT\"; sleep 300"]
        gang {
          size    = 2
          timeout = "1m"
        }
      }%s
      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
`, name, identity)
}

// call does one HTTP request of the agent's API with token ("" none).
func call(method, url, token, body string) (int, string) {
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("X-Nomad-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func TestAuthenticatedAPIOnRealNomad(t *testing.T) {
	nomadagent.Binary(t) // skip before building anything
	bins := t.TempDir()
	exe := nomadagent.ImpactBinary(t, bins, "plugins/impact-exec", "github.com/impact-sched/nomad-impact/cmd/impact-exec")
	impact := nomadagent.ImpactBinary(t, bins, "impact", "github.com/impact-sched/nomad-impact/cmd/impact")
	apiURL := fmt.Sprintf("http://127.0.0.1:%d", nomadagent.FreePorts(t, 1)[0])
	a := nomadagent.Start(t, nomadagent.Config{
		Prefix: "impact-e2e-auth-", ACL: true, LogLevel: "INFO",
		Plugins: map[string]string{"impact-exec": exe},
		Extra: fmt.Sprintf(`
plugin "impact-exec" {
  config {
    rendezvous_addr    = %q
    heartbeat_interval = "1s"
  }
}
`, apiURL),
	})
	t.Cleanup(func() { killTasks(a.Dir) })
	nomad := func(args ...string) string {
		t.Helper()
		out, err := a.CLI(args...)
		if err != nil {
			t.Fatalf("nomad %v: %v\n%s", args, err, out)
		}
		return out
	}
	token := func(name string, policies ...string) string {
		t.Helper()
		args := []string{"acl", "token", "create", "-name", name, "-json"}
		for _, p := range policies {
			args = append(args, "-policy", p)
		}
		var tok struct{ SecretID string }
		if err := json.Unmarshal([]byte(nomad(args...)), &tok); err != nil || tok.SecretID == "" {
			t.Fatalf("token %s: %v", name, err)
		}
		return tok.SecretID
	}
	policyFile := func(name, rules string) string {
		p := filepath.Join(a.Dir, name+".hcl")
		if err := os.WriteFile(p, []byte(rules), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	root := nomadagent.RepoRoot()
	nomad("acl", "policy", "apply", "impact-scheduler", filepath.Join(root, "example", "acl", "impact-scheduler.policy.hcl"))
	// A second namespace exists: the agent's event stream (namespace "*")
	// needs read-job in it too, which the example policy's namespace "*"
	// block grants (without it Nomad refuses the stream and the agent sees
	// no job at all).
	nomad("namespace", "apply", "-description", "another team", "other")
	nomad("acl", "policy", "apply", "other-team", policyFile("other", `namespace "other" { capabilities = ["read-job", "submit-job"] }`))
	nomad("acl", "policy", "apply", "reader", policyFile("reader", `namespace "default" { capabilities = ["read-job"] }`))
	schedTok, otherTok, readerTok := token("impact-scheduler", "impact-scheduler"), token("other", "other-team"), token("reader", "reader")

	// The impact agent, with the scheduler's token only.
	if err := os.WriteFile(filepath.Join(a.Dir, "policy.hcl"), []byte("default_tier = \"normal\"\ndefault_project = \"default\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgPath := nomadagent.WriteImpactConfig(t, a.Dir, nomadagent.ImpactConfig{
		Name: "e2e-auth", Policy: "policy.hcl", NomadAddr: a.Addr, Listen: strings.TrimPrefix(apiURL, "http://"),
	})
	agent := nomadagent.StartProcess(t, "impact agent", []string{"NOMAD_TOKEN=" + schedTok}, impact, "agent", "-config", cfgPath)
	eventually(t, 60*time.Second, "impact agent leading", func() (bool, string) {
		code, body := call("GET", apiURL+"/v1/health", "", "")
		return code == 200 && strings.Contains(body, `"leader": true`), fmt.Sprintf("%d %s", code, body)
	})
	a.WaitNode(90*time.Second, "impact-exec healthy", func(n nomadagent.Node) (bool, string) {
		d := n.Drivers["impact-exec"]
		return d.Healthy, fmt.Sprintf("%+v", d)
	})

	run := func(name, hcl string) {
		p := filepath.Join(a.Dir, name+".nomad.hcl")
		if err := os.WriteFile(p, []byte(hcl), 0o644); err != nil {
			t.Fatal(err)
		}
		nomad("job", "run", "-detach", p)
	}
	allocs := func(job string) []allocStub {
		var out []allocStub
		_ = a.Get("/v1/job/"+job+"/allocations", &out)
		return out
	}
	logs := func(id string) string {
		var s string
		_ = a.Get("/v1/client/fs/logs/"+id+"?task=trainer&type=stdout&plain=true", &s)
		return s
	}

	// 1. The gang rendezvouses with real workload identities.
	run("train", gangJob("train", true))
	eventually(t, 120*time.Second, "both members started with their ranks", func() (bool, string) {
		as := allocs("train")
		ranks := map[string]bool{}
		for _, al := range as {
			l := logs(al.ID)
			for _, r := range []string{"RANK=0 WORLD_SIZE=2", "RANK=1 WORLD_SIZE=2"} {
				if strings.Contains(l, r) {
					ranks[r] = true
				}
			}
		}
		return len(as) == 2 && len(ranks) == 2, fmt.Sprintf("%d allocs, ranks %v, %+v", len(as), ranks, as)
	})
	for _, al := range allocs("train") {
		t.Logf("member %s: %s", al.ID[:8], strings.TrimSpace(logs(al.ID)))
	}

	// 2. Without the identity block the member is refused, and says why.
	run("noid", gangJob("noid", false))
	eventually(t, 90*time.Second, "a member without identity fails at the barrier, naming the identity block", func() (bool, string) {
		for _, al := range allocs("noid") {
			for _, ev := range al.TaskStates["trainer"].Events {
				if strings.Contains(ev.DisplayMessage, `identity { name = "impact" aud = ["impact"] file = true ttl = "1h" }`) {
					t.Logf("task event: %s", ev.DisplayMessage)
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("%+v", allocs("noid"))
	})
	nomad("job", "stop", "-purge", "-detach", "noid")

	// A job the scheduler manages, for the queue: it asks for a GPU this
	// cluster does not have, so it stays waiting.
	run("parked", `
job "parked" {
  type      = "batch"
  node_pool = "impact-queue"
  meta {
    impact_tier = "normal"
  }
  group "g" {
    task "t" {
      driver = "impact-exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "sleep 300"]
        gang {
          enabled = false
        }
      }
      resources {
        cpu    = 50
        memory = 32
        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}
`)
	eventually(t, 60*time.Second, "the managed job in the queue", func() (bool, string) {
		code, body := call("GET", apiURL+"/v1/queue", readerTok, "")
		return code == 200 && strings.Contains(body, `"job": "parked"`), fmt.Sprintf("%d %s", code, body)
	})

	// 3. Curl-style requests of the API.
	for _, tc := range []struct {
		what, method, path, token, body string
		code                            int
		want                            string
	}{
		{"queue without a token", "GET", "/v1/queue", "", "", 401, "missing Nomad ACL token"},
		{"queue with a bogus token", "GET", "/v1/queue", "11111111-2222-3333-4444-555555555555", "", 401, "does not accept the ACL token"},
		{"explain without a token", "GET", "/v1/explain/train?namespace=default", "", "", 401, "missing Nomad ACL token"},
		{"explain with another namespace's token", "GET", "/v1/explain/train?namespace=default", otherTok, "", 403, `may not read-job in namespace \"default\"`},
		{"stop without a token", "PUT", "/v1/gang/default:train/stop", "", `{"reason":"mine now"}`, 401, "missing Nomad ACL token"},
		{"stop with a bogus token", "PUT", "/v1/gang/default:train/stop", "11111111-2222-3333-4444-555555555555", `{"reason":"mine now"}`, 401, "does not accept the ACL token"},
		{"stop with another namespace's token", "PUT", "/v1/gang/default:train/stop", otherTok, `{"reason":"mine now"}`, 403, `may not submit-job in namespace \"default\"`},
		{"stop with a read-only token", "PUT", "/v1/gang/default:train/stop", readerTok, `{"reason":"mine now"}`, 403, `may not submit-job in namespace \"default\"`},
		{"forged join without an identity", "PUT", "/v1/gang/default:train/members/x.trainer", "", `{"size":2,"job_id":"train","alloc_id":"x","task":"trainer","node_id":"n","addr":"10.9.9.9","port":1}`, 401, "missing workload identity"},
		{"forged join with an ACL token", "PUT", "/v1/gang/default:train/members/x.trainer", a.Token, `{"size":2,"job_id":"train","alloc_id":"x","task":"trainer","node_id":"n","addr":"10.9.9.9","port":1}`, 401, "not an ACL token"},
		{"gang read with the reader's token", "GET", "/v1/gang/default:train", readerTok, "", 200, `"state": "ready"`},
		{"gang list with another namespace's token", "GET", "/v1/gang/", otherTok, "", 200, "[]"},
		{"health without a token", "GET", "/v1/health", "", "", 200, `"status"`},
		// Allowed by Nomad, so past authorization: the probes read real Nomad's answers right.
		{"explain with the reader's token", "GET", "/v1/explain/parked?namespace=default", readerTok, "", 200, `"job": "parked"`},
		{"stop of an unknown gang of its own namespace", "PUT", "/v1/gang/other:ghost/stop", otherTok, `{"reason":"x"}`, 404, "not found"},
	} {
		code, body := call(tc.method, apiURL+tc.path, tc.token, tc.body)
		if code != tc.code || !strings.Contains(strings.ReplaceAll(body, `":"`, `": "`), tc.want) {
			t.Errorf("%s: HTTP %d %s\n  want %d containing %s", tc.what, code, body, tc.code, tc.want)
		}
	}
	// Another namespace's token sees none of default's jobs.
	if code, body := call("GET", apiURL+"/v1/queue", otherTok, ""); code != 200 || strings.Contains(body, `"job": "parked"`) {
		t.Errorf("queue with another namespace's token: %d %s", code, body)
	}

	// 4. The operator's token: impact queue works, and stop is allowed.
	eventually(t, 30*time.Second, "impact queue with the operator's token", func() (bool, string) {
		cmd := exec.Command(impact, "queue", "-address", apiURL)
		cmd.Env = append(os.Environ(), "NOMAD_TOKEN="+a.Token)
		out, err := cmd.CombinedOutput()
		if err == nil && strings.Contains(string(out), "parked") {
			t.Logf("impact queue (operator's token):\n%s", out)
			return true, ""
		}
		return false, fmt.Sprintf("%v %s", err, out)
	})
	cmd := exec.Command(impact, "queue", "-address", apiURL)
	cmd.Env = append(os.Environ(), "NOMAD_TOKEN=")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "401") {
		t.Errorf("impact queue without a token: %v %s", err, out)
	}
	if code, body := call("PUT", apiURL+"/v1/gang/default:train/stop", a.Token, `{"reason":"operator"}`); code != 200 || !strings.Contains(body, `"stopping"`) {
		t.Errorf("operator stop: %d %s", code, body)
	}
	eventually(t, 60*time.Second, "the stopped gang's members end", func() (bool, string) {
		as := allocs("train")
		done := 0
		for _, al := range as {
			if al.ClientStatus != "running" && al.ClientStatus != "pending" {
				done++
			}
		}
		return done == len(as), fmt.Sprintf("%+v", as)
	})
	agent.Stop()
}

// killTasks ends the supervisors and commands impact-exec left running, by
// the pids in their status files.
func killTasks(dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "data", "alloc", "*", "*", ".impact-exec", "*", "status.json"))
	for _, f := range files {
		var st struct {
			Phase         string `json:"phase"`
			SupervisorPID int    `json:"supervisor_pid"`
			ChildPID      int    `json:"child_pid"`
		}
		if b, err := os.ReadFile(f); err != nil || json.Unmarshal(b, &st) != nil || st.Phase == "exited" {
			continue
		}
		if st.ChildPID > 0 {
			_ = syscall.Kill(-st.ChildPID, syscall.SIGKILL)
		}
		if st.SupervisorPID > 0 {
			_ = syscall.Kill(st.SupervisorPID, syscall.SIGKILL)
		}
	}
}
