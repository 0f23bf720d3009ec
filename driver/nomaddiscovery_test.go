package driver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/driver/internal/nomadbarrier"
	"github.com/impact-sched/nomad-impact/internal/testwait"
	"github.com/impact-sched/nomad-impact/plugin/plugintest"
	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
)

// fakeNomadAPI serves the two Nomad endpoints gang members read:
// /v1/service/rdzv (the registrations; a member, told apart by its
// NOMAD_TOKEN, can be shown a stale view) and /v1/job/train (the job's
// group counts, or an error status).
type fakeNomadAPI struct {
	mu        sync.Mutex
	regs      map[string]nomadbarrier.ServiceRegistration // by allocation
	stale     map[string][]nomadbarrier.ServiceRegistration
	jobCount  int
	jobStatus int // non-zero: /v1/job answers with it
}

func newFakeNomadAPI(t *testing.T) (*fakeNomadAPI, string) {
	f := &fakeNomadAPI{regs: map[string]nomadbarrier.ServiceRegistration{}, stale: map[string][]nomadbarrier.ServiceRegistration{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *fakeNomadAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.URL.Path == "/v1/service/rdzv":
		if v, ok := f.stale[r.Header.Get("X-Nomad-Token")]; ok {
			json.NewEncoder(w).Encode(v)
			return
		}
		out := []nomadbarrier.ServiceRegistration{}
		for _, reg := range f.regs {
			out = append(out, reg)
		}
		json.NewEncoder(w).Encode(out)
	case r.URL.Path == "/v1/job/train" && r.URL.Query().Get("namespace") == "default":
		if f.jobStatus != 0 {
			http.Error(w, "Permission denied", f.jobStatus)
			return
		}
		fmt.Fprintf(w, `{"ID":"train","TaskGroups":[{"Name":"workers","Count":%d}]}`, f.jobCount)
	default:
		http.Error(w, "unexpected "+r.URL.String(), http.StatusNotFound)
	}
}

func (f *fakeNomadAPI) register(tk task, index int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.regs[tk.cfg.AllocId] = reg(tk, index)
}

func reg(tk task, index int) nomadbarrier.ServiceRegistration {
	return nomadbarrier.ServiceRegistration{ID: "_nomad-task-" + tk.cfg.AllocId, ServiceName: "rdzv", Namespace: "default",
		NodeID: "node-1", JobID: "train", AllocID: tk.cfg.AllocId, Address: "127.0.0.1", Port: 20000 + index,
		Tags: []string{fmt.Sprintf("alloc_index=%d", index)}}
}

func (f *fakeNomadAPI) deregister(tk task) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.regs, tk.cfg.AllocId)
}

func (f *fakeNomadAPI) setStale(token string, view ...nomadbarrier.ServiceRegistration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if view == nil {
		delete(f.stale, token)
		return
	}
	f.stale[token] = view
}

// eventLog collects the plugin's task events.
type eventLog struct {
	mu   sync.Mutex
	msgs []string
}

func collectEvents(t *testing.T, inst *plugintest.Instance) *eventLog {
	t.Helper()
	stream, err := inst.Driver.TaskEvents(ctxT(t, 2*time.Minute), &driverpb.TaskEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	l := &eventLog{}
	go func() {
		for {
			ev, err := stream.Recv()
			if err != nil {
				return
			}
			l.mu.Lock()
			l.msgs = append(l.msgs, ev.GetAllocId()+"|"+ev.GetMessage())
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *eventLog) find(alloc, sub string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.msgs {
		if strings.HasPrefix(m, alloc+"|") && strings.Contains(m, sub) {
			return m
		}
	}
	return ""
}

func (l *eventLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.msgs, "\n")
}

// nomadMembers makes n gang members with discovery = "nomad", each with
// its own allocation and NOMAD_TOKEN ("tok<i>"), running script.
func nomadMembers(t *testing.T, n int, script, gangExtra string) []task {
	out := make([]task, n)
	for i := range out {
		out[i] = newTask(t, "worker", fmt.Sprintf(`
command = "/bin/sh"
args    = ["-c", %q]
gang {
  discovery = "nomad"
  service   = "rdzv"
  timeout   = "5m"
  %s
}`, script, gangExtra), map[string]string{"NOMAD_ALLOC_INDEX": fmt.Sprint(i), "NOMAD_TOKEN": fmt.Sprintf("tok%d", i)})
		out[i].cfg.AllocId = fmt.Sprintf("%s-%d", out[i].cfg.AllocId, i)
		out[i].cfg.Id = out[i].cfg.AllocId + "/worker/x"
	}
	return out
}

// Issue 16 item 7: member A sees both members, passes and its command
// ends at once; member B's view lagged (it had seen only A), and Nomad
// removes A's registration as soon as A's task ends. B must still pass:
// A keeps its registration (does not end) for NomadHold after passing.
func TestNomadBarrierMemberEndingAtOnceDoesNotStrandPeer(t *testing.T) {
	t.Parallel()
	fake, url := newFakeNomadAPI(t)
	inst := load(t, fmt.Sprintf("nomad_addr = %q\nheartbeat_interval = \"200ms\"", url))
	events := collectEvents(t, inst)
	m := nomadMembers(t, 2, "echo $RANK $WORLD_SIZE > passed", "size = 2")
	a, b := m[0], m[1]
	fake.register(a, 0)
	fake.register(b, 1)
	fake.setStale("tok1", reg(a, 0)) // B has not yet seen its own registration
	start(t, inst, b)
	start(t, inst, a)
	aDone := make(chan *driverpb.WaitTaskResponse, 1)
	go func() {
		res, err := inst.Driver.WaitTask(ctxT(t, time.Minute), &driverpb.WaitTaskRequest{TaskId: a.cfg.Id})
		if err == nil {
			fake.deregister(a) // Nomad removes A's registration once its task ends
		}
		aDone <- res
	}()
	if got := strings.TrimSpace(testwait.File(t, filepath.Join(a.dir, "passed"), 20*time.Second)); got != "0 2" {
		t.Fatalf("A: %q", got)
	}
	fake.setStale("tok1") // B's view catches up
	if got := strings.TrimSpace(testwait.File(t, filepath.Join(b.dir, "passed"), 20*time.Second)); got != "1 2" {
		t.Fatalf("B: %q", got)
	}
	if res := waitTask(t, inst, b.cfg.Id, 20*time.Second); res.GetResult().GetExitCode() != 0 {
		t.Fatalf("B: %+v", res)
	}
	select {
	case res := <-aDone:
		if res.GetResult().GetExitCode() != 0 {
			t.Fatalf("A: %+v", res)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("A never ended")
	}
	if events.find(a.cfg.AllocId, "keeping its Nomad service registration") == "" {
		t.Errorf("no hold event for A; events:\n%s", events)
	}
}

// A member that can no longer complete fails fast: A passed and its
// registration vanished at once (killed right after the barrier), B had
// seen A but never both together. B gives up with a clear event naming
// A, well before its 5m barrier timeout.
func TestNomadBarrierLostGangFailsFast(t *testing.T) {
	t.Parallel()
	fake, url := newFakeNomadAPI(t)
	inst := load(t, fmt.Sprintf("nomad_addr = %q\nheartbeat_interval = \"200ms\"", url))
	events := collectEvents(t, inst)
	m := nomadMembers(t, 2, "echo $RANK > passed; exec sleep 60", "size = 2")
	a, b := m[0], m[1]
	fake.register(a, 0)
	fake.register(b, 1)
	fake.setStale("tok1", reg(a, 0))
	start(t, inst, b)
	start(t, inst, a)
	testwait.File(t, filepath.Join(a.dir, "passed"), 20*time.Second)
	testwait.For(t, 10*time.Second, "B saw A", func() bool { return events.find(b.cfg.AllocId, "1 of 2 members arrived") != "" })
	fake.deregister(a)
	fake.setStale("tok1")
	began := time.Now()
	res := waitTask(t, inst, b.cfg.Id, 60*time.Second)
	if res.GetResult().GetExitCode() != 1 || !strings.Contains(res.GetErr(), "cannot complete") {
		t.Fatalf("B: %+v", res)
	}
	if el := time.Since(began); el > 30*time.Second {
		t.Fatalf("B gave up after %s", el)
	}
	// Task events arrive on their own stream, possibly after WaitTask
	// returned: wait for B's event rather than read it once.
	deadline := time.Now().Add(10 * time.Second)
	for ev := ""; !strings.Contains(ev, a.cfg.AllocId); time.Sleep(testwait.Poll) {
		if time.Now().After(deadline) {
			t.Fatalf("B's event does not name A: %q; events:\n%s", ev, events)
		}
		ev = events.find(b.cfg.AllocId, "cannot complete")
	}
	if _, err := os.Stat(filepath.Join(b.dir, "passed")); err == nil {
		t.Fatal("B ran without its gang")
	}
}

// Issue 16 item 8: discovery = "nomad" without gang.size takes the job's
// total allocation count from Nomad; a job Nomad will not show fails the
// member at once with an event saying to set gang.size.
func TestNomadBarrierSizeFromJob(t *testing.T) {
	t.Parallel()
	fake, url := newFakeNomadAPI(t)
	fake.jobCount = 2
	inst := load(t, fmt.Sprintf("nomad_addr = %q\nheartbeat_interval = \"200ms\"", url))
	events := collectEvents(t, inst)
	m := nomadMembers(t, 2, "echo $RANK $WORLD_SIZE > passed", "")
	fake.register(m[0], 0)
	start(t, inst, m[0])
	testwait.For(t, 10*time.Second, "1 of 2 arrived", func() bool { return events.find(m[0].cfg.AllocId, "1 of 2 members arrived") != "" })
	fake.register(m[1], 1)
	start(t, inst, m[1])
	for i, tk := range m {
		if res := waitTask(t, inst, tk.cfg.Id, 30*time.Second); res.GetResult().GetExitCode() != 0 {
			t.Fatalf("member %d: %+v", i, res)
		}
		if got := strings.TrimSpace(testwait.File(t, filepath.Join(tk.dir, "passed"), time.Second)); got != fmt.Sprintf("%d 2", i) {
			t.Fatalf("member %d: %q", i, got)
		}
	}

	fake.mu.Lock()
	fake.jobStatus = http.StatusForbidden
	fake.mu.Unlock()
	lone := nomadMembers(t, 1, "echo ran > passed", "")[0]
	start(t, inst, lone)
	res := waitTask(t, inst, lone.cfg.Id, 30*time.Second)
	if res.GetResult().GetExitCode() != 1 || !strings.Contains(res.GetErr(), "gang.size is not set") || !strings.Contains(res.GetErr(), "403") {
		t.Fatalf("job unreadable: %+v", res)
	}
}
