package agent

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/auth"
)

// APIAuth decides who may read the agent's API. Deciding lives here; the
// handlers only filter by what it answers.
type APIAuth interface {
	// ReadFilter authorizes a read of /v1/queue or /v1/explain and
	// returns, per namespace, nil when the caller may see its jobs or the
	// refusal (an *auth.Error) when not.
	ReadFilter(r *http.Request) (func(namespace string) error, error)
	// Metrics authorizes GET /metrics.
	Metrics(r *http.Request) error
}

// OpenAuth lets everyone read everything (auth.read = "open", and the
// agent's tests).
type OpenAuth struct{}

func (OpenAuth) ReadFilter(*http.Request) (func(string) error, error) {
	return func(string) error { return nil }, nil
}
func (OpenAuth) Metrics(*http.Request) error { return nil }

// Read modes of NomadAPIAuth (config auth.read).
const (
	ReadAuto  = "auto"
	ReadToken = "token"
	ReadOpen  = "open"
)

// NomadAPIAuth checks Nomad ACL tokens: reads need a token (always with
// ReadToken; with ReadAuto only while Nomad has ACLs enabled) and see the
// namespaces it may read-job in; with MetricsToken /metrics needs any
// valid token.
type NomadAPIAuth struct {
	ACL          *auth.ACLChecker
	Read         string
	MetricsToken bool
	// AgentToken is the agent's own Nomad token, used to ask Nomad whether
	// ACLs are enabled (ReadAuto).
	AgentToken string
	Clock      func() time.Time
	Logger     hclog.Logger

	mu        sync.Mutex
	aclOn     bool
	checkedAt time.Time
}

// aclRecheck is how long Nomad's answer "ACLs enabled or not" is reused.
const aclRecheck = time.Minute

// aclsEnabled asks Nomad (at most once per aclRecheck) whether it enforces
// ACLs; when Nomad cannot be asked, the answer is yes (fail closed).
func (a *NomadAPIAuth) aclsEnabled(ctx context.Context) bool {
	now := time.Now
	if a.Clock != nil {
		now = a.Clock
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.checkedAt.IsZero() && now().Sub(a.checkedAt) < aclRecheck {
		return a.aclOn
	}
	on, err := a.ACL.Enabled(ctx, a.AgentToken)
	if err != nil {
		if a.Logger != nil {
			a.Logger.Warn("cannot ask Nomad whether ACLs are enabled; requiring tokens", "error", err)
		}
		return true
	}
	a.aclOn, a.checkedAt = on, now()
	return on
}

func (a *NomadAPIAuth) ReadFilter(r *http.Request) (func(string) error, error) {
	if a.Read == ReadOpen || (a.Read == ReadAuto && !a.aclsEnabled(r.Context())) {
		return OpenAuth{}.ReadFilter(r)
	}
	tok := auth.RequestToken(r)
	if _, err := a.ACL.Token(r.Context(), tok); err != nil {
		return nil, err
	}
	ctx := r.Context()
	seen := map[string]error{}
	return func(ns string) error {
		err, ok := seen[ns]
		if !ok {
			err = a.ACL.Allowed(ctx, tok, ns, auth.CapReadJob)
			seen[ns] = err
		}
		return err
	}, nil
}

func (a *NomadAPIAuth) Metrics(r *http.Request) error {
	if !a.MetricsToken {
		return nil
	}
	_, err := a.ACL.Token(r.Context(), auth.RequestToken(r))
	return err
}
