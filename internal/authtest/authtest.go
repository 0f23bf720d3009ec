// Package authtest is a stand-in for the parts of Nomad that package auth
// asks: the JWKS (/.well-known/jwks.json), ACL token lookup
// (/v1/acl/token/self) and the two capability probes, answering with the
// status codes and messages of Nomad 2.0.6. It also signs workload
// identities with its key, so tests in other packages (and of the built
// binaries) can present real JWTs. It is a test double, internal so that no
// binary outside this module can link it (make check: no non-test code
// imports it).
package authtest

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/impact-sched/nomad-impact/auth"
)

type signingKey struct {
	kid string
	key *rsa.PrivateKey
}

// Token is an ACL token the fake knows.
type Token struct {
	Name string
	// Management tokens may do everything.
	Management bool
	// Caps lists capabilities per namespace ("read-job", "submit-job").
	Caps map[string][]string
}

// Claims describe a workload identity to sign.
type Claims struct {
	Namespace, JobID, AllocID, Task string
	Audience                        []string
	// Expiry is the exp claim; zero leaves it out (Nomad's default identity).
	Expiry time.Time
	// KeyID overrides the kid header (default: the fake's key).
	KeyID string
}

// Nomad is the fake. Its zero value is not usable: call New.
type Nomad struct {
	srv *httptest.Server

	mu         sync.Mutex
	keys       []signingKey // newest last; all are served
	tokens     map[string]Token
	aclEnabled bool

	// Counters of requests, for cache tests.
	JWKSRequests  atomic.Int64
	TokenRequests atomic.Int64
	ProbeRequests atomic.Int64
}

// New starts the fake with ACLs enabled and no tokens; it is closed at
// the end of the test.
func New(t testing.TB) *Nomad {
	t.Helper()
	n := &Nomad{tokens: map[string]Token{}, aclEnabled: true}
	n.Rotate(t)
	n.srv = httptest.NewServer(http.HandlerFunc(n.serve))
	t.Cleanup(n.srv.Close)
	return n
}

// Verifiers are package auth's two checks against this Nomad, as the
// impact agent configures them: workload identities with audience
// "impact", and ACL tokens.
func (n *Nomad) Verifiers(t testing.TB) (*auth.IdentityVerifier, *auth.ACLChecker) {
	t.Helper()
	ids, err := auth.NewIdentityVerifier(auth.IdentityConfig{JWKSURL: n.JWKSURL(), Audience: "impact"})
	if err != nil {
		t.Fatal(err)
	}
	acl, err := auth.NewACLChecker(auth.ACLConfig{Address: n.URL()})
	if err != nil {
		t.Fatal(err)
	}
	return ids, acl
}

// URL is the fake's address.
func (n *Nomad) URL() string { return n.srv.URL }

// JWKSURL is where the fake serves its key set.
func (n *Nomad) JWKSURL() string { return n.srv.URL + "/.well-known/jwks.json" }

// SetACL turns ACL enforcement on or off.
func (n *Nomad) SetACL(enabled bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.aclEnabled = enabled
}

// AddToken makes secret a valid token.
func (n *Nomad) AddToken(secret string, tok Token) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.tokens[secret] = tok
}

// RevokeToken forgets a token.
func (n *Nomad) RevokeToken(secret string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.tokens, secret)
}

// Rotate adds a new signing key, as Nomad's keyring rotation does: new
// identities are signed with it, the old keys stay in the JWKS.
func (n *Nomad) Rotate(t testing.TB) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.keys = append(n.keys, signingKey{kid: fmt.Sprintf("fake-key-%d", len(n.keys)+1), key: key})
}

// Sign returns a workload identity JWT signed with the fake's newest key.
func (n *Nomad) Sign(t testing.TB, c Claims) string {
	t.Helper()
	n.mu.Lock()
	k := n.keys[len(n.keys)-1]
	n.mu.Unlock()
	kid := c.KeyID
	if kid == "" {
		kid = k.kid
	}
	return SignWith(t, k.key, kid, c)
}

// SignWith signs claims with any RSA key (a forger's, in tests).
func SignWith(t testing.TB, key *rsa.PrivateKey, kid string, c Claims) string {
	t.Helper()
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key},
		(&jose.SignerOptions{}).WithHeader("kid", kid).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	std := jwt.Claims{Subject: "global:" + c.Namespace + ":" + c.JobID + ":g:" + c.Task + ":impact",
		Audience: c.Audience, IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now.Add(-time.Minute))}
	if !c.Expiry.IsZero() {
		std.Expiry = jwt.NewNumericDate(c.Expiry)
	}
	extra := map[string]any{"nomad_namespace": c.Namespace, "nomad_job_id": c.JobID,
		"nomad_allocation_id": c.AllocID, "nomad_task": c.Task}
	raw, err := jwt.Signed(sig).Claims(&std).Claims(extra).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func (n *Nomad) serve(w http.ResponseWriter, r *http.Request) {
	n.mu.Lock()
	enabled := n.aclEnabled
	tok, known := n.tokens[r.Header.Get("X-Nomad-Token")]
	n.mu.Unlock()
	path := r.URL.Path
	ns := r.URL.Query().Get("namespace")
	if ns == "" {
		ns = "default"
	}
	allowed := func(capability string) bool {
		if !enabled || tok.Management {
			return true
		}
		for _, c := range tok.Caps[ns] {
			if c == capability {
				return true
			}
		}
		return false
	}
	// Nomad: an unknown token is "ACL token not found" (403) on every
	// endpoint that resolves it.
	denyUnknown := func() bool {
		if enabled && !known {
			http.Error(w, "ACL token not found", http.StatusForbidden)
			return true
		}
		return false
	}
	switch {
	case path == "/.well-known/jwks.json":
		n.JWKSRequests.Add(1)
		n.mu.Lock()
		var set jose.JSONWebKeySet
		for _, k := range n.keys {
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.key.PublicKey, KeyID: k.kid, Algorithm: "RS256", Use: "sig"})
		}
		n.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(set)
	case path == "/v1/acl/token/self":
		n.TokenRequests.Add(1)
		if !enabled {
			// Nomad 2.0.6 without ACLs: 200 with a placeholder token, for
			// any token or none.
			_ = json.NewEncoder(w).Encode(map[string]string{"AccessorID": "acls-disabled", "Name": "ACLs disabled token", "Type": "client"})
			return
		}
		if denyUnknown() {
			return
		}
		typ := "client"
		if tok.Management {
			typ = "management"
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"AccessorID": "acc-" + tok.Name, "Name": tok.Name, "Type": typ})
	case strings.HasPrefix(path, "/v1/job/") && strings.HasSuffix(path, "/revert"):
		n.ProbeRequests.Add(1)
		if denyUnknown() {
			return
		}
		if !allowed("submit-job") {
			http.Error(w, "Permission denied", http.StatusForbidden)
			return
		}
		id := strings.TrimSuffix(strings.TrimPrefix(path, "/v1/job/"), "/revert")
		http.Error(w, "job \""+id+"\" not found", http.StatusInternalServerError)
	case strings.HasPrefix(path, "/v1/job/"):
		n.ProbeRequests.Add(1)
		if denyUnknown() {
			return
		}
		if !allowed("read-job") {
			http.Error(w, "Permission denied", http.StatusForbidden)
			return
		}
		http.Error(w, "job not found", http.StatusNotFound)
	default:
		http.Error(w, "no such endpoint in the fake: "+path, http.StatusNotFound)
	}
}
