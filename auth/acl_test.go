package auth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/auth"
	"github.com/impact-sched/nomad-impact/internal/authtest"
)

func checker(t *testing.T, addr string, clk *clock) *auth.ACLChecker {
	t.Helper()
	a, err := auth.NewACLChecker(auth.ACLConfig{Address: addr, CacheTTL: 30 * time.Second, Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestACLAllowed(t *testing.T) {
	n := authtest.New(t)
	n.AddToken("ops", authtest.Token{Name: "ops", Caps: map[string][]string{"ml": {"read-job", "submit-job"}}})
	n.AddToken("viewer", authtest.Token{Name: "viewer", Caps: map[string][]string{"ml": {"read-job"}}})
	n.AddToken("root", authtest.Token{Name: "root", Management: true})
	a := checker(t, n.URL(), &clock{now: time.Now()})
	ctx := context.Background()
	for _, tc := range []struct {
		token, ns string
		cap       auth.Capability
		code      int
		want      string
	}{
		{"ops", "ml", auth.CapReadJob, 0, ""},
		{"ops", "ml", auth.CapSubmitJob, 0, ""},
		{"ops", "other", auth.CapReadJob, 403, `may not read-job in namespace "other"`},
		{"viewer", "ml", auth.CapSubmitJob, 403, `may not submit-job in namespace "ml"`},
		{"root", "anything", auth.CapSubmitJob, 0, ""},
		{"bogus", "ml", auth.CapReadJob, 401, "ACL token not found"},
		{"", "ml", auth.CapReadJob, 401, "missing Nomad ACL token"},
	} {
		err := a.Allowed(ctx, tc.token, tc.ns, tc.cap)
		if tc.code == 0 {
			if err != nil {
				t.Errorf("%s %s %s: %v", tc.token, tc.cap, tc.ns, err)
			}
			continue
		}
		if auth.Code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s %s: got %d %v, want %d %q", tc.token, tc.cap, tc.ns, auth.Code(err), err, tc.code, tc.want)
		}
	}
}

// Answers are reused for CacheTTL: a revoked token keeps working until
// then, and is refused after.
func TestACLCache(t *testing.T) {
	n := authtest.New(t)
	n.AddToken("ops", authtest.Token{Name: "ops", Caps: map[string][]string{"ml": {"read-job"}}})
	clk := &clock{now: time.Now()}
	a := checker(t, n.URL(), clk)
	ctx := context.Background()
	for range 5 {
		if err := a.Allowed(ctx, "ops", "ml", auth.CapReadJob); err != nil {
			t.Fatal(err)
		}
	}
	if tok, probe := n.TokenRequests.Load(), n.ProbeRequests.Load(); tok != 1 || probe != 1 {
		t.Fatalf("five checks asked Nomad %d token + %d probe times, want 1 + 1", tok, probe)
	}
	n.RevokeToken("ops")
	if err := a.Allowed(ctx, "ops", "ml", auth.CapReadJob); err != nil {
		t.Fatalf("within the cache TTL: %v", err)
	}
	clk.Add(31 * time.Second)
	if err := a.Allowed(ctx, "ops", "ml", auth.CapReadJob); auth.Code(err) != http.StatusUnauthorized {
		t.Fatalf("revoked token after the cache TTL: %v", err)
	}
}

func TestACLEnabled(t *testing.T) {
	n := authtest.New(t)
	a := checker(t, n.URL(), &clock{now: time.Now()})
	if on, err := a.Enabled(context.Background(), ""); err != nil || !on {
		t.Errorf("ACLs on: got %v %v", on, err)
	}
	n.SetACL(false)
	if on, err := a.Enabled(context.Background(), ""); err != nil || on {
		t.Errorf("ACLs off: got %v %v", on, err)
	}
}

// Nomad 2.0.6 without ACLs answers /v1/acl/token/self with HTTP 200 and a
// placeholder token (recorded from a real agent): that is ACLs off, while
// a real token's answer is ACLs on.
func TestACLEnabledNomad206Placeholder(t *testing.T) {
	body := `{"ExpirationTTL":"","AccessorID":"acls-disabled","SecretID":"","Name":"ACLs disabled token","Type":"client","Policies":null,"Roles":null,"Global":false,"Hash":null,"CreateTime":"0001-01-01T00:00:00Z","ExpirationTime":null,"CreateIndex":0,"ModifyIndex":0}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/acl/token/self" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	a := checker(t, srv.URL, &clock{now: time.Now()})
	if on, err := a.Enabled(context.Background(), ""); err != nil || on {
		t.Errorf("Nomad 2.0.6 with ACLs off: enabled %v, err %v; want off", on, err)
	}
	body = strings.Replace(body, "acls-disabled", "0b6d5a0e-7a1c-4a8f-9d3e-1f2a3b4c5d6e", 1)
	if on, err := a.Enabled(context.Background(), "tok"); err != nil || !on {
		t.Errorf("a real token's answer: enabled %v, err %v; want on", on, err)
	}
}

// Any answer the probes do not expect is "cannot check" (503), not
// "allowed", and is not cached.
func TestACLFailsClosed(t *testing.T) {
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/acl/token/self" {
			_, _ = w.Write([]byte(`{"Name":"x","Type":"client"}`))
			return
		}
		calls++
		http.Error(w, "No cluster leader", http.StatusInternalServerError)
	}))
	defer srv.Close()
	a := checker(t, srv.URL, &clock{now: time.Now()})
	for _, c := range []auth.Capability{auth.CapReadJob, auth.CapSubmitJob, auth.CapSubmitJob} {
		if err := a.Allowed(context.Background(), "tok", "ml", c); auth.Code(err) != http.StatusServiceUnavailable {
			t.Errorf("%s with a leaderless Nomad: %v", c, err)
		}
	}
	if calls != 3 {
		t.Errorf("%d probes, want 3 (failures are not cached)", calls)
	}
}

// Nomad without ACLs vouches for any string (2.0.6: its placeholder
// token): Token and Allowed refuse rather than let any token through.
func TestACLTokenWithACLsDisabled(t *testing.T) {
	n := authtest.New(t)
	n.SetACL(false)
	a := checker(t, n.URL(), &clock{now: time.Now()})
	if _, err := a.Token(context.Background(), "anything"); auth.Code(err) != http.StatusForbidden || !strings.Contains(err.Error(), "ACLs disabled") {
		t.Errorf("token with ACLs disabled: %v", err)
	}
	if err := a.Allowed(context.Background(), "anything", "default", auth.CapSubmitJob); auth.Code(err) != http.StatusForbidden {
		t.Errorf("submit-job with ACLs disabled: %v", err)
	}
}
