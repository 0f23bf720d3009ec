// Package agent is `impact agent`: the service operators run next to Nomad.
// It wires the pure scheduling core (scheduler/cluster, policy, engine) to
// Nomad through the adapter in scheduler/nomad, and serves what it decided.
//
// # The loop
//
// Every agent watches Nomad's event stream (through the adapter) and keeps
// the model current; every agent runs the scheduling cycle (snapshot ->
// engine.Decide) on a timer and after a debounced burst of events, so that
// /v1/queue and /v1/explain are answered by standbys too. Only the leader,
// elected with Nomad's Variables lock, acts on the plan (admit, preempt)
// and writes the explanation Variables. A new leader first loads the durable
// state (fair-share usage, admission intents, preemption records) from Nomad
// Variables, so it resumes where the old one stopped and never admits a job
// twice.
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
// (scheduler/nomad/nomadfake) alike.
//
// # HTTP API
//
//	GET /v1/health           agentapi.Health; 200 when ok, 503 when degraded
//	GET /v1/queue            agentapi.Queue
//	GET /v1/explain/<job>    agentapi.Explanation (?namespace=)
//	GET /metrics             Prometheus text format (armon/go-metrics sink)
//	    /v1/gang/...         the task driver's gang rendezvous (driver/gang)
package agent
