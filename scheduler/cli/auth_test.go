package cli

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/auth"
	"github.com/impact-sched/nomad-impact/internal/authtest"
	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
)

// The CLI sends IMPACT_TOKEN, else NOMAD_TOKEN, and reaches an agent
// served over mutual TLS with IMPACT_CACERT, IMPACT_CLIENT_CERT and
// IMPACT_CLIENT_KEY.
func TestQueueSendsTokenOverMutualTLS(t *testing.T) {
	certs := authtest.WriteCerts(t, t.TempDir())
	tlsCfg, err := auth.ServerTLS(certs.ServerCert, certs.ServerKey, certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	// Not httptest's StartTLS: it would add its own certificate.
	ln, err := tls.Listen("tcp", "127.0.0.1:0", tlsCfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("X-Nomad-Token"))
		mu.Unlock()
		if r.Header.Get("X-Nomad-Token") == "" {
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(agentapi.Error{Error: "missing Nomad ACL token"})
			return
		}
		_ = json.NewEncoder(w).Encode(agentapi.Queue{Jobs: []agentapi.Entry{{Namespace: "ml", Job: "train", State: agentapi.StateWaiting, Position: 1}}})
	})}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	url := "https://" + ln.Addr().String()
	envOf := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}
	full := map[string]string{agentapi.AddressEnv: url, caCertEnv: certs.CA, clientCertEnv: certs.ClientCert, clientKeyEnv: certs.ClientKey}
	for _, tc := range []struct {
		name      string
		extra     map[string]string
		code      int
		wantToken string
		wantOut   string
	}{
		{"NOMAD_TOKEN", map[string]string{"NOMAD_TOKEN": "nomad-tok"}, 0, "nomad-tok", "train"},
		{"IMPACT_TOKEN wins", map[string]string{"NOMAD_TOKEN": "nomad-tok", tokenEnv: "impact-tok"}, 0, "impact-tok", "train"},
		{"no token", nil, 1, "", "agent answered 401: missing Nomad ACL token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]string{}
			for k, v := range full {
				vars[k] = v
			}
			for k, v := range tc.extra {
				vars[k] = v
			}
			mu.Lock()
			seen = nil
			mu.Unlock()
			code, out, errs := run(queueCmd(envOf(vars)))
			mu.Lock()
			defer mu.Unlock()
			if code != tc.code || !strings.Contains(out+errs, tc.wantOut) {
				t.Fatalf("exit %d, want %d with %q:\n%s%s", code, tc.code, tc.wantOut, out, errs)
			}
			if len(seen) != 1 || seen[0] != tc.wantToken {
				t.Errorf("agent saw tokens %q, want %q", seen, tc.wantToken)
			}
		})
	}
	// Without the client certificate the agent does not even answer.
	noCert := map[string]string{agentapi.AddressEnv: url, caCertEnv: certs.CA, "NOMAD_TOKEN": "t"}
	if code, _, errs := run(queueCmd(envOf(noCert))); code == 0 || !strings.Contains(errs, "reaching impact agent") {
		t.Errorf("without a client certificate: exit %d %s", code, errs)
	}
	// Without the CA the agent's certificate is not trusted.
	noCA := map[string]string{agentapi.AddressEnv: url, "NOMAD_TOKEN": "t"}
	if code, _, errs := run(queueCmd(envOf(noCA))); code == 0 || !strings.Contains(errs, "certificate") {
		t.Errorf("without the CA: exit %d %s", code, errs)
	}
}
