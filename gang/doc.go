// Package gang is the gang barrier and rendezvous protocol shared by two
// binaries: the HTTP server side (an in-memory registry, mounted by the
// impact agent under /v1/gang/, or served standalone by `impact-exec
// gang-server` for tests and e2e runs) and the client side used by each
// impact-exec task's supervisor and by `impact-exec gang-join` (the
// barrier as a prestart task beside a task of any driver). It lives outside driver/ and scheduler/
// because both import it and neither owns it; it depends only on package
// auth, never on the driver or the scheduler.
//
// # Why
//
// Distributed training needs every member of a job started together and
// told who its peers are. A member that starts alone holds GPUs idle. So a
// task of driver impact-exec first joins its gang here and only starts its
// command once every member has arrived; it then gets WORLD_SIZE, RANK,
// NODE_RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT. When
// one member fails or is stopped, the registry marks the gang failed or
// stopping and every other member learns it on its next heartbeat, sends the
// job's checkpoint signal to its process, and stops, so the gang is requeued
// whole.
//
// # Identity
//
// A gang is named by a string ID; the driver's default is
// "<namespace>:<job_id>" (the whole job forms one gang), a task config can
// narrow it ("<namespace>:<job_id>:<name>"). A member is one task of one
// allocation, named "<alloc_id>.<task>". IDs are path segments and are
// escaped with url.PathEscape by the client.
//
// # HTTP endpoint (all bodies JSON; mounted under /v1/gang/)
//
//	GET    /v1/gang/                                   list every gang ([]Status)
//	GET    /v1/gang/{gang}?index=N&wait=D              one gang (Status); with index,
//	                                                   blocks until Status.Index > N or
//	                                                   D (default 30s, max 5m) passes
//	PUT    /v1/gang/{gang}/members/{member}            join (JoinRequest) -> Status;
//	                                                   idempotent for the same member;
//	                                                   with "resume": re-register a
//	                                                   running member (see below)
//	PUT    /v1/gang/{gang}/members/{member}/heartbeat  refresh the member's TTL -> Status
//	PUT    /v1/gang/{gang}/members/{member}/exit       the member's process ended
//	                                                   (ExitRequest) -> Status
//	DELETE /v1/gang/{gang}/members/{member}            leave before starting (barrier
//	                                                   timeout or stop) -> Status
//	PUT    /v1/gang/{gang}/stop                        ask every member to checkpoint and
//	                                                   stop (StopRequest), e.g. preemption
//
// # Who may call it
//
// The handler asks an Authorizer before acting. NomadAuth (the impact
// agent, `impact-exec gang-server`) wants the member's own Nomad workload
// identity (Authorization: Bearer) for join, heartbeat, exit, leave and
// GET ?member=: its allocation and task make the member ID, its namespace
// and job (or the parent of a dispatched/periodic job) the gang's, and a
// join's body must say the same; a gang belongs to the job of its first
// member. GET of a gang wants a workload identity of its job or an ACL
// token with read-job in its namespace, the list shows what the credential
// may read, and stop wants an ACL token with submit-job in the gang's
// namespace. Refusals are 401 (no or invalid credential) or 403 (valid but
// not for this), 503 when Nomad cannot be asked; the message names what is
// missing. DevNoAuth (tests, gang-server -dev) lets everything through.
//
// Answers to a member's own requests (join, heartbeat, exit, leave, and
// GET with ?member=ID) list only that member in Status.Members, so a large
// gang costs O(n) traffic per change; GET without member lists all.
//
// Errors come back as a non-2xx status with an ErrorResponse body: 400 for a
// malformed request (names the field), 401/403 for a refused credential,
// 404 for an unknown gang or member, 409 for a conflict (gang full, size
// mismatch, a member of another job, gang still stopping from a previous
// run: retry later), 405 for a wrong method.
//
// # Lifecycle of a gang
//
//	forming  -- last member joins -->  ready  -- all members exit 0 -->  done
//	   |                                 |
//	   |                                 +-- a member exits non-zero or its TTL
//	   |                                 |   expires --> failed
//	   |                                 +-- a member is stopped, or PUT stop --> stopping
//	   +-- members leave / expire: they are simply removed, the gang keeps forming
//
// The size of a gang comes from the first join that names one
// (JoinRequest.Size); when none does, the server asks its SizeResolver (the
// impact agent answers with the job's total allocation count). Ranks are
// assigned when the gang becomes ready, ordered by (group, alloc index,
// task, member) so they are stable; NODE_RANK numbers distinct nodes in rank
// order; MASTER_ADDR/PORT is rank 0's address. A gang whose members have all
// exited is reset by the next join (a new generation), so a requeued job
// rendezvouses again; a join to a gang that is still failed/stopping with
// live members gets 409 and the client retries until its barrier timeout.
//
// # Restarts of the rendezvous server
//
// The registry is in memory. When the server restarts (or an impact agent
// fails over) it answers 404 for gangs it no longer knows: members still
// waiting at the barrier simply join again; running members re-register
// with JoinRequest.Resume (their generation and ranks), which recreates the
// gang as ready with the ranks already in use, so a restart never stops a
// running gang and failure propagation keeps working afterwards.
//
// Clients reach the server by URL or through Consul (ConsulResolver: the
// leading impact agent's "impact-scheduler" instance, resolved again after a
// transport error, so members follow a failover and resume there). Without
// any server, the driver rendezvouses through Nomad's native service
// discovery instead (driver/internal/nomadbarrier, driver-only: it returns
// this package's Assignment and errors).
//
// Member TTLs are checked lazily on every request against the server's
// injected clock, so the registry has no background goroutine and tests can
// drive time.
package gang
