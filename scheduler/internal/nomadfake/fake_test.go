package nomadfake

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/hashicorp/nomad/api"
)

const nodeID = "729c186e-6352-f638-c46c-f2c7bc67dd64"

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("read fixture: %v", err)
	}
	return b
}

// fixtureStatus splits the *.txt fixtures ("body\nHTTP nnn").
func fixtureStatus(t *testing.T, name string) (string, int) {
	t.Helper()
	b := strings.TrimSpace(string(fixture(t, name)))
	i := strings.LastIndex(b, "\nHTTP ")
	code, err := strconv.Atoi(strings.TrimSpace(b[i+6:]))
	if err != nil {
		t.Fatalf("fixture %s: %v", name, err)
	}
	return strings.TrimSpace(b[:i]), code
}

// missingKeys lists the struct-like keys (capitalised, as Nomad's are) of
// want that got lacks, recursively; data maps (lower-case keys such as
// meta, attributes, task names) are not compared.
func missingKeys(want, got any, path string) []string {
	var out []string
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			if got == nil {
				return nil
			}
			return []string{path + " (not an object)"}
		}
		for k, wv := range w {
			if k == "" || !unicode.IsUpper(rune(k[0])) {
				continue
			}
			gv, ok := g[k]
			if !ok {
				out = append(out, path+"."+k)
				continue
			}
			out = append(out, missingKeys(wv, gv, path+"."+k)...)
		}
	case []any:
		g, ok := got.([]any)
		if ok && len(w) > 0 && len(g) > 0 {
			out = append(out, missingKeys(w[0], g[0], path+"[0]")...)
		}
	}
	return out
}

func sameShape(t *testing.T, fixtureName string, got []byte) {
	t.Helper()
	var w, g any
	if err := json.Unmarshal(fixture(t, fixtureName), &w); err != nil {
		t.Fatalf("fixture %s: %v", fixtureName, err)
	}
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("fake answer for %s is not JSON: %v: %s", fixtureName, err, got)
	}
	if m := missingKeys(w, g, ""); len(m) > 0 {
		sort.Strings(m)
		t.Errorf("fake answer lacks keys of %s: %v", fixtureName, m)
	}
}

type rawResp struct {
	status int
	body   []byte
	header http.Header
}

func do(t *testing.T, method, url string, body any) rawResp {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return rawResp{status: resp.StatusCode, body: b, header: resp.Header}
}

func parkedJob(t *testing.T) *api.Job {
	var j api.Job
	if err := json.Unmarshal(fixture(t, "job-parked.json"), &j); err != nil {
		t.Fatal(err)
	}
	return &j
}

func realNode(t *testing.T) *api.Node {
	var n api.Node
	if err := json.Unmarshal(fixture(t, "node.json"), &n); err != nil {
		t.Fatal(err)
	}
	return &n
}

// setupParked reproduces step 1 of the recorded scenario.
func setupParked(t *testing.T) *Server {
	t.Helper()
	s := New(Options{HeartbeatInterval: 50 * time.Millisecond})
	t.Cleanup(s.Close)
	s.UpsertNode(realNode(t))
	r := do(t, "POST", s.URL()+"/v1/node/pools", api.NodePool{Name: "impact-queue", Description: "parking pool: jobs wait here until admitted"})
	if r.status != 200 {
		t.Fatalf("pool: %d %s", r.status, r.body)
	}
	r = do(t, "POST", s.URL()+"/v1/jobs", api.JobRegisterRequest{Job: parkedJob(t)})
	if r.status != 200 {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	sameShape(t, "register-response.json", r.body)
	return s
}

func TestParkedJobMatchesRecording(t *testing.T) {
	s := setupParked(t)
	r := do(t, "GET", s.URL()+"/v1/job/train-a", nil)
	sameShape(t, "job-parked.json", r.body)
	for _, h := range []string{"X-Nomad-Index", "X-Nomad-KnownLeader", "X-Nomad-LastContact"} {
		if r.header.Get(h) == "" {
			t.Errorf("missing header %s", h)
		}
	}
	var j api.Job
	_ = json.Unmarshal(r.body, &j)
	if *j.Status != "pending" || *j.NodePool != "impact-queue" {
		t.Errorf("parked job: status %s pool %s, want pending impact-queue", *j.Status, *j.NodePool)
	}

	r = do(t, "GET", s.URL()+"/v1/job/train-a/evaluations", nil)
	sameShape(t, "evals-parked.json", r.body)
	var evals []*api.Evaluation
	_ = json.Unmarshal(r.body, &evals)
	statuses := map[string]int{}
	for _, e := range evals {
		statuses[e.Status]++
		if e.Status == "blocked" {
			m := e.FailedTGAllocs["workers"]
			if m == nil || m.NodesInPool != 0 || m.NodesEvaluated != 0 || m.NodePool != "impact-queue" {
				t.Errorf("blocked eval metric = %+v, want 0 nodes in pool impact-queue", m)
			}
		}
	}
	if statuses["blocked"] != 1 || statuses["complete"] != 1 {
		t.Errorf("evaluation statuses = %v, want one complete and one blocked", statuses)
	}

	r = do(t, "GET", s.URL()+"/v1/job/train-a/summary", nil)
	sameShape(t, "summary-parked.json", r.body)
	var sum api.JobSummary
	_ = json.Unmarshal(r.body, &sum)
	if sum.Summary["workers"].Queued != 2 {
		t.Errorf("queued = %d, want 2", sum.Summary["workers"].Queued)
	}
	r = do(t, "GET", s.URL()+"/v1/jobs?meta=true", nil)
	sameShape(t, "jobs-list.json", r.body)
	if !strings.Contains(string(r.body), `"impact_tier":"high"`) {
		t.Errorf("jobs list with meta=true lacks meta: %s", r.body)
	}
	r = do(t, "GET", s.URL()+"/v1/jobs", nil)
	if strings.Contains(string(r.body), `impact_tier`) {
		t.Errorf("jobs list without meta=true shows meta")
	}
	sameShape(t, "nodes.json", do(t, "GET", s.URL()+"/v1/nodes", nil).body)
	sameShape(t, "node.json", do(t, "GET", s.URL()+"/v1/node/"+nodeID, nil).body)
	sameShape(t, "node-pools.json", do(t, "GET", s.URL()+"/v1/node/pools", nil).body)
	if len(s.Allocations("train-a")) != 0 {
		t.Errorf("parked job got allocations")
	}
}

func admitBody(t *testing.T, index uint64) []byte {
	var req map[string]any
	if err := json.Unmarshal(fixture(t, "admit-req.json"), &req); err != nil {
		t.Fatal(err)
	}
	req["JobModifyIndex"] = index
	b, _ := json.Marshal(req)
	return b
}

func TestAdmitSignalPreemptCycle(t *testing.T) {
	s := setupParked(t)
	jmi := *s.Job("train-a").JobModifyIndex

	// A stale index answers like the recording: HTTP 500 with the text.
	wantText, wantCode := fixtureStatus(t, "register-conflict-response.txt")
	r := do(t, "POST", s.URL()+"/v1/job/train-a", admitBody(t, jmi-1))
	if r.status != wantCode {
		t.Errorf("stale register: status %d, want %d", r.status, wantCode)
	}
	wantPrefix := strings.SplitN(wantText, " ", 4)[:3]
	if !strings.HasPrefix(string(r.body), strings.Join(wantPrefix, " ")) ||
		!strings.Contains(string(r.body), fmt.Sprintf("job exists with conflicting job modify index: %d", jmi)) {
		t.Errorf("stale register body %q, want like %q", r.body, wantText)
	}

	r = do(t, "POST", s.URL()+"/v1/job/train-a", admitBody(t, jmi))
	if r.status != 200 {
		t.Fatalf("admit: %d %s", r.status, r.body)
	}
	sameShape(t, "register-response.json", r.body)
	job := s.Job("train-a")
	if *job.Status != "running" || *job.Version != 1 || *job.NodePool != "default" {
		t.Errorf("admitted job status %s version %d pool %s", *job.Status, *job.Version, *job.NodePool)
	}
	sameShape(t, "job-admitted.json", do(t, "GET", s.URL()+"/v1/job/train-a", nil).body)
	r = do(t, "GET", s.URL()+"/v1/job/train-a/allocations", nil)
	sameShape(t, "allocs-running.json", r.body)
	allocs := s.Allocations("train-a")
	if len(allocs) != 2 {
		t.Fatalf("allocations = %d, want 2", len(allocs))
	}
	for _, a := range allocs {
		if a.ClientStatus != "running" || a.NodeID != nodeID {
			t.Errorf("alloc %s: %s on %s", a.Name, a.ClientStatus, a.NodeID)
		}
	}
	sameShape(t, "alloc-running.json", do(t, "GET", s.URL()+"/v1/allocation/"+allocs[0].ID, nil).body)

	// Checkpoint signal.
	r = do(t, "POST", s.URL()+"/v1/client/allocation/"+allocs[0].ID+"/signal", api.AllocSignalRequest{Signal: "SIGUSR1", Task: "trainer"})
	if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"Index":0}` {
		t.Errorf("signal answered %d %s, want 200 {\"Index\":0}", r.status, r.body)
	}
	if sg := s.Signals(); len(sg) != 1 || sg[0].Signal != "SIGUSR1" || sg[0].Task != "trainer" {
		t.Errorf("signals = %+v", sg)
	}

	// Park again (pins removed) then stop: allocations complete, job pending
	// with two queued.
	var park map[string]any
	_ = json.Unmarshal(fixture(t, "park-req.json"), &park)
	park["JobModifyIndex"] = *s.Job("train-a").JobModifyIndex
	r = do(t, "POST", s.URL()+"/v1/job/train-a", park)
	if r.status != 200 {
		t.Fatalf("park: %d %s", r.status, r.body)
	}
	for _, a := range s.Allocations("train-a") {
		if a.ClientStatus != "running" {
			t.Errorf("re-registering alone stopped %s (%s); Nomad leaves batch allocs running", a.Name, a.ClientStatus)
		}
	}
	for _, a := range allocs {
		r = do(t, "POST", s.URL()+"/v1/allocation/"+a.ID+"/stop", nil)
		if r.status != 200 {
			t.Fatalf("stop: %d %s", r.status, r.body)
		}
		sameShape(t, "alloc-stop-response.json", r.body)
	}
	sameShape(t, "allocs-after-preempt.json", do(t, "GET", s.URL()+"/v1/job/train-a/allocations", nil).body)
	for _, a := range s.Allocations("train-a") {
		if a.ClientStatus != "complete" || a.DesiredStatus != "stop" || a.DesiredDescription != "alloc is being migrated" {
			t.Errorf("after preempt %s: %s/%s %q", a.Name, a.ClientStatus, a.DesiredStatus, a.DesiredDescription)
		}
	}
	sameShape(t, "job-reparked.json", do(t, "GET", s.URL()+"/v1/job/train-a", nil).body)
	r = do(t, "GET", s.URL()+"/v1/job/train-a/summary", nil)
	sameShape(t, "summary-reparked.json", r.body)
	var sum api.JobSummary
	_ = json.Unmarshal(r.body, &sum)
	if g := sum.Summary["workers"]; g.Complete != 2 || g.Queued != 2 || g.Running != 0 {
		t.Errorf("summary after preempt = %+v, want Complete 2 Queued 2", g)
	}
	if st := *s.Job("train-a").Status; st != "pending" {
		t.Errorf("job status after preempt = %s, want pending", st)
	}
}

func TestVariablesAndLocks(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	u := s.URL() + "/v1/var/nomad/jobs/train-a/impact"
	r := do(t, "GET", u, nil)
	if r.status != 404 || string(r.body) != "variable not found" {
		t.Errorf("missing var: %d %q, want 404 \"variable not found\"", r.status, r.body)
	}
	items := map[string]string{"position": "1", "score": "812.5", "reason": "waiting"}
	r = do(t, "PUT", u, api.Variable{Path: "nomad/jobs/train-a/impact", Items: items})
	if r.status != 200 {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	sameShape(t, "var-put-response.json", r.body)
	r = do(t, "GET", u, nil)
	sameShape(t, "var-get.json", r.body)
	var v api.Variable
	_ = json.Unmarshal(r.body, &v)
	// CAS: a stale index conflicts with 409 and the current variable.
	r = do(t, "PUT", u+"?cas="+strconv.FormatUint(v.ModifyIndex-1, 10), api.Variable{Items: items})
	if r.status != 409 || !strings.Contains(string(r.body), `"Path":"nomad/jobs/train-a/impact"`) {
		t.Errorf("stale cas: %d %s", r.status, r.body)
	}
	r = do(t, "PUT", u+"?cas="+strconv.FormatUint(v.ModifyIndex, 10), api.Variable{Items: items})
	if r.status != 200 {
		t.Errorf("good cas: %d %s", r.status, r.body)
	}
	r = do(t, "GET", s.URL()+"/v1/vars?prefix=nomad/jobs", nil)
	sameShape(t, "vars-list.json", r.body)
	if strings.Contains(string(r.body), "Items") {
		t.Errorf("list carries items: %s", r.body)
	}

	lu := s.URL() + "/v1/var/impact/leader"
	acq := api.Variable{Path: "impact/leader", Items: map[string]string{"holder": "agent-1"}, Lock: &api.VariableLock{TTL: "15s", LockDelay: "2s"}}
	r = do(t, "PUT", lu+"?lock-acquire", acq)
	_, code := fixtureStatus(t, "lock-acquire-response.txt")
	if r.status != code {
		t.Fatalf("acquire: %d %s", r.status, r.body)
	}
	want, _ := fixtureStatus(t, "lock-acquire-response.txt")
	sameShapeStr(t, want, r.body)
	var held api.Variable
	_ = json.Unmarshal(r.body, &held)
	if held.Lock == nil || held.Lock.ID == "" {
		t.Fatalf("acquire gave no lock ID: %s", r.body)
	}
	r = do(t, "PUT", lu+"?lock-acquire", acq)
	wantConf, codeConf := fixtureStatus(t, "lock-acquire-conflict-response.txt")
	if r.status != codeConf {
		t.Errorf("second acquire: %d, want %d", r.status, codeConf)
	}
	sameShapeStr(t, wantConf, r.body)
	renew := api.Variable{Path: "impact/leader", Lock: &api.VariableLock{ID: held.Lock.ID}}
	r = do(t, "PUT", lu+"?lock-renew", renew)
	wantRenew, _ := fixtureStatus(t, "lock-renew-response.txt")
	if r.status != 200 {
		t.Errorf("renew: %d %s", r.status, r.body)
	}
	sameShapeStr(t, wantRenew, r.body)
	r = do(t, "PUT", lu+"?lock-renew", api.Variable{Path: "impact/leader", Lock: &api.VariableLock{ID: "not-mine"}})
	if r.status != 409 {
		t.Errorf("renew with a wrong ID: %d, want 409", r.status)
	}
	r = do(t, "PUT", lu+"?lock-release", renew)
	wantRel, _ := fixtureStatus(t, "lock-release-response.txt")
	if r.status != 200 {
		t.Errorf("release: %d %s", r.status, r.body)
	}
	sameShapeStr(t, wantRel, r.body)
	if r = do(t, "PUT", lu+"?lock-acquire", acq); r.status != 200 {
		t.Errorf("acquire after release: %d", r.status)
	}
}

func sameShapeStr(t *testing.T, want string, got []byte) {
	t.Helper()
	var w, g any
	_ = json.Unmarshal([]byte(want), &w)
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("not JSON: %s", got)
	}
	if m := missingKeys(w, g, ""); len(m) > 0 {
		t.Errorf("answer %s lacks keys %v of %s", got, m, want)
	}
	// The reverse, too: lock answers must not carry more than Nomad's.
	if m := missingKeys(g, w, ""); len(m) > 0 {
		t.Errorf("answer %s has keys %v that Nomad's %s lacks", got, m, want)
	}
}

type streamLine struct {
	Events []api.Event
	Index  uint64
}

func readStream(t *testing.T, url string, until func([]streamLine, int) bool) ([]streamLine, int) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var lines []streamLine
	heartbeats := 0
	done := make(chan struct{})
	timer := time.AfterFunc(5*time.Second, func() { resp.Body.Close(); close(done) })
	defer timer.Stop()
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "{}" {
			heartbeats++
		} else {
			var l streamLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("bad line %q: %v", sc.Text(), err)
			}
			lines = append(lines, l)
		}
		if until(lines, heartbeats) {
			return lines, heartbeats
		}
	}
	t.Fatalf("stream %s ended before condition (lines %d, heartbeats %d, last %+v)", url, len(lines), heartbeats, lines)
	return nil, 0
}

func TestEventStream(t *testing.T) {
	s := setupParked(t)
	jmi := *s.Job("train-a").JobModifyIndex
	if r := do(t, "POST", s.URL()+"/v1/job/train-a", admitBody(t, jmi)); r.status != 200 {
		t.Fatalf("admit: %s", r.body)
	}
	end := s.Index()
	lines, _ := readStream(t, s.URL()+"/v1/event/stream?index=0&topic=Job&topic=Evaluation&topic=Allocation&topic=Node",
		func(l []streamLine, _ int) bool { return len(l) > 0 && l[len(l)-1].Index >= end })
	seen := map[string]bool{}
	var last uint64
	split := false
	for _, l := range lines {
		if l.Index < last {
			t.Errorf("indexes going backwards: %d after %d", l.Index, last)
		}
		if l.Index == last && l.Events[0].Type == "JobRegistered" {
			split = true
		}
		last = l.Index
		for _, e := range l.Events {
			if e.Index != l.Index {
				t.Errorf("event index %d in line %d", e.Index, l.Index)
			}
			seen[string(e.Topic)+"/"+e.Type] = true
		}
	}
	if !split {
		t.Errorf("a registration's Job and Evaluation events came on one line; Nomad writes two with one index")
	}
	for _, want := range []string{"Job/JobRegistered", "Evaluation/JobRegistered", "Evaluation/EvaluationUpdated",
		"Allocation/PlanResult", "Job/PlanResult", "Allocation/AllocationUpdated", "Node/AllocationUpdated", "Node/NodeRegistration"} {
		if !seen[want] {
			t.Errorf("stream lacks %s (saw %v)", want, seen)
		}
	}
	// The recorded stream's events decode with the same client code.
	for _, l := range bytes.Split(fixture(t, "events.ndjson"), []byte("\n")) {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		var sl streamLine
		if err := json.Unmarshal(l, &sl); err != nil {
			t.Fatalf("recorded line: %v", err)
		}
	}

	// Resume after an index: only later events; topic filter by key.
	var mid uint64
	for _, l := range lines {
		if mid == 0 && l.Index > lines[len(lines)/2].Index && l.Events[0].Topic == "Allocation" {
			mid = l.Index
		}
	}
	resumed, _ := readStream(t, fmt.Sprintf("%s/v1/event/stream?index=%d&topic=Allocation", s.URL(), mid),
		func(l []streamLine, _ int) bool { return len(l) > 0 && l[len(l)-1].Index >= end })
	if resumed[0].Index != mid {
		t.Errorf("resume at %d started at %d; Nomad starts at the index given", mid, resumed[0].Index)
	}
	for _, l := range resumed {
		if l.Index < mid {
			t.Errorf("stream resumed at %d replayed index %d", mid, l.Index)
		}
		for _, e := range l.Events {
			if e.Topic != "Allocation" {
				t.Errorf("topic filter let %s through", e.Topic)
			}
		}
	}
	keyed, _ := readStream(t, s.URL()+"/v1/event/stream?index=0&topic=Job:train-a",
		func(l []streamLine, _ int) bool {
			return len(l) > 0 && l[len(l)-1].Index >= *s.Job("train-a").ModifyIndex
		})
	for _, l := range keyed {
		for _, e := range l.Events {
			if e.Topic != "Job" || e.Key != "train-a" {
				t.Errorf("key filter let %s/%s through", e.Topic, e.Key)
			}
		}
	}
	// An index beyond the latest starts at the latest event.
	beyond, _ := readStream(t, fmt.Sprintf("%s/v1/event/stream?index=%d", s.URL(), s.Index()+1000),
		func(l []streamLine, _ int) bool { return len(l) > 0 })
	if last := s.Events()[len(s.Events())-1].Index; beyond[0].Index != last {
		t.Errorf("index beyond the latest started at %d, want the latest %d", beyond[0].Index, last)
	}
	// Heartbeats on an idle stream.
	_, hb := readStream(t, fmt.Sprintf("%s/v1/event/stream?index=%d", s.URL(), s.Index()),
		func(_ []streamLine, hb int) bool { return hb >= 2 })
	if hb < 2 {
		t.Errorf("heartbeats = %d", hb)
	}
}

func TestBlockingQuery(t *testing.T) {
	s := setupParked(t)
	r := do(t, "GET", s.URL()+"/v1/jobs", nil)
	idx, _ := strconv.ParseUint(r.header.Get("X-Nomad-Index"), 10, 64)
	start := time.Now()
	r = do(t, "GET", fmt.Sprintf("%s/v1/jobs?index=%d&wait=100ms", s.URL(), idx), nil)
	if el := time.Since(start); el < 90*time.Millisecond {
		t.Errorf("blocking query returned after %v without a change", el)
	}
	done := make(chan rawResp, 1)
	go func() { done <- do(t, "GET", fmt.Sprintf("%s/v1/jobs?index=%d&wait=5s", s.URL(), idx), nil) }()
	time.Sleep(20 * time.Millisecond)
	if _, err := s.UpdateJob("train-a", func(j *api.Job) { j.Meta["impact_tier"] = "critical" }); err != nil {
		t.Fatal(err)
	}
	select {
	case r = <-done:
		n, _ := strconv.ParseUint(r.header.Get("X-Nomad-Index"), 10, 64)
		if n <= idx {
			t.Errorf("index after change %d <= %d", n, idx)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("blocking query did not return after a change")
	}
}

func TestFailNextAndRestart(t *testing.T) {
	s := setupParked(t)
	s.FailNext("GET", "/v1/jobs", 503, "No cluster leader")
	if r := do(t, "GET", s.URL()+"/v1/jobs", nil); r.status != 503 || string(r.body) != "No cluster leader" {
		t.Errorf("FailNext: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", s.URL()+"/v1/jobs", nil); r.status != 200 {
		t.Errorf("second request failed too: %d", r.status)
	}
	before := s.Index()
	s.Restart(realNode(t))
	if s.Index() >= before {
		t.Errorf("restart kept index %d >= %d", s.Index(), before)
	}
	if s.Job("train-a") != nil {
		t.Errorf("restart kept jobs")
	}
}

func TestGPUPlacementUsesOneDeviceGroup(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	one := int64(1)
	two := int64(2)
	s.UpsertNode(GPUNode("n1", "gpu1", "gpu", map[string][]string{
		"H100-island0": {"g0", "g1", "g2", "g3"},
		"H100-island1": {"g4", "g5", "g6", "g7"},
	}, map[string]map[string]*api.Attribute{
		"H100-island0": {"island": {IntVal: &one}},
		"H100-island1": {"island": {IntVal: &two}},
	}))
	cnt := uint64(4)
	w := int8(50)
	job := api.NewBatchJob("j", "j", "global", 50)
	job.NodePool = ptr("gpu")
	tg := api.NewTaskGroup("g", 1)
	task := api.NewTask("t", "raw_exec")
	task.Resources = &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: &cnt,
		Affinities: []*api.Affinity{{LTarget: "${device.attr.island}", RTarget: "2", Operand: "=", Weight: &w}}}}}
	tg.AddTask(task)
	job.AddTaskGroup(tg)
	if r := do(t, "POST", s.URL()+"/v1/jobs", api.JobRegisterRequest{Job: job}); r.status != 200 {
		t.Fatalf("register: %s", r.body)
	}
	as := s.Allocations("j")
	if len(as) != 1 {
		t.Fatalf("allocs = %d", len(as))
	}
	devs := as[0].AllocatedResources.Tasks["t"].Devices
	if len(devs) != 1 || devs[0].Name != "H100-island1" || len(devs[0].DeviceIDs) != 4 {
		t.Errorf("devices = %+v, want 4 of island1 (affinity)", devs[0])
	}
	// A 5-GPU ask never spans groups.
	cnt5 := uint64(5)
	job2 := api.NewBatchJob("k", "k", "global", 50)
	job2.NodePool = ptr("gpu")
	tg2 := api.NewTaskGroup("g", 1)
	t2 := api.NewTask("t", "raw_exec")
	t2.Resources = &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: &cnt5}}}
	tg2.AddTask(t2)
	job2.AddTaskGroup(tg2)
	do(t, "POST", s.URL()+"/v1/jobs", api.JobRegisterRequest{Job: job2})
	if n := len(s.Allocations("k")); n != 0 {
		t.Errorf("5-GPU ask placed across groups (%d allocs)", n)
	}
	if q := s.Queued("k")["g"]; q != 1 {
		t.Errorf("queued = %d, want 1", q)
	}
}

func ptr[T any](v T) *T { return &v }

func TestPlanEndpoint(t *testing.T) {
	s := setupParked(t)
	c, err := api.NewClient(&api.Config{Address: s.URL()})
	if err != nil {
		t.Fatal(err)
	}
	parked := parkedJob(t)
	resp, _, err := c.Jobs().Plan(parked, false, nil)
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	if m := resp.FailedTGAllocs["workers"]; m == nil || m.NodesInPool != 0 {
		t.Errorf("plan of a parked job: failed = %+v, want workers failing with 0 nodes in pool", resp.FailedTGAllocs)
	}
	var req api.JobRegisterRequest
	_ = json.Unmarshal(admitBody(t, 0), &req)
	resp, _, err = c.Jobs().Plan(req.Job, false, nil)
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	if len(resp.FailedTGAllocs) != 0 || resp.Annotations.DesiredTGUpdates["workers"].Place != 2 {
		t.Errorf("plan of the pinned job: failed %v, place %d", resp.FailedTGAllocs, resp.Annotations.DesiredTGUpdates["workers"].Place)
	}
	if resp.JobModifyIndex != *s.Job("train-a").JobModifyIndex {
		t.Errorf("plan JobModifyIndex = %d", resp.JobModifyIndex)
	}
	// Planning changes nothing.
	if len(s.Allocations("train-a")) != 0 || *s.Job("train-a").NodePool != "impact-queue" {
		t.Errorf("plan changed state")
	}
}

// AfterNext runs its hook once, for the first successful request that
// matches method, path and body, after the write took effect and before
// the answer: what a test needs to stand for a client dying just after a
// write.
func TestAfterNext(t *testing.T) {
	s := New(Options{})
	t.Cleanup(s.Close)
	var seen []string
	s.AfterNext("PUT", "/v1/var/a/", "second", func() { seen = append(seen, s.Variable("a/x")["v"]) })
	put := func(v string) {
		t.Helper()
		body := fmt.Sprintf(`{"Path":"a/x","Items":{"v":%q}}`, v)
		if r := do(t, "PUT", s.URL()+"/v1/var/a/x", []byte(body)); r.status != 200 {
			t.Fatalf("put %s: %d %s", v, r.status, r.body)
		}
	}
	put("first")  // body does not match
	put("second") // runs the hook: the write is already visible
	put("second") // the hook ran once
	if len(seen) != 1 || seen[0] != "second" {
		t.Fatalf("hook saw %q, want one call that sees the matching write done", seen)
	}
}
