package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
)

// putVar writes a Variable straight into the fake, as a user or an older
// agent would have.
func (c *fakeCluster) putVar(path string, items map[string]string) {
	c.t.Helper()
	var b strings.Builder
	b.WriteString(`{"Items":{`)
	first := true
	for k, v := range items {
		if !first {
			b.WriteString(",")
		}
		first = false
		fmt.Fprintf(&b, "%q:%q", k, v)
	}
	b.WriteString("}}")
	req, _ := http.NewRequest(http.MethodPut, c.fake.URL()+"/v1/var/"+path, strings.NewReader(b.String()))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		c.t.Fatalf("put %s: HTTP %d", path, resp.StatusCode)
	}
}

func (c *fakeCluster) stopJob(id string) {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, c.fake.URL()+"/v1/job/"+id, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		c.t.Fatalf("stop %s: HTTP %d", id, resp.StatusCode)
	}
}

func getPage(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The explanation Variable follows the job through its states in the
// words of `impact queue` (waiting -> running), links the job's page, is
// deleted when the job leaves (stopped, completed), and a leader sweeps the
// explanations of jobs that left before it led, but never a Variable it
// did not write.
func TestFakeNomadExplanationVariableLifecycle(t *testing.T) {
	c := newFakeCluster(t, 1, 1, 4)
	c.putVar("nomad/jobs/ghost/impact", map[string]string{"state": "waiting", "written_by": "impact agent"})
	c.putVar("nomad/jobs/users/impact", map[string]string{"password": "hunter2"})
	s := c.start("a1")
	eventuallyT(t, 5*time.Second, "leader", func() (bool, string) { return s.svc.Agent.IsLeader(), "" })
	eventuallyT(t, 10*time.Second, "stale explanation swept", func() (bool, string) {
		return c.fake.Variable("nomad/jobs/ghost/impact") == nil, fmt.Sprint(c.fake.Variable("nomad/jobs/ghost/impact"))
	})
	if v := c.fake.Variable("nomad/jobs/users/impact"); v["password"] != "hunter2" {
		t.Errorf("a user's Variable was touched: %v", v)
	}

	// Two jobs of 4 GPUs on one 4-GPU node: one runs, one waits.
	c.submit("first", map[string]string{"impact_tier": "high"}, 1, 4)
	eventuallyT(t, 10*time.Second, "first running", func() (bool, string) { return c.running("first") == 1, "" })
	c.submit("second", map[string]string{"impact_tier": "normal"}, 1, 4)
	base := "http://" + s.svc.Addr()
	eventuallyT(t, 10*time.Second, "variables in queue words", func() (bool, string) {
		f, w := c.fake.Variable("nomad/jobs/first/impact"), c.fake.Variable("nomad/jobs/second/impact")
		ok := f["state"] == agentapi.StateRunning && strings.HasPrefix(f["nodes"], "g: ") && strings.HasPrefix(f["summary"], "Running") &&
			w["state"] == agentapi.StateWaiting && w["position"] == "1" && w["summary"] == "Waiting for 4 free GPUs (first in line)." &&
			w["page"] == base+"/ui/job/default/second" && w["score"] != "" && !strings.Contains(w["score"], ".")
		return ok, fmt.Sprintf("first=%v second=%v", f, w)
	})
	e, err := s.api.Explain(context.Background(), "", "second")
	if err != nil {
		t.Fatal(err)
	}
	if len(e.History) == 0 || e.History[len(e.History)-1].State != agentapi.StateWaiting {
		t.Errorf("history of second = %+v, want it to end waiting", e.History)
	}
	code, page := getPage(t, base+"/ui/job/default/second")
	if code != 200 || !strings.Contains(page, `data-test="summary">`+e.Summary+`<`) || !strings.Contains(page, ">waiting<") {
		t.Errorf("job page: HTTP %d\n%s", code, page)
	}

	// The running job is stopped: its Variable goes; the waiting one is
	// admitted and its Variable says so.
	c.stopJob("first")
	eventuallyT(t, 10*time.Second, "stopped job's variable deleted, second running", func() (bool, string) {
		f, w := c.fake.Variable("nomad/jobs/first/impact"), c.fake.Variable("nomad/jobs/second/impact")
		return f == nil && w["state"] == agentapi.StateRunning, fmt.Sprintf("first=%v second=%v", f, w)
	})
	e, _ = s.api.Explain(context.Background(), "", "second")
	var states []string
	for _, h := range e.History {
		states = append(states, h.State)
	}
	if got := strings.Join(states, ","); !strings.HasPrefix(got, "waiting") || !strings.HasSuffix(got, "running") {
		t.Errorf("history states of second = %s, want waiting first and running last", got)
	}
	if code, _ := getPage(t, base+"/ui/job/default/first"); code != 404 {
		t.Errorf("page of the stopped job: HTTP %d, want 404", code)
	}

	// The second completes: its Variable goes too.
	c.finish("second")
	eventuallyT(t, 10*time.Second, "completed job's variable deleted", func() (bool, string) {
		w := c.fake.Variable("nomad/jobs/second/impact")
		return w == nil, fmt.Sprint(w)
	})
	s.stop()
}
