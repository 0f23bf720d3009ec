package auth_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/impact-sched/nomad-impact/auth"
	"github.com/impact-sched/nomad-impact/internal/authtest"
)

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func verifier(t *testing.T, n *authtest.Nomad, clk *clock) *auth.IdentityVerifier {
	t.Helper()
	v, err := auth.NewIdentityVerifier(auth.IdentityConfig{JWKSURL: n.JWKSURL(), Audience: "impact", Clock: clk.Now,
		Refresh: time.Minute, MinRefresh: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func member(exp time.Time) authtest.Claims {
	return authtest.Claims{Namespace: "ml", JobID: "train", AllocID: "a1", Task: "worker", Audience: []string{"impact"}, Expiry: exp}
}

func TestVerifyIdentity(t *testing.T) {
	n := authtest.New(t)
	now := time.Now()
	forger, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	noTask := member(now.Add(time.Hour))
	noTask.Task = ""
	for _, tc := range []struct {
		name  string
		token func(t *testing.T) string
		code  int    // 0: accepted
		want  string // in the error
	}{
		{"valid", func(t *testing.T) string { return n.Sign(t, member(now.Add(time.Hour))) }, 0, ""},
		{"expired", func(t *testing.T) string { return n.Sign(t, member(now.Add(-time.Minute))) }, 401, "expired at"},
		{"no expiry (Nomad's default identity)", func(t *testing.T) string { return n.Sign(t, member(time.Time{})) }, 401, "no expiry"},
		{"wrong audience", func(t *testing.T) string {
			c := member(now.Add(time.Hour))
			c.Audience = []string{"nomadproject.io"}
			return n.Sign(t, c)
		}, 401, `accepts only "impact"`},
		{"service identity (no task)", func(t *testing.T) string { return n.Sign(t, noTask) }, 401, "nomad_task"},
		{"forged: own key under Nomad's key ID", func(t *testing.T) string {
			return authtest.SignWith(t, forger, "fake-key-1", member(now.Add(time.Hour)))
		}, 401, "signature does not verify"},
		{"forged: own key ID", func(t *testing.T) string {
			return authtest.SignWith(t, forger, "forger", member(now.Add(time.Hour)))
		}, 401, `key "forger"`},
		{"HS256 with the public key as secret", func(t *testing.T) string {
			sig, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: []byte("secret")}, (&jose.SignerOptions{}).WithHeader("kid", "fake-key-1"))
			raw, _ := jwt.Signed(sig).Claims(jwt.Claims{Audience: jwt.Audience{"impact"}, Expiry: jwt.NewNumericDate(now.Add(time.Hour))}).Serialize()
			return raw
		}, 401, "not a signed JWT"},
		{"garbage", func(t *testing.T) string { return "a.b.c" }, 401, "not a signed JWT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{now: now}
			id, err := verifier(t, n, clk).Verify(context.Background(), tc.token(t))
			if tc.code == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if id.Namespace != "ml" || id.JobID != "train" || id.AllocID != "a1" || id.Task != "worker" {
					t.Errorf("claims %+v", id)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted %+v", id)
			}
			if auth.Code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %d %q, want %d containing %q", auth.Code(err), err, tc.code, tc.want)
			}
		})
	}
}

// A rotated key is fetched when a token names it; unknown key IDs fetch at
// most once per MinRefresh, and the cache serves known keys without asking.
func TestJWKSRefresh(t *testing.T) {
	n := authtest.New(t)
	clk := &clock{now: time.Now()}
	v := verifier(t, n, clk)
	ctx := context.Background()
	exp := clk.Now().Add(time.Hour)
	for range 3 {
		if _, err := v.Verify(ctx, n.Sign(t, member(exp))); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.JWKSRequests.Load(); got != 1 {
		t.Fatalf("%d JWKS fetches for three tokens of one key, want 1", got)
	}
	// Unknown key IDs right after a fetch: transient (503), no new fetch.
	forged := n.Sign(t, authtest.Claims{Namespace: "ml", JobID: "train", AllocID: "a1", Task: "worker", Audience: []string{"impact"}, Expiry: exp, KeyID: "nope"})
	for range 5 {
		if _, err := v.Verify(ctx, forged); auth.Code(err) != http.StatusServiceUnavailable {
			t.Fatalf("unknown kid within MinRefresh: %v", err)
		}
	}
	if got := n.JWKSRequests.Load(); got != 1 {
		t.Fatalf("%d JWKS fetches, want still 1", got)
	}
	// Past MinRefresh, Nomad rotates: the new key is fetched and accepted.
	clk.Add(11 * time.Second)
	n.Rotate(t)
	if _, err := v.Verify(ctx, n.Sign(t, member(exp))); err != nil {
		t.Fatalf("rotated key: %v", err)
	}
	if got := n.JWKSRequests.Load(); got != 2 {
		t.Fatalf("%d JWKS fetches after rotation, want 2", got)
	}
	// A key ID Nomad really does not have, after a fresh fetch: 401.
	clk.Add(11 * time.Second)
	if _, err := v.Verify(ctx, forged); auth.Code(err) != http.StatusUnauthorized {
		t.Fatalf("unknown kid after a fetch: %v", err)
	}
	// Past Refresh the set is fetched again even for a known key.
	clk.Add(2 * time.Minute)
	before := n.JWKSRequests.Load()
	if _, err := v.Verify(ctx, n.Sign(t, member(clk.Now().Add(time.Hour)))); err != nil {
		t.Fatal(err)
	}
	if n.JWKSRequests.Load() != before+1 {
		t.Errorf("stale key set not refreshed")
	}
}

func TestIdentityOwnsJob(t *testing.T) {
	id := auth.Identity{JobID: "train"}
	for job, want := range map[string]bool{
		"train": true, "train/dispatch-1700000000-abcd1234": true, "train/periodic-1700000000": true,
		"trainer": false, "train/other": false, "train:x": false, "": false,
	} {
		if got := id.OwnsJob(job); got != want {
			t.Errorf("OwnsJob(%q) = %v, want %v", job, got, want)
		}
	}
}

func TestRequestToken(t *testing.T) {
	for _, tc := range []struct {
		hdr  map[string]string
		want string
	}{
		{map[string]string{"X-Nomad-Token": "s1"}, "s1"},
		{map[string]string{"Authorization": "Bearer s2"}, "s2"},
		{map[string]string{"Authorization": "bearer s3"}, "s3"},
		{map[string]string{"Authorization": "Basic x"}, ""},
		{map[string]string{"X-Nomad-Token": "s4", "Authorization": "Bearer s5"}, "s4"},
		{nil, ""},
	} {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		for k, v := range tc.hdr {
			r.Header.Set(k, v)
		}
		if got := auth.RequestToken(r); got != tc.want {
			t.Errorf("%v: got %q, want %q", tc.hdr, got, tc.want)
		}
	}
}
