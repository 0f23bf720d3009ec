package agent

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// fakeConsul is a Consul agent's HTTP API as far as the registrar uses
// it: it records the calls, keeps the registered services with their
// checks' status, and can be down or restarted empty.
type fakeConsul struct {
	mu       sync.Mutex
	services map[string]map[string]any
	// status is each service's check status; a registration without a
	// Status starts critical, as in Consul.
	status map[string]string
	tokens []string
	calls  []string
	// failRegisters answers that many registrations with a 500 first.
	failRegisters int
	// down answers every request with a 500, as an agent that lost its
	// servers does (or a connection refused, to the client).
	down bool
}

func newFakeConsul() *fakeConsul {
	return &fakeConsul{services: map[string]map[string]any{}, status: map[string]string{}}
}

func (f *fakeConsul) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// restartEmpty forgets every service, as a dev agent restarted does.
func (f *fakeConsul) restartEmpty() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.services = map[string]map[string]any{}
	f.status = map[string]string{}
}

// tags returns a service's tags (nil when not registered).
func (f *fakeConsul) tags(id string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	svc := f.services[id]
	if svc == nil {
		return nil
	}
	var out []string
	for _, t := range svc["Tags"].([]any) {
		out = append(out, t.(string))
	}
	return out
}

func (f *fakeConsul) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r.Method+" "+r.URL.Path)
	f.tokens = append(f.tokens, r.Header.Get("X-Consul-Token"))
	writeJSON := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	switch {
	case f.down:
		http.Error(w, "rpc error making call: No cluster leader", 500)
	case r.URL.Path == "/v1/agent/service/register" && f.failRegisters > 0:
		f.failRegisters--
		http.Error(w, "No cluster leader", 500)
	case r.Method == http.MethodPut && r.URL.Path == "/v1/agent/service/register":
		var body map[string]any
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &body); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		id := body["ID"].(string)
		f.services[id] = body
		st := "critical"
		if c, _ := body["Check"].(map[string]any); c != nil && c["Status"] != nil && c["Status"] != "" {
			st = c["Status"].(string)
		}
		if _, ok := f.status[id]; !ok || st != "critical" {
			f.status[id] = st
		}
	case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/v1/agent/service/deregister/"):
		id := strings.TrimPrefix(r.URL.Path, "/v1/agent/service/deregister/")
		if _, ok := f.services[id]; !ok {
			http.Error(w, "Unknown service ID", 404)
			return
		}
		delete(f.services, id)
		delete(f.status, id)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/agent/service/"):
		svc := f.services[strings.TrimPrefix(r.URL.Path, "/v1/agent/service/")]
		if svc == nil {
			http.Error(w, "unknown service ID", 404)
			return
		}
		writeJSON(map[string]any{"ID": svc["ID"], "Service": svc["Name"], "Tags": svc["Tags"],
			"Address": svc["Address"], "Port": svc["Port"]})
	case r.Method == http.MethodGet && r.URL.Path == "/v1/agent/checks":
		out := map[string]any{}
		for id, svc := range f.services {
			c, _ := svc["Check"].(map[string]any)
			if c == nil {
				continue
			}
			out[c["CheckID"].(string)] = map[string]any{"CheckID": c["CheckID"], "ServiceID": id,
				"Status": f.status[id], "Definition": map[string]any{"HTTP": c["HTTP"]}}
		}
		writeJSON(out)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/agent/self":
		writeJSON(map[string]any{"Config": map[string]any{"NodeName": "node1"}})
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/health/service/"):
		name := strings.TrimPrefix(r.URL.Path, "/v1/health/service/")
		tag := r.URL.Query().Get("tag")
		out := []any{}
		for id, svc := range f.services {
			if svc["Name"] != name || (tag != "" && !slices.Contains(svc["Tags"].([]any), any(tag))) {
				continue
			}
			out = append(out, map[string]any{
				"Node":    map[string]any{"Node": "node1"},
				"Service": map[string]any{"ID": id, "Service": name, "Tags": svc["Tags"]},
				"Checks":  []any{map[string]any{"CheckID": id + "-health", "ServiceID": id, "Status": f.status[id]}},
			})
		}
		writeJSON(out)
	default:
		http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, 405)
	}
}

func TestConsulRegisterLifecycle(t *testing.T) {
	fc := newFakeConsul()
	srv := httptest.NewServer(fc)
	defer srv.Close()
	r, err := NewRegistrar(ConsulConfig{
		Address: strings.TrimPrefix(srv.URL, "http://"), Token: "ctok", ServiceName: "impact-scheduler",
		ServiceID: "impact-scheduler-a1", Advertise: "10.0.0.5:4680", CheckInterval: "10s",
	}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Register(); err != nil {
		t.Fatal(err)
	}
	svc := fc.services["impact-scheduler-a1"]
	if svc == nil {
		t.Fatalf("service not registered: %v", fc.calls)
	}
	check := svc["Check"].(map[string]any)
	if svc["Name"] != "impact-scheduler" || svc["Address"] != "10.0.0.5" || svc["Port"].(float64) != 4680 {
		t.Errorf("registration: %v", svc)
	}
	if check["HTTP"] != "http://10.0.0.5:4680/v1/health" || check["Interval"] != "10s" {
		t.Errorf("health check: %v", check)
	}
	if tags := svc["Tags"].([]any); len(tags) != 1 || tags[0] != "standby" {
		t.Errorf("tags before leadership: %v", tags)
	}
	if err := r.SetLeader(true); err != nil {
		t.Fatal(err)
	}
	if tags := fc.services["impact-scheduler-a1"]["Tags"].([]any); tags[0] != "leader" {
		t.Errorf("tags after leadership: %v", tags)
	}
	if err := r.Deregister(); err != nil {
		t.Fatal(err)
	}
	if len(fc.services) != 0 {
		t.Errorf("still registered after Deregister: %v", fc.services)
	}
	for _, tok := range fc.tokens {
		if tok != "ctok" {
			t.Errorf("request without the configured token: %q", tok)
		}
	}
	// Deregistering twice is a no-op, not an error.
	if err := r.Deregister(); err != nil {
		t.Errorf("second Deregister: %v", err)
	}
}

func TestConsulRegisterErrorIsReported(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "Permission denied", 403)
	}))
	defer srv.Close()
	r, err := NewRegistrar(ConsulConfig{Address: srv.URL, ServiceName: "impact-scheduler",
		Advertise: "127.0.0.1:4680", CheckInterval: "10s"}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	err = r.Register()
	if err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Errorf("want the Consul error surfaced, got %v", err)
	}
}

// Consul failing at start-up: the agent schedules anyway, health says why
// it is not registered, and registration is retried until it succeeds;
// shutdown deregisters.
func TestConsulRegistrationRetried(t *testing.T) {
	fc := newFakeConsul()
	fc.failRegisters = 1
	srv := httptest.NewServer(fc)
	defer srv.Close()
	r, err := NewRegistrar(ConsulConfig{Address: strings.TrimPrefix(srv.URL, "http://"), ServiceName: "impact-scheduler",
		ServiceID: "impact-scheduler-a1", Advertise: "127.0.0.1:4680", CheckInterval: "10s"}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	n := newFakeNomad(time.Now)
	ex := &fakeExec{n: n, agent: "a1"}
	opts := fakeOptions(t, n, ex, time.Now)
	// A standby: a leadership change would register at once, before the
	// retry this test is about.
	opts.Elector = neverElected{ex}
	opts.Registrar = r
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	registered := func() bool {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		return fc.services["impact-scheduler-a1"] != nil
	}
	sawProblem := false
	waitFor(t, "registered after a retry", func() bool {
		for _, p := range a.Health().Problems {
			if strings.Contains(p, "consul registration (retrying): ") && strings.Contains(p, "No cluster leader") {
				sawProblem = true
			}
		}
		return registered()
	})
	if !sawProblem {
		t.Error("health never reported the failed registration")
	}
	waitFor(t, "health clear once registered", func() bool {
		for _, p := range a.Health().Problems {
			if strings.Contains(p, "consul") {
				return false
			}
		}
		return true
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if registered() {
		t.Error("still registered after shutdown")
	}
}
