// Package gang is the gang barrier and rendezvous protocol shared by two
// binaries: the HTTP server side (an in-memory registry, mounted by the
// impact agent under /v1/gang/, or served standalone by `impact-exec
// gang-server` for tests and e2e runs) and the client side used by each
// impact-exec task's supervisor and by `impact-exec gang-join` (the
// barrier as a prestart task beside a task of any driver). A member joins
// its gang and starts its command only once every member has arrived, with
// WORLD_SIZE, RANK, MASTER_ADDR and the rest; when one member fails or is
// stopped the others learn it on their next heartbeat and stop, so the
// gang is requeued whole. README.md in this directory is the protocol's
// reference: names, the HTTP endpoint, who may call it, errors, the
// lifecycle of a gang, restarts of the server.
//
// # Layout
//
//	api.go       the wire types: State, MemberState, Status, JoinRequest, ...
//	registry.go  Registry: the in-memory gangs, joins, heartbeats, exits, stops
//	ranks.go     a ready gang's Status and its ranks (RANK, NODE_RANK, LOCAL_RANK)
//	server.go    Handler: the HTTP endpoint over a Registry, mounted at PathPrefix
//	auth.go      Authorizer: NomadAuth (workload identities, ACL tokens), DevNoAuth
//	client.go    Client: the calls, by URL or through a resolver, with a Credential
//	barrier.go   Client.Barrier (join, wait, heartbeat) and the Assignment it returns
//	consul.go    ConsulResolver: the leading impact agent's instance in Consul
//
// # Rules
//
//   - It lives outside driver/ and scheduler/ because both import it and
//     neither owns it; it depends only on package auth, never on the driver
//     or the scheduler.
//   - The registry has no background goroutine: member TTLs are checked
//     lazily on every request against the injected Clock, so tests drive time.
//   - Answers to a member's own requests list only that member, so a large
//     gang costs O(n) traffic per change.
//   - A restart of the server never stops a running gang: running members
//     re-register with JoinRequest.Resume and keep their ranks.
//   - The Handler asks its Authorizer before acting; anything reachable
//     from other hosts uses NewHandlerWith and NomadAuth, never DevNoAuth.
package gang
