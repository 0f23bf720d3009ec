// Package nomadfake is an in-process fake of the parts of Nomad's HTTP API
// that the impact scheduler uses. It answers like the real Nomad 2.0.6 agent
// recorded in testdata/ (status codes, JSON shapes, X-Nomad-* headers, error
// texts) and simulates enough of Nomad's behaviour for the park / admit /
// preempt cycle:
//
//   - a job registered into a node pool without nodes stays pending with its
//     allocations queued and a blocked evaluation;
//   - a job whose groups are pinned to nodes (constraints on
//     ${node.unique.id}) gets allocations there, which the simulated client
//     starts (running) unless told otherwise;
//   - stopping an allocation marks it stop/"alloc is being migrated" and the
//     client completes it; the job's group then needs a replacement, which is
//     placed when possible or queued;
//   - a task that exits non-zero is restarted in place while its group's
//     restart block allows (Nomad's batch default: 3 attempts); with
//     `restart { attempts = 0 mode = "fail" }` its allocation fails at once.
//     A failed allocation is never rescheduled (as `reschedule { attempts =
//     0 }`), and a batch job with nothing live or queued is dead;
//   - freed capacity unblocks blocked evaluations, as Nomad's blocked-evals
//     tracker does.
//
// It also serves blocking queries (?index=&wait=), the event stream
// (/v1/event/stream, NDJSON with {} heartbeats, ?index= resume, topic
// filters), variables with check-and-set and variable locks. Test controls
// (UpsertNode, DropStreams, Restart, FailNext, SetClientBehavior, ...) let
// tests inject nodes with GPU devices and failures.
//
// Everything lives under one mutex; writes bump the Raft-like index and
// wake blocking queries and streams. The fake never sleeps on its own except
// for heartbeats, so tests stay fast and deterministic.
//
// It is a test double: internal to scheduler/ so that no binary outside
// it can link it, and `make check` refuses any non-test importer.
//
// # Layout
//
//	server.go    Server, Options, New, the HTTP front (routing, answers, blocking
//	             queries, headers) and the test controls for clocks and signals
//	faults.go    injected faults: FailNext, FailAfterNext (a lost answer), Hang,
//	             AfterNext (a client dying after a write), DropStreams, Restart
//	routes.go    dispatch: one router per API area (jobs, allocations, evaluations,
//	             nodes, variables, the rest)
//	shape.go     answers shaped like the recorded 2.0.6 ones (testdata/)
//	jobs.go      register (EnforceIndex, versions), deregister (stop, purge), plan
//	jobreads.go  job, job list, summary, a job's allocations and evaluations
//	evals.go     evaluation processing: placing, blocked evaluations, unblocking,
//	             new allocations (resources, names, replacements)
//	sched.go     the fake's scheduler: node selection, constraints, device fit
//	allocs.go    the simulated client (start, stop, signal, task exits), allocation reads
//	nodes.go     nodes (status, lost allocations), node pools, GPUNode
//	gpu.go       TopologyNode: a node of impact-gpu's islands
//	events.go    the event stream (NDJSON, heartbeats, index resume, topics), Events
//	vars.go      Variables with check-and-set, and locks
//	identity.go  workload identities (JWKS, SignIdentity)
//	inspect.go   reading and changing jobs directly from tests
package nomadfake
