// Package agentapi is the wire contract of the `impact agent` HTTP API: the
// JSON bodies of /v1/health, /v1/queue and /v1/explain/<job>, and a small
// client the `impact queue` / `impact explain` commands (and scripts written
// in Go) use. It holds no logic of the agent: besides the agent's own
// words for a job (its state, decision, summary, history) an Explanation
// carries the engine's explanation (engine.Explanation) as the engine
// produced it, so the API, the CLI, the job's page and its Nomad Variable
// all render that one value and nothing is copied into a second shape.
// It imports only the pure core (engine, policy, jobspec), never the
// agent.
package agentapi

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// DefaultAddress is where `impact agent` listens unless configured
// otherwise, and where the CLI looks unless IMPACT_ADDR or -address says.
const DefaultAddress = "http://127.0.0.1:4680"

// AddressEnv is the environment variable naming the agent's address.
const AddressEnv = "IMPACT_ADDR"

// Health is GET /v1/health. Status is "ok" when the agent can do its job
// (connected to Nomad, cycles succeeding or it is a healthy follower) and
// "degraded" otherwise, with the reasons in Problems; the HTTP status is 200
// for ok and 503 for degraded, so a Consul HTTP check can use it directly.
type Health struct {
	Status  string `json:"status"`
	Name    string `json:"name"`
	Version string `json:"version"`
	Leader  bool   `json:"leader"`
	// LeaderName is the agent holding the leader lock, when known.
	LeaderName string `json:"leader_name,omitempty"`
	// LeaderAlive (standbys) says whether the leader renews its lease;
	// absent on the leader and when no lease is known.
	LeaderAlive *bool    `json:"leader_alive,omitempty"`
	Problems    []string `json:"problems,omitempty"`
	// LastCycle is when the last scheduling cycle finished, if any.
	LastCycle *time.Time `json:"last_cycle,omitempty"`
	// LastCycleError is the error of the last cycle, empty when it worked.
	LastCycleError string `json:"last_cycle_error,omitempty"`
	// Cycles counts scheduling cycles since start.
	Cycles uint64 `json:"cycles"`
	// EventIndex is the Nomad index the agent's model is current to.
	EventIndex uint64 `json:"event_index"`
}

// Health states.
const (
	StatusOK       = "ok"
	StatusDegraded = "degraded"
)

// Job states in the queue.
const (
	StateWaiting   = "waiting"   // parked, waiting for its turn or for capacity
	StateAdmitting = "admitting" // admitted, its allocations not all running yet
	StateRunning   = "running"   // admitted and running
	StateInvalid   = "invalid"   // parked because its impact_* meta is bad
	// StateFailed: a gang that lost a member, stopped whole and ended
	// failed (impact_on_failure = "fail", or impact_max_failures reached);
	// shown by explain only, for a day, not listed in the queue.
	StateFailed = "failed"
)

// Queue is GET /v1/queue: every job the scheduler manages, waiting ones
// first in the order they will be admitted.
type Queue struct {
	// GeneratedAt is when the cycle that produced this view ran.
	GeneratedAt time.Time `json:"generated_at"`
	// Leader is false when this agent is a standby: the view is computed
	// the same way but not acted on.
	Leader bool    `json:"leader"`
	Jobs   []Entry `json:"jobs"`
	// Cluster is the four-layer summary at GeneratedAt.
	Cluster ClusterSummary `json:"cluster"`
}

// ClusterSummary is the pyramid's bottom layers at a glance.
type ClusterSummary struct {
	HealthyGPUs   int `json:"healthy_gpus"`
	AllocatedGPUs int `json:"allocated_gpus"`
	WaitingJobs   int `json:"waiting_jobs"`
	WaitingGPUs   int `json:"waiting_gpus"`
}

// Entry is one managed job.
type Entry struct {
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	// Position is the 1-based place in the waiting queue; 0 when the job is
	// not waiting (admitting or running).
	Position int    `json:"position"`
	State    string `json:"state"`
	Tier     string `json:"tier,omitempty"`
	Project  string `json:"project,omitempty"`
	// GPUs is the job's total GPU ask over all its allocations.
	GPUs int `json:"gpus"`
	// Allocations is the number of allocations of the gang.
	Allocations int `json:"allocations"`
	// Score is the impact score (higher is admitted first): the total of
	// the engine's score, whose terms an Explanation lists (Terms).
	Score float64 `json:"score"`
	// Since is when the job started waiting (or was admitted).
	Since time.Time `json:"since"`
	// WaitSeconds is GeneratedAt - Since for waiting jobs.
	WaitSeconds float64 `json:"wait_seconds"`
	// Summary is one short sentence for people: what the job waits for,
	// or where it stands. Reason has the details.
	Summary string `json:"summary,omitempty"`
	// Reason says in words why the job is where it is: the scheduler's
	// full account, clauses separated by "; ".
	Reason string `json:"reason,omitempty"`
	// Errors lists problems with the job's impact_* meta; a job with errors
	// stays parked until they are fixed.
	Errors []string `json:"errors,omitempty"`
	// WalltimeSeconds is the job's impact_walltime and ProgressSeconds
	// its impact_progress, the work its earlier runs saved (a parked job
	// carries it to its next run): the scheduler expects the next run to
	// need the walltime less the progress (RunLine). 0: not given.
	WalltimeSeconds float64 `json:"walltime_seconds,omitempty"`
	ProgressSeconds float64 `json:"progress_seconds,omitempty"`

	// The utilisation layer, for running jobs: Utilization is the latest
	// mean utilisation of the job's GPUs in percent (nil: unknown);
	// IdleSeconds how long it has stayed below its tier's idle threshold;
	// Idle once that lasted the tier's idle duration, Hung when every
	// allocation is idle at once; IdleAction the tier's idle action and
	// IdleNote what is done about it.
	Utilization *float64  `json:"utilization_percent,omitempty"`
	IdleSeconds float64   `json:"idle_seconds,omitempty"`
	IdleSince   time.Time `json:"idle_since,omitzero"`
	Idle        bool      `json:"idle,omitempty"`
	Hung        bool      `json:"hung,omitempty"`
	IdleAction  string    `json:"idle_action,omitempty"`
	IdleNote    string    `json:"idle_note,omitempty"`
}

// Term is one additive part of an impact score.
type Term struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Detail string  `json:"detail,omitempty"`
}

// Explanation is GET /v1/explain/<job>: the job's entry, what the agent
// did about it, and the engine's explanation of its decision. The agent
// writes the same content (volatile numbers rounded, see
// agent.VariableItems) to the Nomad Variable nomad/jobs/<job>/impact and
// shows it as a page at /ui/job/<namespace>/<job>.
type Explanation struct {
	Entry
	GeneratedAt time.Time `json:"generated_at"`
	Leader      bool      `json:"leader"`
	// Decision is the last action the scheduler chose for the job:
	// "admit", "preempt", "preempted", "requeued", "reclaimed", "wait" or
	// "none".
	Decision string `json:"decision"`
	// Nodes is where an admitted job runs, per task group.
	Nodes map[string][]string `json:"nodes,omitempty"`
	// PreemptedBy names the job whose admission preempted this one.
	PreemptedBy string `json:"preempted_by,omitempty"`
	// Submitted is the earliest submit time this agent saw for the job
	// while it stayed managed: a requeue or preemption re-registers the
	// job (a new submit time, Since) but keeps this one. Not kept across a
	// leader change.
	Submitted time.Time `json:"submitted,omitzero"`
	// History lists the job's state changes, oldest first (the most
	// recent MaxHistory of them). The leader saves it with the durable
	// state (bounded to about 48 KiB, the jobs with the newest events
	// first), so a new leader, after a restart or a failover, starts from
	// it; a standby shows what it saw since it started.
	History []Event `json:"history,omitempty"`
	// Engine is the engine's explanation of the job, unchanged: its
	// status, score and terms, reason, the nodes that could not take it
	// and why (rejected), its reservation, the victims preempted for it,
	// and for an admitted job the planned placement (node, pinned GPU IDs,
	// NVLink islands and device blocks of each allocation) and warnings.
	// For a job running since this agent admitted it, the explanation it
	// was admitted with; nil for a job no cycle of this agent decided
	// about (running since before it led).
	Engine *engine.Explanation `json:"engine,omitempty"`
}

// Decided returns the engine's explanation, the zero value when there is
// none.
func (e Explanation) Decided() engine.Explanation {
	if e.Engine == nil {
		return engine.Explanation{}
	}
	return *e.Engine
}

// Terms lists the additive parts of the engine's score, which sum to
// Score (nil when the engine has not scored the job).
func (e Explanation) Terms() []Term {
	if e.Engine == nil {
		return nil
	}
	s := e.Engine.Score
	return []Term{
		{Name: "tier", Value: s.Tier, Detail: "tier weight x project weight"},
		{Name: "fair_share", Value: s.FairShare, Detail: "project's entitled minus used share of GPU-hours"},
		{Name: "deadline", Value: s.Deadline, Detail: "urgency as impact_deadline nears"},
		{Name: "age", Value: s.Age, Detail: "time waited, so nothing starves"},
		{Name: "short", Value: s.Short, Detail: shortDetail(s.Overdue)},
	}
}

// shortDetail says what the shortest-first term of a job is.
func shortDetail(overdue bool) string {
	if overdue {
		return "shortest walltime first within the tier; overdue (waited long against the oldest of its tier), so its whole weight"
	}
	return "shortest walltime first within the tier"
}

// MaxHistory bounds Explanation.History.
const MaxHistory = 20

// Event is one change of a job's state or decision, as an agent saw it.
type Event struct {
	At       time.Time `json:"at"`
	State    string    `json:"state"`
	Decision string    `json:"decision"`
	Summary  string    `json:"summary,omitempty"`
}

// Error is the body of every non-2xx answer.
type Error struct {
	Error string `json:"error"`
}

// FormatDuration writes a wait the way `impact queue` and the agent's
// pages show it: 45s, 3m07s, 5h02m, 3d04h.
func FormatDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

// RunLine renders the run a job declares and has saved, as `impact
// explain`, the job's page and its Nomad Variable show it: its
// impact_walltime, the work its earlier runs saved (impact_progress), and
// what the scheduler expects its next run to need (jobspec.Spec.Left),
// which orders it (shortest first), lets it backfill a reservation and
// tells when it ends: counted from the start of the run, this one for a
// job admitted or running, the next one for a job waiting. "" when the
// job gives neither.
func (e Entry) RunLine() string {
	s := e.run()
	wall, saved := s.Walltime, s.Progress
	switch {
	case wall <= 0 && saved <= 0:
		return ""
	case saved <= 0:
		return FormatDuration(wall) + " (impact_walltime)"
	case wall <= 0:
		return fmt.Sprintf("none given; %s saved by earlier runs (impact_progress)", FormatDuration(saved))
	}
	left := s.Left()
	if left <= 0 {
		return fmt.Sprintf("%s (impact_walltime), all of it saved by earlier runs (impact_progress %s): how long it still needs is unknown", FormatDuration(wall), FormatDuration(saved))
	}
	from := "from its next start"
	if e.State == StateRunning || e.State == StateAdmitting {
		from = "from this run's start"
	}
	return fmt.Sprintf("%s (impact_walltime), %s of it saved by earlier runs (impact_progress): expected to need %s %s", FormatDuration(wall), FormatDuration(saved), FormatDuration(left), from)
}

// Left is the run time the scheduler expects the job to need from the
// start of a run (jobspec.Spec.Left: its impact_walltime less its
// impact_progress); 0 when unknown. `impact queue`'s NEEDS column and
// RunLine both read it.
func (e Entry) Left() time.Duration { return e.run().Left() }

// run is the part of the job's contract the entry carries about its run:
// its impact_walltime and impact_progress.
func (e Entry) run() jobspec.Spec {
	return jobspec.Spec{Walltime: time.Duration(e.WalltimeSeconds * float64(time.Second)),
		Progress: time.Duration(e.ProgressSeconds * float64(time.Second))}
}

// NodeLines renders Explanation.Nodes one line per task group, groups
// sorted: "<group>: <node><sep><node>..." (the Variable's item and
// `impact explain` share it, with their own separators).
func NodeLines(nodes map[string][]string, sep string) []string {
	groups := slices.Sorted(maps.Keys(nodes))
	out := make([]string, len(groups))
	for i, g := range groups {
		out[i] = g + ": " + strings.Join(nodes[g], sep)
	}
	return out
}
