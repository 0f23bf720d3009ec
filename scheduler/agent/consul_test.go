package agent

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// fakeConsul records the agent endpoints the registrar uses.
type fakeConsul struct {
	mu       sync.Mutex
	services map[string]map[string]any
	tokens   []string
	calls    []string
	// failRegisters answers that many registrations with a 500 first.
	failRegisters int
}

func (f *fakeConsul) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r.Method+" "+r.URL.Path)
	f.tokens = append(f.tokens, r.Header.Get("X-Consul-Token"))
	switch {
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
		f.services[body["ID"].(string)] = body
	case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/v1/agent/service/deregister/"):
		id := strings.TrimPrefix(r.URL.Path, "/v1/agent/service/deregister/")
		if _, ok := f.services[id]; !ok {
			http.Error(w, "Unknown service ID", 404)
			return
		}
		delete(f.services, id)
	default:
		http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, 405)
	}
}

func TestConsulRegisterLifecycle(t *testing.T) {
	fc := &fakeConsul{services: map[string]map[string]any{}}
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
	fc := &fakeConsul{services: map[string]map[string]any{}, failRegisters: 1}
	srv := httptest.NewServer(fc)
	defer srv.Close()
	r, err := NewRegistrar(ConsulConfig{Address: strings.TrimPrefix(srv.URL, "http://"), ServiceName: "impact-scheduler",
		ServiceID: "impact-scheduler-a1", Advertise: "127.0.0.1:4680", CheckInterval: "10s"}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	n := newFakeNomad(time.Now)
	opts := fakeOptions(t, n, &fakeExec{n: n, agent: "a1"}, time.Now)
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
