package gang

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/impact-sched/nomad-impact/auth"
)

// Authorizer decides whether a request to the rendezvous endpoint may go
// ahead; a refusal is an *auth.Error (401, 403 or 503) whose message says
// what is missing.
type Authorizer interface {
	// Member authorizes a member's own request: join and resume (join is
	// the body), heartbeat, exit, leave and GET ?member= (join nil).
	Member(r *http.Request, gangID, member string, join *JoinRequest) error
	// ReadGang authorizes GET of one gang with all its members.
	ReadGang(r *http.Request, gangID string) error
	// ListFilter authorizes GET of the gang list; visible says which
	// gangs the caller may see.
	ListFilter(r *http.Request) (visible func(gangID string) bool, err error)
	// Stop authorizes PUT stop of a gang.
	Stop(r *http.Request, gangID string) error
}

// DevNoAuth lets every request through: the development mode of
// `impact-exec gang-server -dev` and of tests. Anyone who reaches the port
// can join, stop or inspect any gang.
type DevNoAuth struct{}

func (DevNoAuth) Member(*http.Request, string, string, *JoinRequest) error { return nil }
func (DevNoAuth) ReadGang(*http.Request, string) error                     { return nil }
func (DevNoAuth) Stop(*http.Request, string) error                         { return nil }
func (DevNoAuth) ListFilter(*http.Request) (func(string) bool, error) {
	return func(string) bool { return true }, nil
}

// NomadAuth authorizes with Nomad's credentials:
//
//   - a member's own requests need the task's workload identity (verified
//     against Nomad's JWKS, see package auth) for exactly that member: its
//     allocation and task make the member ID, its namespace and job (or the
//     parent of a dispatched/periodic job) the gang's, and a join's body
//     must say the same;
//   - reading one gang: a workload identity of the gang's job, or an ACL
//     token that may read-job in the gang's namespace;
//   - listing gangs: an ACL token (the gangs of namespaces it may read-job
//     in) or a workload identity (its own job's gangs);
//   - stop: an ACL token that may submit-job in the gang's namespace. The
//     impact agent stops gangs through Nomad (it signals and stops
//     allocations), not through this endpoint.
type NomadAuth struct {
	Identities *auth.IdentityVerifier
	ACL        *auth.ACLChecker
}

// IdentityHint is what a task needs in its jobspec so impact-exec can
// present its workload identity for audience aud.
func IdentityHint(aud string) string {
	return fmt.Sprintf(`identity { name = %q aud = [%q] file = true ttl = "1h" }`, IdentityName, aud)
}

// IdentityName is the name of the workload identity impact-exec presents:
// Nomad writes it to the task's secrets/nomad_<name>.jwt (file = true) and
// renews it before it expires.
const IdentityName = "impact"

// SplitGangID returns the namespace of a gang ID "<namespace>:<job>[:<name>]"
// and the rest; ok is false when there is no namespace part.
func SplitGangID(id string) (namespace, rest string, ok bool) {
	ns, rest, ok := strings.Cut(id, ":")
	return ns, rest, ok && ns != "" && rest != ""
}

func (a *NomadAuth) missingIdentity(what string) error {
	return auth.Unauthorized("missing workload identity: %s needs the task's Nomad workload identity (Authorization: Bearer), "+
		"which impact-exec presents when the task has %s", what, IdentityHint(a.Identities.Audience()))
}

// identity verifies the request's workload identity.
func (a *NomadAuth) identity(r *http.Request, what string) (auth.Identity, error) {
	tok := auth.RequestToken(r)
	if tok == "" {
		return auth.Identity{}, a.missingIdentity(what)
	}
	if !auth.LooksLikeJWT(tok) {
		return auth.Identity{}, auth.Unauthorized("%s needs the task's Nomad workload identity, not an ACL token (the task needs %s)",
			what, IdentityHint(a.Identities.Audience()))
	}
	return a.Identities.Verify(r.Context(), tok)
}

// ownsGang reports whether a gang ID belongs to the identity's job:
// "<ns>:<job>", "<ns>:<job>:<name>", or a dispatched/periodic child's.
func ownsGang(id auth.Identity, gangID string) bool {
	ns, rest, ok := SplitGangID(gangID)
	if !ok || ns != id.Namespace {
		return false
	}
	rem, ok := strings.CutPrefix(rest, id.JobID)
	return ok && (rem == "" || rem[0] == ':' || strings.HasPrefix(rem, "/dispatch-") || strings.HasPrefix(rem, "/periodic-"))
}

func (a *NomadAuth) Member(r *http.Request, gangID, member string, join *JoinRequest) error {
	what := fmt.Sprintf("member %s of gang %s", member, gangID)
	id, err := a.identity(r, what)
	if err != nil {
		return err
	}
	if want := MemberID(id.AllocID, id.Task); member != want {
		return auth.Forbidden("the workload identity of %s may act only as member %s, not %s", id, want, member)
	}
	if !ownsGang(id, gangID) {
		return auth.Forbidden("the workload identity of %s may not join gang %s: the gang is not of its job (want %s:%s[:<name>])",
			id, gangID, id.Namespace, id.JobID)
	}
	if join == nil {
		return nil
	}
	_, rest, _ := SplitGangID(gangID)
	switch {
	case join.AllocID != id.AllocID:
		return auth.Forbidden("join: alloc_id %q is not the identity's allocation %s", join.AllocID, id.AllocID)
	case join.Task != id.Task:
		return auth.Forbidden("join: task %q is not the identity's task %s", join.Task, id.Task)
	case join.Namespace != "" && join.Namespace != id.Namespace:
		return auth.Forbidden("join: namespace %q is not the identity's namespace %s", join.Namespace, id.Namespace)
	case !id.OwnsJob(join.JobID) || (rest != join.JobID && !strings.HasPrefix(rest, join.JobID+":")):
		return auth.Forbidden("join: job_id %q is not the identity's job %s, or not the job of gang %s", join.JobID, id.JobID, gangID)
	}
	if join.Namespace == "" {
		join.Namespace = id.Namespace
	}
	return nil
}

func (a *NomadAuth) ReadGang(r *http.Request, gangID string) error {
	tok := auth.RequestToken(r)
	if auth.LooksLikeJWT(tok) {
		id, err := a.Identities.Verify(r.Context(), tok)
		if err != nil {
			return err
		}
		if !ownsGang(id, gangID) {
			return auth.Forbidden("the workload identity of %s may read only its own job's gangs, not %s", id, gangID)
		}
		return nil
	}
	ns, _, ok := SplitGangID(gangID)
	if !ok {
		return auth.Forbidden("gang %s names no namespace (<namespace>:<job>): only a development server shows it", gangID)
	}
	if tok == "" {
		return auth.Unauthorized("missing credential: reading gang %s needs a Nomad ACL token that may read-job in namespace %s, or a workload identity of its job", gangID, ns)
	}
	return a.ACL.Allowed(r.Context(), tok, ns, auth.CapReadJob)
}

func (a *NomadAuth) ListFilter(r *http.Request) (func(string) bool, error) {
	tok := auth.RequestToken(r)
	if tok == "" {
		return nil, auth.Unauthorized("missing Nomad ACL token: listing gangs needs a token (X-Nomad-Token or Authorization: Bearer); the list shows the namespaces it may read-job in")
	}
	if auth.LooksLikeJWT(tok) {
		id, err := a.Identities.Verify(r.Context(), tok)
		if err != nil {
			return nil, err
		}
		return func(g string) bool { return ownsGang(id, g) }, nil
	}
	if _, err := a.ACL.Token(r.Context(), tok); err != nil {
		return nil, err
	}
	ctx := r.Context()
	seen := map[string]bool{}
	return func(g string) bool {
		ns, _, ok := SplitGangID(g)
		if !ok {
			return false
		}
		v, done := seen[ns]
		if !done {
			v = a.ACL.Allowed(ctx, tok, ns, auth.CapReadJob) == nil
			seen[ns] = v
		}
		return v
	}, nil
}

func (a *NomadAuth) Stop(r *http.Request, gangID string) error {
	ns, _, ok := SplitGangID(gangID)
	if !ok {
		return auth.Forbidden("gang %s names no namespace (<namespace>:<job>): only a development server stops it", gangID)
	}
	tok := auth.RequestToken(r)
	switch {
	case tok == "":
		return auth.Unauthorized("missing Nomad ACL token: stopping gang %s needs a token that may submit-job in namespace %s (X-Nomad-Token or Authorization: Bearer)", gangID, ns)
	case auth.LooksLikeJWT(tok):
		return auth.Forbidden("stopping gang %s needs a Nomad ACL token that may submit-job in namespace %s; a workload identity acts only for its own member", gangID, ns)
	}
	return a.ACL.Allowed(r.Context(), tok, ns, auth.CapSubmitJob)
}
