// Package agent is `impact agent`: the service operators run next to Nomad.
// It wires the pure scheduling core (scheduler/cluster, policy, engine) to
// Nomad through the adapter in scheduler/nomad, and serves what it decided.
//
// # The loop
//
// Every agent watches Nomad's event stream (through the adapter) and keeps
// the model current; every agent runs the scheduling cycle (snapshot ->
// engine.Decide) on a timer and after a debounced burst of events (the
// window a multiple of the last cycle's cost, Debounce at most), so that
// /v1/queue and /v1/explain are answered by standbys too. Only the leader,
// elected with Nomad's Variables lock, acts on the plan (admit, preempt)
// and writes the explanation Variables. A new leader first loads the durable
// state (fair-share usage, preemption records, idle requeue counts) and has
// the executor settle the previous leader's admission and preemption
// intents, before its first decision, so it resumes where the old one
// stopped: it never admits a job twice, never preempts a gang already
// stopping, and restarts a moved job where it was moved to
// (engine.Engine.Preempting).
//
// # Layout
//
// Agent (agent.go) is a short composition; Run wires these parts, each
// with one job, its own tests and, where it logs, its own named logger
// (leader, cycle, state, explain, devicestats):
//
//	leadership    leader.go       the election: campaigns for the lock, holds the term's
//	                              context, asks at a bounded rate who leads (standbys),
//	                              keeps Consul's leader tag
//	cycler        cycle.go        one cycle: recovery (a term's first), snapshot,
//	                              engine.Decide, Apply while leading
//	              record.go       what the executor did: history, back-offs, what the
//	                              engine must forget
//	              gangs.go        a gang's life: runs in a row that lost a member (durable,
//	                              reset by a whole run), back-off, impact_max_failures,
//	                              gangs ended failed as explain shows them
//	              view.go         the view /v1/queue, /v1/explain and the pages serve
//	durable       state.go        durable state: loaded into the engine's memory when a
//	                              term starts, the previous leader's intents recovered
//	                              before the term acts, saved while leading
//	explainWriter explainer.go    the explanation Variables: written in the background,
//	                              deleted when a job leaves for good, swept once per term
//	health        health.go       what /v1/health reports
//	utilQueue     utilization.go  the device stats poll, and its samples queued for the
//	              idle.go         engine
//	(Agent)       startup.go      the parking pool, the Consul deregistration
//	              consul_reconcile.go the Consul registration, compared with Consul's copy
//	                              and repaired at every check interval
//	nomadState    nomad_reconcile.go what the agent keeps in Nomad (the parking pool, the
//	                              durable state, the lease), checked at the end of a cycle
//	                              every ReconcileEvery and written again when lost
//
// Service (wire.go) builds an Agent from a config, with its ports wired to
// scheduler/nomad (adapters.go), the Consul registrar and the HTTP API
// (http.go, ui.go, auth.go).
//
// The loop goroutine runs the cycles and the leadership changes one at a
// time, so the engine, the cycle's memory and the durable state need no
// lock; the parts other goroutines reach (leadership from the campaign,
// explainWriter from its writers, health and the view from HTTP handlers,
// the stats queue from the poller) have their own.
//
// # One explanation
//
// The engine explains every queued job (engine.Explanation). The view
// puts that value, unchanged, into the job's agentapi.Explanation, next
// to what only the agent knows (the job's state in Nomad, the decision it
// carried out, the nodes, the history); a running job keeps the
// explanation it was admitted with. /v1/explain serves it, `impact
// explain` and the job's page render it, and VariableItems renders it for
// the Variable: everything /v1/explain shows but what changes every cycle
// (the wait, the utilisation percentage).
//
// # Utilisation
//
// When a UtilizationSource is set (production: nomad.DeviceStatsReader,
// device_stats in the config), a goroutine apart from the loop polls, while
// this agent leads, the device stats of every ready node with GPUs each
// StatsInterval and serves per-GPU, per-node and cluster gauges from the
// last poll (utilization.go).
// A slow client never delays a decision; a node that cannot be read is
// logged and counted, and its series disappear instead of freezing.
//
// # Ports
//
// The agent consumes the adapter through the small interfaces in ports.go,
// so its tests run against fakes and against the in-process Nomad fake
// (scheduler/internal/nomadfake) alike.
//
// # HTTP API and who may call it
//
// Credentials are Nomad's own (package auth): ACL tokens, sent as
// X-Nomad-Token or Authorization: Bearer and checked with Nomad (cached for
// auth.token_cache_ttl), and workload identities, JWTs checked against
// Nomad's JWKS. With auth.read = "auto", reads need a token only while
// Nomad has ACLs enabled.
//
//	GET  /v1/health                anyone (load balancers, Consul checks)
//	GET  /v1/queue                 ACL token; jobs of namespaces it may read-job in
//	GET  /v1/explain/<job>         ACL token that may read-job in the job's namespace
//	GET  /ui/, /ui/job/<ns>/<job>  as /v1/queue and /v1/explain; a browser's token comes
//	                               from the HttpOnly cookie POST /ui/login sets (anyone may
//	                               POST /ui/login and /ui/logout: they only set the cookie)
//	GET  /metrics                  anyone (auth.metrics = "open") or any valid ACL token ("token")
//	PUT  /v1/gang/{g}/members/{m}  member m's workload identity: its allocation.task is m,
//	PUT  .../{m}/heartbeat, /exit  its namespace and job (or a dispatched/periodic
//	DEL  .../members/{m}           child's parent) are gang g's; a join's body must agree
//	GET  /v1/gang/{g}?member=m     member m's workload identity
//	GET  /v1/gang/{g}              a workload identity of g's job, or read-job in g's namespace
//	GET  /v1/gang/                 ACL token: gangs of namespaces it may read-job in;
//	                               workload identity: its own job's gangs
//	PUT  /v1/gang/{g}/stop         ACL token that may submit-job in g's namespace
//
// A gang's size is resolved by the agent itself (from the job in its
// model), for the authenticated member's job only. The agent stops gangs
// by signalling and stopping allocations through Nomad, never through
// /v1/gang/.
//
// # Threat model
//
// The API listens where impact-exec on every GPU node reaches it, so it
// must assume a hostile network. What each credential protects:
//
//   - A workload identity lets one task act as its own gang member: join
//     (and, as rank 0, name MASTER_ADDR for its peers), heartbeat, report
//     its exit, read its gang. It cannot act for another allocation, join
//     another job's gang, or stop a gang. It is issued by the Nomad servers
//     to that task only; impact-exec reads it from the task's secrets dir
//     (identity { name = "impact" aud = ["impact"] file = true ttl = "1h" })
//     on every call, so Nomad's renewals are used. Only identities with an
//     expiry and the configured audience are accepted: Nomad's default
//     identity never expires and is meant for Nomad itself. Anyone who can
//     read a task's secrets dir (root on its node, `nomad alloc fs` with
//     read-fs) can act as that member until the token expires.
//   - An ACL token reads the queue and explanations of the namespaces it
//     may read-job in (positions and the cluster summary are global), and
//     stops gangs where it may submit-job, i.e. where its holder could
//     stop the job in Nomad anyway. A revoked token works for at most
//     auth.token_cache_ttl more.
//   - TLS (http.tls_cert/tls_key) keeps tokens and identities from being
//     read or replayed off the wire; http.tls_client_ca (mTLS) also keeps
//     clients without a certificate of that CA from connecting at all.
//     Without TLS, anyone on the path can take a credential and use it
//     until it expires (tokens: until revoked).
//   - /v1/health (name, leadership, cycle counters) and, with
//     auth.metrics = "open", /metrics are readable by anyone who reaches
//     the port.
//   - With Nomad's ACLs disabled Nomad vouches for any token, so the
//     agent accepts none: reads are open with auth.read = "auto" (refused
//     with "token"), gang stop and auth.metrics = "token" are refused.
//     Workload identities work either way (Nomad signs them regardless).
//   - auth.gang = "open" (loopback only) and `impact-exec gang-server -dev`
//     authenticate nothing: for development on one machine.
//
// The agent's own Nomad token (nomad.token) is never sent to callers and
// is not used for their requests: each check runs with the caller's
// credential, so no caller gains the agent's privileges.
package agent
