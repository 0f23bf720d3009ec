package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/hashicorp/go-hclog"
)

// Identity is what a verified workload identity says about its holder.
type Identity struct {
	Namespace string
	// JobID is the job the identity was issued for; for a dispatched or
	// periodic child job Nomad names the parent job here.
	JobID   string
	AllocID string
	Task    string
	Subject string
	Expiry  time.Time
}

// String names the identity for logs and errors.
func (i Identity) String() string {
	return fmt.Sprintf("allocation %s task %s of job %s/%s", i.AllocID, i.Task, i.Namespace, i.JobID)
}

// OwnsJob reports whether jobID is the identity's job, or a dispatched or
// periodic child of it (Nomad puts the parent's ID in nomad_job_id; child
// IDs are "<parent>/dispatch-..." and "<parent>/periodic-...").
func (i Identity) OwnsJob(jobID string) bool {
	if jobID == i.JobID {
		return true
	}
	rest, ok := strings.CutPrefix(jobID, i.JobID+"/")
	return ok && (strings.HasPrefix(rest, "dispatch-") || strings.HasPrefix(rest, "periodic-"))
}

// IdentityConfig configures an IdentityVerifier.
type IdentityConfig struct {
	// JWKSURL is Nomad's key set, e.g. http://127.0.0.1:4646/.well-known/jwks.json.
	JWKSURL string
	// HTTP fetches the key set (TLS to Nomad); nil: a default client.
	HTTP *http.Client
	// Audience must be among the token's aud values.
	Audience string
	// Refresh is how often the key set is fetched again (default 5m).
	Refresh time.Duration
	// MinRefresh bounds fetches caused by unknown key IDs (default 10s),
	// so forged key IDs cannot make the verifier hammer Nomad.
	MinRefresh time.Duration
	// Leeway tolerates clock skew on exp, nbf and iat (default 5s).
	Leeway time.Duration
	Clock  func() time.Time
	Logger hclog.Logger
}

// IdentityVerifier verifies Nomad workload identities against Nomad's
// JWKS. It is safe for concurrent use.
type IdentityVerifier struct {
	cfg IdentityConfig
	log hclog.Logger

	fetchMu sync.Mutex // one fetch at a time
	mu      sync.Mutex
	keys    *jose.JSONWebKeySet
	fetched time.Time // last successful fetch
	tried   time.Time // last attempt
}

// NewIdentityVerifier returns a verifier; nothing is fetched until the
// first Verify.
func NewIdentityVerifier(cfg IdentityConfig) (*IdentityVerifier, error) {
	if cfg.JWKSURL == "" {
		return nil, errors.New("identity verifier: the JWKS URL (Nomad's /.well-known/jwks.json) is required")
	}
	if cfg.Audience == "" {
		return nil, errors.New("identity verifier: an audience is required")
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = 5 * time.Minute
	}
	if cfg.MinRefresh <= 0 {
		cfg.MinRefresh = 10 * time.Second
	}
	if cfg.Leeway <= 0 {
		cfg.Leeway = 5 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &IdentityVerifier{cfg: cfg, log: cfg.Logger.Named("identity")}, nil
}

// Audience is the audience tokens must carry.
func (v *IdentityVerifier) Audience() string { return v.cfg.Audience }

// Nomad signs workload identities with RS256 (or EdDSA when it has no RSA
// key); nothing else is accepted, "none" least of all.
var identityAlgs = []jose.SignatureAlgorithm{jose.RS256, jose.EdDSA}

type nomadClaims struct {
	Namespace string `json:"nomad_namespace"`
	JobID     string `json:"nomad_job_id"`
	AllocID   string `json:"nomad_allocation_id"`
	Task      string `json:"nomad_task"`
}

// Verify checks a workload identity and returns its claims; a refusal is a
// 401 *Error saying what is wrong (503 when the key set cannot be had).
func (v *IdentityVerifier) Verify(ctx context.Context, raw string) (Identity, error) {
	tok, err := jwt.ParseSigned(raw, identityAlgs)
	if err != nil {
		return Identity{}, Unauthorized("workload identity is not a signed JWT (RS256 or EdDSA): %v", err)
	}
	if len(tok.Headers) != 1 || tok.Headers[0].KeyID == "" {
		return Identity{}, Unauthorized("workload identity names no signing key (kid)")
	}
	kid := tok.Headers[0].KeyID
	key, err := v.key(ctx, kid)
	if err != nil {
		return Identity{}, err
	}
	var std jwt.Claims
	var nc nomadClaims
	if err := tok.Claims(key.Key, &std, &nc); err != nil {
		return Identity{}, Unauthorized("workload identity signature does not verify against Nomad's key %s: %v", kid, err)
	}
	now := v.cfg.Clock()
	if std.Expiry == nil {
		return Identity{}, Unauthorized("workload identity has no expiry: the impact rendezvous accepts only an identity with a ttl (Nomad's default identity never expires)")
	}
	err = std.ValidateWithLeeway(jwt.Expected{AnyAudience: jwt.Audience{v.cfg.Audience}, Time: now}, v.cfg.Leeway)
	switch {
	case errors.Is(err, jwt.ErrExpired):
		return Identity{}, Unauthorized("workload identity expired at %s", std.Expiry.Time().UTC().Format(time.RFC3339))
	case errors.Is(err, jwt.ErrInvalidAudience):
		return Identity{}, Unauthorized("workload identity has audience %q, this server accepts only %q (identity { aud = [%q] })", []string(std.Audience), v.cfg.Audience, v.cfg.Audience)
	case err != nil:
		return Identity{}, Unauthorized("workload identity: %v", err)
	}
	if nc.Namespace == "" || nc.JobID == "" || nc.AllocID == "" || nc.Task == "" {
		return Identity{}, Unauthorized("not a task's workload identity: nomad_namespace, nomad_job_id, nomad_allocation_id and nomad_task are required (service identities are not accepted)")
	}
	return Identity{Namespace: nc.Namespace, JobID: nc.JobID, AllocID: nc.AllocID, Task: nc.Task,
		Subject: std.Subject, Expiry: std.Expiry.Time()}, nil
}

// key returns the key with kid, fetching the key set when it is stale or
// does not know kid (at most once per MinRefresh).
func (v *IdentityVerifier) key(ctx context.Context, kid string) (jose.JSONWebKey, error) {
	if k, ok, stale := v.cached(kid); ok && !stale {
		return k, nil
	}
	v.fetchMu.Lock()
	defer v.fetchMu.Unlock()
	k, ok, stale := v.cached(kid)
	if ok && !stale {
		return k, nil // fetched while waiting
	}
	v.mu.Lock()
	mayFetch := v.cfg.Clock().Sub(v.tried) >= v.cfg.MinRefresh || (ok && stale)
	v.mu.Unlock()
	if mayFetch {
		if err := v.fetch(ctx); err != nil {
			if ok {
				v.log.Warn("refreshing Nomad's JWKS failed, using the cached keys", "error", err)
				return k, nil
			}
			return jose.JSONWebKey{}, Unavailable("cannot fetch Nomad's JWKS to check the workload identity: %v", err)
		}
		if k, ok, _ = v.cached(kid); ok {
			return k, nil
		}
	}
	if ok {
		return k, nil
	}
	if !mayFetch {
		// Fetched moments ago: Nomad may have rotated since. Transient, so
		// the member retries rather than failing.
		return jose.JSONWebKey{}, Unavailable("workload identity is signed with key %q, unknown to the JWKS fetched %s ago; retry", kid, v.cfg.Clock().Sub(v.tried).Round(time.Second))
	}
	return jose.JSONWebKey{}, Unauthorized("workload identity is signed with key %q, which Nomad's JWKS at %s does not hold", kid, v.cfg.JWKSURL)
}

func (v *IdentityVerifier) cached(kid string) (k jose.JSONWebKey, ok, stale bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.keys == nil {
		return jose.JSONWebKey{}, false, true
	}
	stale = v.cfg.Clock().Sub(v.fetched) >= v.cfg.Refresh
	for _, key := range v.keys.Key(kid) {
		if key.Use == "" || key.Use == "sig" {
			return key, true, stale
		}
	}
	return jose.JSONWebKey{}, false, stale
}

func (v *IdentityVerifier) fetch(ctx context.Context) error {
	v.mu.Lock()
	v.tried = v.cfg.Clock()
	v.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.cfg.JWKSURL, nil)
	if err != nil {
		return err
	}
	resp, err := v.cfg.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("reading %s: %w", v.cfg.JWKSURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d: %s", v.cfg.JWKSURL, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(body, &set); err != nil {
		return fmt.Errorf("decoding %s: %w", v.cfg.JWKSURL, err)
	}
	v.mu.Lock()
	v.keys, v.fetched = &set, v.cfg.Clock()
	v.mu.Unlock()
	v.log.Debug("fetched Nomad's JWKS", "url", v.cfg.JWKSURL, "keys", len(set.Keys))
	return nil
}
