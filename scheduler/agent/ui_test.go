package agent

import (
	"html/template"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

func fetch(t *testing.T, method, url string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestUIPages(t *testing.T) {
	v := sampleView()
	a := v.explain["default/train-a"]
	a.Summary = "Waiting for 8 free GPUs (first in line)."
	a.Reason = "needs 8 GPUs, 0 free; preempting eligible gangs would not make room"
	a.History = []agentapi.Event{{At: a.GeneratedAt.Add(-time.Minute), State: "waiting", Decision: "wait", Summary: a.Summary}}
	ex := *a.Engine
	ex.Rejected = map[string]int{"fewer than 8 free GPUs": 2}
	ex.ReservedUntil = a.GeneratedAt.Add(time.Hour)
	ex.Victims = []string{"default/sweep"}
	a.Engine = &ex
	a.WalltimeSeconds, a.ProgressSeconds = 6*3600, 4*3600
	v.explain["default/train-a"] = a
	v.queue.Jobs[0].Summary = a.Summary
	v.queue.Cluster.WaitingJobs = 1
	// A name that must be escaped, in a namespace of its own.
	x := agentapi.Explanation{Decision: "wait"}
	x.Namespace, x.Job, x.State, x.Summary = "ml team", "<script>alert(1)</script>", agentapi.StateInvalid, "Cannot be scheduled as written: fix its impact_* meta and submit it again."
	x.Errors = []string{`impact_tier: unknown tier "urgnet"`}
	v.explain["ml team/"+x.Job] = x
	v.queue.Jobs = append(v.queue.Jobs, x.Entry)
	srv, _ := newTestServer(t, v, HandlerOptions{NomadAddress: "http://127.0.0.1:4646/"})

	code, hdr, body := fetch(t, "GET", srv.URL+"/ui/")
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") {
		t.Fatalf("queue page: HTTP %d %s", code, hdr.Get("Content-Type"))
	}
	for _, want := range []string{
		`<a href="/ui/job/default/train-a">train-a</a>`,
		`<a href="/ui/job/default/eval%2Fb">eval/b</a>`,
		"Waiting for 8 free GPUs (first in line).",
		`<span class="state waiting">waiting</span>`,
		"1m30s",
		`<meta http-equiv="refresh" content="10">`,
		"&lt;script&gt;alert(1)&lt;/script&gt;",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("queue page lacks %q", want)
		}
	}
	if strings.Contains(body, "<script>") {
		t.Errorf("queue page carries an unescaped job name")
	}

	code, _, body = fetch(t, "GET", srv.URL+"/ui/job/default/train-a")
	if code != 200 {
		t.Fatalf("job page: HTTP %d", code)
	}
	for _, want := range []string{
		`data-test="state">waiting<`,
		`data-test="summary">Waiting for 8 free GPUs (first in line).<`,
		`data-test="position">1st of 1 waiting<`,
		"<li>needs 8 GPUs, 0 free</li><li>preempting eligible gangs would not make room</li>",
		`<td>fair_share</td><td class="num">&#43;2.00</td><td>` + template.HTMLEscapeString(termMeaning["fair_share"]),
		`data-test="score">12.50<`,
		`data-test="history"`,
		`data-test="status">waiting<`,
		`data-test="reserved-until">2026-11-30T09:00:00Z<`,
		`<td>fewer than 8 free GPUs</td><td class="num">2</td>`,
		`data-test="victims">default/sweep<`,
		`data-test="run">6h00m (impact_walltime), 4h00m of it saved by earlier runs (impact_progress): expected to need 2h00m from its next start<`,
		`href="/v1/explain/train-a?namespace=default"`,
		`href="http://127.0.0.1:4646/ui/jobs/train-a@default"`,
		`data-test="planned">Planned start: By 2026-11-30T09:00:00Z: GPUs are reserved for it`,
		`data-test="nomad-queue"`,
		`href="http://127.0.0.1:4646/ui/jobs?filter=NodePool&#43;%3D%3D&#43;%22impact-queue%22"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("job page lacks %q", want)
		}
	}
	code, _, body = fetch(t, "GET", srv.URL+"/ui/job/default/eval%2Fb")
	if code != 200 || !strings.Contains(body, `data-test="placement"`) || !strings.Contains(body, "<td>n1</td>") {
		t.Errorf("running job page: HTTP %d", code)
	}
	if !strings.Contains(body, `data-test="gpus"`) || !strings.Contains(body, "<td>g</td><td>n1</td><td>GPU-a, GPU-b</td><td>0, 1</td>") {
		t.Errorf("running job page lacks its pinned GPUs and islands:\n%s", body)
	}
	if strings.Contains(body, `data-test="run"`) {
		t.Errorf("a job that gives no walltime and saved nothing has a Run row")
	}
	code, _, body = fetch(t, "GET", srv.URL+JobPagePath("ml team", x.Job))
	if code != 200 || !strings.Contains(body, `data-test="errors"`) || strings.Contains(body, "<script>") {
		t.Errorf("invalid job page: HTTP %d, escaped %v", code, !strings.Contains(body, "<script>"))
	}
	// Issue 41: an invalid job has no place in the queue and no score
	// table, just what is wrong, and the headline says it never starts.
	for _, unwanted := range []string{`data-test="position"`, `data-test="score"`, "Impact score"} {
		if strings.Contains(body, unwanted) {
			t.Errorf("invalid job page shows %q", unwanted)
		}
	}
	if !strings.Contains(body, `data-test="planned">Planned start: Never, as written`) {
		t.Errorf("invalid job page does not say it never starts as written")
	}

	for _, tc := range []struct {
		method, path string
		code         int
		want         string
	}{
		{"GET", "/ui/job/default/nope", 404, "not managed by the impact scheduler"},
		{"GET", "/ui/job/default", 404, "want /ui/job/&lt;namespace&gt;/&lt;job&gt;"},
		{"GET", "/ui/job/default/a/b", 404, "want /ui/job/"},
		{"GET", "/ui/other", 404, "No such page"},
		{"POST", "/ui/", 405, "not allowed"},
		{"GET", "/ui", 301, ""},
	} {
		code, _, body := fetch(t, tc.method, srv.URL+tc.path)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s: HTTP %d %q, want %d containing %q", tc.method, tc.path, code, body, tc.code, tc.want)
		}
	}
}

func TestReasonDetails(t *testing.T) {
	r := `needs 8 GPUs, 0 free in pool "default"; GPUs reserved (time unknown) (fewer than 4 free GPUs: 1 node(s); pool has 0 free GPUs in all: 1 node(s))`
	got := reasonDetails(r)
	want := []string{`needs 8 GPUs, 0 free in pool "default"`, `GPUs reserved (time unknown) (fewer than 4 free GPUs: 1 node(s); pool has 0 free GPUs in all: 1 node(s))`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("reasonDetails = %q, want %q", got, want)
	}
	if got := reasonDetails(""); len(got) != 0 {
		t.Errorf("reasonDetails of nothing = %q", got)
	}
}

// The job page's headline says when the job is expected to start, or why
// that is not known (issue 41).
func TestPlannedStart(t *testing.T) {
	at := time.Date(2026, 12, 4, 18, 0, 0, 0, time.UTC)
	w := func(status engine.Status, reason string, until time.Time) agentapi.Explanation {
		e := agentapi.Explanation{Engine: &engine.Explanation{Status: status, ReservedUntil: until}}
		e.State, e.Reason = agentapi.StateWaiting, reason
		return e
	}
	invalid := agentapi.Explanation{}
	invalid.State = agentapi.StateInvalid
	running := agentapi.Explanation{}
	running.State = agentapi.StateRunning
	for _, tc := range []struct {
		name string
		e    agentapi.Explanation
		want string
	}{
		{"reserved with a time", w(engine.StatusReserved, "needs 8 GPUs, 0 free", at), "By 2026-12-04T18:00:00Z"},
		{"reserved by an estimate", func() agentapi.Explanation {
			e := w(engine.StatusReserved, "needs 8 GPUs, 0 free", at)
			e.Engine.ReservedUntilEstimated = true
			return e
		}(), "By about 2026-12-04T18:00:00Z: GPUs are reserved for it, and the running jobs holding them are expected to end by then (estimated"},
		{"reserved counting on preemption", func() agentapi.Explanation {
			e := w(engine.StatusReserved, "needs 8 GPUs, 0 free", at)
			e.Engine.ReservedPreempts = true
			return e
		}(), "By 2026-12-04T18:00:00Z: GPUs are reserved for it, and the running jobs holding them end (their impact_walltime, less any impact_progress) or may be preempted by it by then."},
		{"reserved without", w(engine.StatusReserved, "needs 8 GPUs, 0 free", time.Time{}), "Unknown: GPUs are reserved for it, but the running jobs holding them give no impact_walltime."},
		{"preempting", w(engine.StatusPreempting, "preempting 1 gang(s): default/sweep", time.Time{}), "As soon as the gangs stopping for it have stopped"},
		{"may preempt later", func() agentapi.Explanation {
			// Read from the structured fields, not the reason's words.
			e := w(engine.StatusWaiting, `needs 4 GPUs, 0 free in pool "gpu"`, time.Time{})
			e.Engine.CouldPreempt, e.Engine.CouldPreemptFrom = "default/sweep", time.Date(2026, 12, 4, 16, 17, 38, 0, time.UTC)
			return e
		}(), "From 2026-12-04T16:17:38Z, when it may preempt default/sweep"},
		{"waiting", w(engine.StatusWaiting, "needs 8 GPUs, 0 free", time.Time{}), "Unknown: it waits for its turn"},
		{"invalid", invalid, "Never, as written"},
		{"running", running, ""},
	} {
		if got := plannedStart(tc.e); !strings.HasPrefix(got, tc.want) || (tc.want == "" && got != "") {
			t.Errorf("%s: %q, want it to start %q", tc.name, got, tc.want)
		}
	}
}
