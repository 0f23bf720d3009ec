package agent

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// fakeConsul records the agent endpoints the registrar uses.
type fakeConsul struct {
	mu       sync.Mutex
	services map[string]map[string]any
	tokens   []string
	calls    []string
}

func (f *fakeConsul) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r.Method+" "+r.URL.Path)
	f.tokens = append(f.tokens, r.Header.Get("X-Consul-Token"))
	switch {
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
