// Package auth checks the Nomad credentials that the impact APIs accept:
// a task's workload identity (a JWT signed by the Nomad servers), and the
// ACL tokens of people and tools. The impact agent's HTTP API
// (scheduler/agent) and the gang rendezvous server (package gang, mounted by
// the agent and served by `impact-exec gang-server`) both use it; it has no
// dependency on either.
//
// # Why Nomad's credentials
//
// Nomad already knows who may do what: workload identities name the
// namespace, job, allocation and task they were issued to, and ACL tokens
// carry the policies an operator was given. The impact APIs have no users
// of their own; they accept Nomad's credentials and ask Nomad (or its
// public keys) about them, so there is one place where access is granted.
//
// # Workload identities (IdentityVerifier)
//
// A JWT is accepted when its signature checks against a key of Nomad's
// JWKS (GET /.well-known/jwks.json, no token needed; cached, refreshed
// every Refresh and, at most once per MinRefresh, when a token names an
// unknown key ID: Nomad rotates its keys), it carries the configured
// audience (aud), an expiry (exp) that has not passed, and the claims of a
// task's identity (nomad_namespace, nomad_job_id, nomad_allocation_id,
// nomad_task). Tokens without an expiry are refused: Nomad's default
// identity never expires and is meant for Nomad itself, so the impact
// rendezvous wants its own identity with a ttl, which Nomad renews.
//
// # ACL tokens (ACLChecker)
//
// Nomad has no endpoint that answers "may token T do C in namespace N",
// so the checker asks Nomad with T a request that needs C, on a job ID
// that cannot exist (job IDs may not contain spaces), and reads the answer:
//
//	read-job    GET /v1/job/<probe>?namespace=N          404 allowed, 403 denied
//	submit-job  PUT /v1/job/<probe>/revert?namespace=N   "not found" allowed, 403 denied
//
// Neither request changes anything. Any other answer is "cannot check"
// (503 to the caller, never cached): the checker fails closed. A token is
// first looked up with GET /v1/acl/token/self, which also tells whether
// Nomad has ACLs enabled at all ("ACL support disabled", or on Nomad 2.0.6
// a 200 with the placeholder token "acls-disabled"). Without ACLs Nomad
// vouches for any string, so no token is accepted then (403). Answers are
// cached for CacheTTL (a revoked token keeps working for at most that
// long), keyed by a hash of the secret, never the secret itself.
//
// # Errors
//
// Every refusal is an *Error with the HTTP status to answer: 401 when the
// credential is missing or not valid, 403 when it is valid but not allowed,
// 503 when Nomad could not be asked. Messages name what is missing.
package auth
