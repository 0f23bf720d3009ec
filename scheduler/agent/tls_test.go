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

	"github.com/impact-sched/nomad-impact/auth"
	"github.com/impact-sched/nomad-impact/internal/authtest"
	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
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
	fc := newFakeConsul()
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

// With http.tls_* the agent serves https, and with tls_client_ca only to
// clients presenting a certificate of that CA.
func TestServiceServesMutualTLS(t *testing.T) {
	c := newFakeCluster(t, 1, 1, 4)
	certs := authtest.WriteCerts(t, c.dir)
	tlsFile := filepath.Join(c.dir, "tls.hcl")
	if err := os.WriteFile(tlsFile, []byte(fmt.Sprintf("http {\n  tls_cert = %q\n  tls_key = %q\n  tls_client_ca = %q\n}\n",
		certs.ServerCert, certs.ServerKey, certs.CA)), 0o600); err != nil {
		t.Fatal(err)
	}
	s := c.startWith("mtls", fmt.Sprintf("address = %q", c.fake.URL()), "", tlsFile)
	client := func(ca, cert, key string) *agentapi.Client {
		cfg, err := auth.ClientTLS(ca, cert, key, "", false)
		if err != nil {
			t.Fatal(err)
		}
		ac, err := agentapi.NewClient("https://"+s.svc.Addr(), &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}})
		if err != nil {
			t.Fatal(err)
		}
		return ac
	}
	ctx := context.Background()
	eventuallyT(t, 10*time.Second, "health over mTLS", func() (bool, string) {
		h, err := client(certs.CA, certs.ClientCert, certs.ClientKey).Health(ctx)
		return err == nil && h.Name == "mtls", fmt.Sprintf("%+v %v", h, err)
	})
	if _, err := client(certs.CA, "", "").Health(ctx); err == nil {
		t.Error("a client without a certificate was served")
	}
	if _, err := client(certs.OtherCA, certs.ClientCert, certs.ClientKey).Health(ctx); err == nil {
		t.Error("a client that does not trust the agent's CA connected")
	}
	// Go's TLS server answers plain http with a 400 and no content.
	if resp, err := http.Get("http://" + s.svc.Addr() + "/v1/health"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain http was served on the TLS listener")
		}
	}
}
