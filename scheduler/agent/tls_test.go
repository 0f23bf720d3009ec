package agent

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestServiceOverTLSWithTokenAndConsul runs the agent against Nomad behind
// TLS that demands an ACL token (a reverse proxy in front of the fake),
// with Consul registration on: the CA file and token from the config must
// reach every request, the event stream must work through it, and the
// service must be registered while it runs and deregistered after.
func TestServiceOverTLSWithTokenAndConsul(t *testing.T) {
	c := newFakeCluster(t, 1, 1, 4)
	target, _ := url.Parse(c.fake.URL())
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1 // the event stream must not be buffered
	var denied atomic.Int64
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Nomad-Token") != "s3cret" {
			denied.Add(1)
			http.Error(w, "Permission denied", http.StatusForbidden)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer tlsSrv.Close()
	caPath := filepath.Join(c.dir, "ca.pem")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw})
	if err := os.WriteFile(caPath, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	fc := &fakeConsul{services: map[string]map[string]any{}}
	consulSrv := httptest.NewServer(fc)
	defer consulSrv.Close()

	s := c.startWith("tls",
		fmt.Sprintf("address = %q\n  token = \"s3cret\"\n  ca_cert = %q", tlsSrv.URL, caPath),
		fmt.Sprintf("consul {\n  address = %q\n}\n", strings.TrimPrefix(consulSrv.URL, "http://")))
	eventuallyT(t, 10*time.Second, "leader over TLS", func() (bool, string) {
		h, err := s.api.Health(context.Background())
		return err == nil && h.Leader && h.Status == "ok", fmt.Sprintf("%+v %v", h, err)
	})
	c.submit("job", map[string]string{"impact_tier": "high"}, 1, 4)
	eventuallyT(t, 10*time.Second, "admitted over TLS", func() (bool, string) { return c.running("job") == 1, "" })
	if n := denied.Load(); n != 0 {
		t.Errorf("%d requests reached Nomad without the token", n)
	}
	fc.mu.Lock()
	svc := fc.services["impact-scheduler-tls"]
	fc.mu.Unlock()
	if svc == nil {
		t.Fatalf("not registered in consul: %v", fc.calls)
	}
	check := svc["Check"].(map[string]any)
	if check["HTTP"] != "http://"+s.svc.Addr()+"/v1/health" {
		t.Errorf("consul check %v, want the agent's real address %s", check["HTTP"], s.svc.Addr())
	}
	eventuallyT(t, 5*time.Second, "leader tag", func() (bool, string) {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		tags := fc.services["impact-scheduler-tls"]["Tags"].([]any)
		return len(tags) == 1 && tags[0] == "leader", fmt.Sprint(tags)
	})
	s.stop()
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if len(fc.services) != 0 {
		t.Errorf("still registered after shutdown: %v", fc.services)
	}
}
