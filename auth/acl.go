package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Capability is a Nomad namespace capability the impact APIs ask about.
type Capability string

// The capabilities checked (see the package documentation for how).
const (
	// CapReadJob lets a token see a namespace's jobs in /v1/queue,
	// /v1/explain and the gang list.
	CapReadJob Capability = "read-job"
	// CapSubmitJob lets a token stop a namespace's gangs.
	CapSubmitJob Capability = "submit-job"
)

// probeJob is the job ID the capability probes ask about: job IDs may not
// contain spaces, so no job can ever have it and no probe changes a job.
const probeJob = "impact acl probe"

// TokenInfo is what Nomad says about a valid ACL token.
type TokenInfo struct {
	AccessorID string
	Name       string
	Type       string // "client" or "management"
}

// ACLConfig configures an ACLChecker.
type ACLConfig struct {
	// Address is Nomad's HTTP API (http://, https:// or unix://).
	Address string
	// HTTP reaches Nomad (TLS); nil: a default client (unix:// handled).
	HTTP *http.Client
	// Region is passed on every request when set.
	Region string
	// CacheTTL is how long an answer is reused (default 30s).
	CacheTTL time.Duration
	// MaxEntries bounds the cache (default 4096); when full, expired
	// entries are dropped, then all.
	MaxEntries int
	Clock      func() time.Time
	Logger     hclog.Logger
}

// ACLChecker answers whether a Nomad ACL token is valid and may use a
// capability in a namespace, by asking Nomad. It is safe for concurrent use.
type ACLChecker struct {
	cfg  ACLConfig
	base string
	log  hclog.Logger

	mu    sync.Mutex
	cache map[string]aclEntry
}

type aclEntry struct {
	err   error // nil: allowed / valid
	info  TokenInfo
	until time.Time
}

// NewACLChecker returns a checker for the Nomad at cfg.Address.
func NewACLChecker(cfg ACLConfig) (*ACLChecker, error) {
	if cfg.Address == "" {
		return nil, errors.New("acl checker: Nomad's address is required")
	}
	base := strings.TrimSuffix(cfg.Address, "/")
	if cfg.HTTP == nil || strings.HasPrefix(cfg.Address, "unix://") {
		hc, b, err := HTTPClient(cfg.Address, nil, 10*time.Second)
		if err != nil {
			return nil, fmt.Errorf("acl checker: %w", err)
		}
		if cfg.HTTP == nil {
			cfg.HTTP = hc
		}
		base = b
	}
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = 30 * time.Second
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = 4096
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &ACLChecker{cfg: cfg, base: base, log: cfg.Logger.Named("acl"), cache: map[string]aclEntry{}}, nil
}

// Enabled asks Nomad whether it has ACLs enabled (GET /v1/acl/token/self
// with token, which may be ""). Nomad without ACLs answers either "ACL
// support disabled" (HTTP 400) or, as Nomad 2.0.6 does (seen on a real
// agent), HTTP 200 with its placeholder token whose AccessorID is
// "acls-disabled"; any other answer counts as enabled; a transport error
// is returned.
func (a *ACLChecker) Enabled(ctx context.Context, token string) (bool, error) {
	code, body, err := a.do(ctx, http.MethodGet, "/v1/acl/token/self", nil, token, nil)
	if err != nil {
		return true, err
	}
	if code == http.StatusBadRequest && strings.Contains(body, "ACL support disabled") {
		return false, nil
	}
	if code == http.StatusOK {
		var tok struct{ AccessorID string }
		if json.Unmarshal([]byte(body), &tok) == nil && tok.AccessorID == aclsDisabledAccessor {
			return false, nil
		}
	}
	return true, nil
}

// aclsDisabledAccessor is the AccessorID of the token Nomad 2.0.6 reports
// for /v1/acl/token/self when it has ACLs disabled.
const aclsDisabledAccessor = "acls-disabled"

// Token returns what Nomad says about an ACL token: a 401 *Error when the
// token is missing, unknown or expired.
func (a *ACLChecker) Token(ctx context.Context, token string) (TokenInfo, error) {
	if token == "" {
		return TokenInfo{}, Unauthorized("missing Nomad ACL token: send it as X-Nomad-Token or Authorization: Bearer (the impact CLI sends NOMAD_TOKEN or IMPACT_TOKEN)")
	}
	key := hashKey(token, "", "token")
	if e, ok := a.lookup(key); ok {
		return e.info, e.err
	}
	code, body, err := a.do(ctx, http.MethodGet, "/v1/acl/token/self", nil, token, nil)
	if err != nil {
		return TokenInfo{}, Unavailable("cannot check the ACL token with Nomad: %v", err)
	}
	var info TokenInfo
	var res error
	switch {
	case code == http.StatusOK:
		if err := json.Unmarshal([]byte(body), &info); err != nil {
			return TokenInfo{}, Unavailable("decoding Nomad's answer about the token: %v", err)
		}
		if info.AccessorID == aclsDisabledAccessor {
			// Nomad 2.0.6 without ACLs vouches for any string this way.
			info, res = TokenInfo{}, Forbidden("Nomad has ACLs disabled, so it cannot vouch for any token")
		}
	case code == http.StatusBadRequest && strings.Contains(body, "ACL support disabled"):
		res = Forbidden("Nomad has ACLs disabled, so it cannot vouch for any token")
	case code == http.StatusForbidden || code == http.StatusBadRequest || code == http.StatusUnauthorized:
		res = Unauthorized("Nomad does not accept the ACL token: %s", body)
	default:
		return TokenInfo{}, Unavailable("cannot check the ACL token with Nomad: HTTP %d: %s", code, body)
	}
	a.store(key, aclEntry{err: res, info: info})
	return info, res
}

// Allowed returns nil when Nomad lets token use capability in namespace,
// else a 401 (token not valid), 403 (not allowed) or 503 *Error.
func (a *ACLChecker) Allowed(ctx context.Context, token, namespace string, capability Capability) error {
	if _, err := a.Token(ctx, token); err != nil {
		return err
	}
	key := hashKey(token, namespace, string(capability))
	if e, ok := a.lookup(key); ok {
		return e.err
	}
	q := url.Values{"namespace": {namespace}}
	var code int
	var body string
	var err error
	switch capability {
	case CapReadJob:
		code, body, err = a.do(ctx, http.MethodGet, "/v1/job/"+url.PathEscape(probeJob), q, token, nil)
	case CapSubmitJob:
		code, body, err = a.do(ctx, http.MethodPut, "/v1/job/"+url.PathEscape(probeJob)+"/revert", q, token,
			map[string]any{"JobID": probeJob, "JobVersion": 0})
	default:
		return fmt.Errorf("acl checker: unknown capability %q", capability)
	}
	if err != nil {
		return Unavailable("cannot ask Nomad whether the token may %s in namespace %s: %v", capability, namespace, err)
	}
	var res error
	switch {
	case code == http.StatusForbidden && strings.Contains(body, "Permission denied"):
		res = Forbidden("the ACL token may not %s in namespace %q", capability, namespace)
	case code == http.StatusForbidden || code == http.StatusUnauthorized:
		res = Unauthorized("Nomad does not accept the ACL token: %s", body)
	case capability == CapReadJob && (code == http.StatusNotFound || code == http.StatusOK):
	case capability == CapSubmitJob && code != http.StatusOK && strings.Contains(body, "not found"):
	default:
		// Fail closed on any answer the probe does not expect.
		return Unavailable("cannot tell whether the token may %s in namespace %q: Nomad answered HTTP %d: %s", capability, namespace, code, body)
	}
	a.store(key, aclEntry{err: res})
	return res
}

func (a *ACLChecker) do(ctx context.Context, method, path string, q url.Values, token string, body any) (int, string, error) {
	if q == nil {
		q = url.Values{}
	}
	if a.cfg.Region != "" {
		q.Set("region", a.cfg.Region)
	}
	target := a.base + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, "", err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set(TokenHeader, token)
	}
	resp, err := a.cfg.HTTP.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return 0, "", err
	}
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}

func (a *ACLChecker) lookup(key string) (aclEntry, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.cache[key]
	if !ok || !a.cfg.Clock().Before(e.until) {
		return aclEntry{}, false
	}
	return e, true
}

func (a *ACLChecker) store(key string, e aclEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.cfg.Clock()
	if len(a.cache) >= a.cfg.MaxEntries {
		for k, old := range a.cache {
			if !now.Before(old.until) {
				delete(a.cache, k)
			}
		}
		if len(a.cache) >= a.cfg.MaxEntries {
			clear(a.cache)
		}
	}
	e.until = now.Add(a.cfg.CacheTTL)
	a.cache[key] = e
}

// hashKey keys the cache by a hash of the secret, so the cache never holds
// a usable token.
func hashKey(token, namespace, what string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:]) + "\x00" + namespace + "\x00" + what
}
