// Package agent is `impact agent`: the service operators run next to Nomad.
// It wires the pure scheduling core (scheduler/cluster, policy, engine) to
// Nomad through the adapter in scheduler/nomad, and serves what it decided.
// README.md in this directory is the operator's reference: the HTTP API,
// who may call each endpoint, and the threat model.
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
// the executor settle the previous leader's intents before its first
// decision: it never admits a job twice, never preempts a gang already
// stopping, and restarts a moved job where it was moved to
// (engine.Engine.Preempting).
//
// # Layout
//
// Agent (agent.go) is a short composition; its doc comment names the parts
// (leadership, cycler, durable, explainWriter, health, the stats poller and
// queue, nomadState) and their files. Beside them: gangs.go (a gang's runs
// that lost a member, back-off, impact_max_failures), startup.go and
// consul*.go (the parking pool, the Consul registration kept repaired),
// nomad_reconcile.go (what the agent keeps in Nomad, written again when
// lost). Service (wire.go) builds an Agent from a config, its ports
// (ports.go) wired to scheduler/nomad (adapters.go), the Consul registrar
// and the HTTP API (http.go, ui.go, auth.go).
//
// # Rules
//
//   - One goroutine (the loop) runs cycles and leadership changes, so the
//     engine, the cycle's memory and the durable state take no lock; the
//     parts other goroutines reach have their own.
//   - Each part has its own tests and, where it logs, its own named logger
//     (leader, cycle, state, explain, devicestats).
//   - The agent reaches Nomad only through the interfaces in ports.go, so
//     its tests run against fakes and the in-process Nomad fake alike.
//   - One explanation: the engine's engine.Explanation goes unchanged into
//     agentapi.Explanation (view.go), beside what only the agent knows
//     (state in Nomad, the decision carried out, nodes, history); a running
//     job keeps the one it was admitted with. /v1/explain, `impact
//     explain`, the job's page and the Variable (VariableItems: all but
//     what changes every cycle, the wait and the utilisation) render it.
//   - Callers act with their own credentials, never the agent's nomad.token.
package agent
