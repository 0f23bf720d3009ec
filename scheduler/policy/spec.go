package policy

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unique"
)

// Meta keys of the jobspec contract (README.md, "The jobspec contract";
// example/README.md, "How a job opts in").
const (
	MetaTier             = "impact_tier"
	MetaProject          = "impact_project"
	MetaDeadline         = "impact_deadline"
	MetaPreemptible      = "impact_preemptible"
	MetaGrace            = "impact_grace"
	MetaCheckpointSignal = "impact_checkpoint_signal"
	MetaMinRuntime       = "impact_min_runtime"
	MetaWalltime         = "impact_walltime"
	MetaTopology         = "impact_topology"
	MetaPool             = "impact_pool"
	// MetaCheckpointInterval says how often the job saves its work; the
	// scheduler then counts a victim's work lost from its last expected
	// checkpoint instead of from its start.
	MetaCheckpointInterval = "impact_checkpoint_interval"
	// MetaRequeueExitCode is the exit code with which a preempted job's
	// task says "I saved a checkpoint; put me back in the queue" (see
	// DefaultRequeueExitCode and the preemption outcome contract in
	// scheduler/nomad's package documentation).
	MetaRequeueExitCode = "impact_requeue_exit_code"
	// MetaOnFailure says what becomes of a running gang that loses a
	// member (a task failed, was OOM-killed or killed, its node was lost):
	// "requeue" (the default: stopped whole with its checkpoint signal and
	// requeued whole, with back-off, up to MetaMaxFailures runs in a row)
	// or "fail" (stopped whole and ended failed at the first loss; the
	// reason is in `impact explain`). It holds whatever the job's restart
	// and reschedule blocks say.
	MetaOnFailure = "impact_on_failure"
	// MetaMaxFailures is how many runs in a row may lose a member before
	// the job ends failed instead of being requeued again (default
	// DefaultMaxFailures). A run that stays whole long enough resets the
	// count (see the agent's gang requeue record).
	MetaMaxFailures = "impact_max_failures"

	// MetaPrefix marks a meta key as belonging to this contract; an unknown
	// key with this prefix is an error (most likely a typo that would
	// otherwise be ignored silently).
	MetaPrefix = "impact_"
)

// groupOverridable lists the keys a task group's meta may set to a value
// different from the job's. The others describe the job as a whole (who pays,
// how important, where it runs) and must not differ between groups.
var groupOverridable = map[string]bool{
	MetaTopology:         true,
	MetaGrace:            true,
	MetaCheckpointSignal: true,
}

// Topology says how tightly the GPUs of one allocation must be connected.
type Topology string

const (
	// TopologyUnset means the job did not say; placement treats it like
	// TopologyNode (one island preferred, not required).
	TopologyUnset Topology = ""
	// TopologyNVLink requires every allocation's GPUs to sit in one NVLink
	// island.
	TopologyNVLink Topology = "nvlink"
	// TopologyNode keeps an allocation on one node (always true) and
	// prefers one island.
	TopologyNode Topology = "node"
	// TopologyAny takes any free GPUs of a node, packing islands only to
	// keep fragments small.
	TopologyAny Topology = "any"
)

// Spec is the impact contract of a job (or of one of its task groups), as
// written in its `impact_*` meta. Zero values mean "not given"; what a
// missing value resolves to is decided by the Policy (DefaultTier,
// DefaultProject, the tier's preemptibility, Preemption.MinRuntime), never
// here.
type Spec struct {
	// Tier names a tier of the policy file; "" means the policy's default.
	Tier string
	// Project is charged for the job's GPU-hours; "" means the policy's
	// default project.
	Project string
	// Deadline, when not zero, raises urgency as it nears.
	Deadline time.Time
	// Preemptible is the job's own answer when PreemptibleSet; otherwise
	// the tier's default applies.
	Preemptible    bool
	PreemptibleSet bool
	// Grace is the time between the checkpoint signal and the stop.
	Grace time.Duration
	// CheckpointSignal is sent to the allocations before a preemption
	// ("" sends none).
	CheckpointSignal string
	// MinRuntime: not preempted before it has run this long.
	MinRuntime time.Duration
	// Walltime is the expected run time; 0 means unknown (the job then
	// cannot be proven to end before a reservation).
	Walltime time.Duration
	// Topology of each allocation's GPU set.
	Topology Topology
	// Pool is the node pool to run in once admitted; "" means the
	// scheduler's default pool.
	Pool string
	// CheckpointInterval is how often the job saves its work (0: unknown;
	// work lost to a preemption then counts from the allocation's start).
	CheckpointInterval time.Duration
	// RequeueExitCode is the exit code meaning "checkpointed, requeue me"
	// (0: not given; RequeueCode resolves it to DefaultRequeueExitCode).
	RequeueExitCode int
	// IdleIgnore is the job's opt-out of idle actions (impact_idle =
	// "ignore"); whether it holds is the tier's call (Policy.IdleIgnored).
	IdleIgnore bool
	// FailOnLoss: impact_on_failure = "fail": a gang that loses a member
	// ends failed rather than being requeued.
	FailOnLoss bool
	// MaxFailures is impact_max_failures (0: not given; MaxFailedRuns
	// resolves it to DefaultMaxFailures).
	MaxFailures int
}

// DefaultMaxFailures is how many runs in a row of a job that sets no
// impact_max_failures may lose a member before it ends failed: enough to
// ride out a few lost nodes (each requeue after the first waits a
// doubling back-off, 30s up to 30m, so ten take about three hours), few
// enough that a job whose member crashes every time it starts stops
// taking GPUs.
const DefaultMaxFailures = 10

// MaxFailedRuns is the job's impact_max_failures, else DefaultMaxFailures;
// 1 with impact_on_failure = "fail".
func (s Spec) MaxFailedRuns() int {
	switch {
	case s.FailOnLoss:
		return 1
	case s.MaxFailures > 0:
		return s.MaxFailures
	}
	return DefaultMaxFailures
}

// DefaultRequeueExitCode is the requeue exit code of jobs that set no
// impact_requeue_exit_code: 75, EX_TEMPFAIL in sysexits.h ("temporary
// failure; the user is invited to retry"), which is what a preempted
// trainer means, is not used by shells or runtimes for anything else
// (unlike 1, 2, 126-128+n, 137 or 143), and is what several training
// launchers already exit with to ask a batch scheduler for a requeue.
const DefaultRequeueExitCode = 75

// RequeueCode is the job's requeue exit code: its impact_requeue_exit_code,
// else DefaultRequeueExitCode.
func (s Spec) RequeueCode() int {
	if s.RequeueExitCode != 0 {
		return s.RequeueExitCode
	}
	return DefaultRequeueExitCode
}

// MetaError is a malformed `impact_*` meta value. It names the key so that
// explain and logs can say exactly what to fix.
type MetaError struct {
	// Key is the meta key at fault.
	Key string
	// Value is the offending value as written.
	Value string
	// InGroup is true when the key was read from a task group's meta.
	InGroup bool
	// Group names that task group when the caller knew it (ParseGroupMeta).
	Group string
	// Reason says what is wrong.
	Reason string
}

func (e *MetaError) Error() string {
	where := "job meta"
	switch {
	case e.Group != "":
		where = fmt.Sprintf("group %q meta", e.Group)
	case e.InGroup:
		where = "group meta"
	}
	return fmt.Sprintf("%s %s = %q: %s", where, e.Key, e.Value, e.Reason)
}

// MetaErrors is every malformed `impact_*` meta value of one job (or task
// group), in a stable order: the job's keys sorted, then the group's keys
// sorted. It is returned only when there is more than one problem (a single
// one is a plain *MetaError), so that an operator fixes them all at once
// instead of meeting them one by one. errors.As(err, &me) with a *MetaError
// finds the first; Unwrap lists them all.
type MetaErrors []*MetaError

func (es MetaErrors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return fmt.Sprintf("%d impact meta errors: %s", len(es), strings.Join(parts, "; "))
}

// Unwrap returns every *MetaError, for errors.As and errors.Is.
func (es MetaErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// metaErr folds the problems found into the error ParseMeta returns: nil,
// one *MetaError, or MetaErrors.
func metaErr(errs []*MetaError) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return MetaErrors(errs)
}

// ParseMeta parses the impact contract of a job, or of one task group when
// groupMeta is given (pass nil for the job itself). Group meta may override
// impact_topology, impact_grace and impact_checkpoint_signal; other impact
// keys in group meta must repeat the job's value. Every problem is reported,
// one per key, job keys first and each part in key order: a single one as a
// *MetaError, several as MetaErrors. The Spec is then not to be scheduled:
// it is zero but for its Tier, when that parsed, so that Policy.SpecError
// can report an unknown tier together with the rest (a tier is only known
// to be unknown against the policy; without this a user fixing "soon"
// would meet "urgnet" only on the next submission).
// ParseGroupMeta does the same and names the group in errors.
func ParseMeta(jobMeta, groupMeta map[string]string) (Spec, error) {
	var s Spec
	errs := parseInto(&s, jobMeta, false)
	if groupMeta != nil {
		for _, k := range sortedImpactKeys(groupMeta) {
			v := groupMeta[k]
			if _, known := metaParsers[k]; known && !groupOverridable[k] {
				if jv, ok := jobMeta[k]; !ok || jv != v {
					errs = append(errs, &MetaError{Key: k, Value: v, InGroup: true,
						Reason: "may only be set in job meta (group meta may override impact_topology, impact_grace, impact_checkpoint_signal)"})
				}
				// A repeat of the job's value was parsed (and, if bad,
				// reported) with the job's meta.
				continue
			}
			if e := parseKey(&s, k, v, true); e != nil {
				errs = append(errs, e)
			}
		}
	}
	if err := metaErr(errs); err != nil {
		return Spec{Tier: s.Tier}, err
	}
	return s, nil
}

// ParseGroupMeta is ParseMeta for a named task group: errors name the group.
func ParseGroupMeta(jobMeta, groupMeta map[string]string, group string) (Spec, error) {
	s, err := ParseMeta(jobMeta, groupMeta)
	switch e := err.(type) {
	case *MetaError:
		if e.InGroup {
			e.Group = group
		}
	case MetaErrors:
		for _, me := range e {
			if me.InGroup {
				me.Group = group
			}
		}
	}
	return s, err
}

// JoinMetaErrors merges the errors of one job's parses (ParseMeta for the
// job, ParseGroupMeta for each group, Policy.CheckSpec) into one error that
// lists each problem once: the job's keys first, in key order, then the
// groups', in the order given. Each ParseGroupMeta repeats the job's own
// problems; they are listed once. Errors that are not meta errors (any
// other error of the job) follow them, joined with errors.Join. nil when
// every argument is nil; one *MetaError stays a *MetaError.
func JoinMetaErrors(errs ...error) error {
	var metas []*MetaError
	var others []error
	seen := map[MetaError]bool{}
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *MetaError:
			if !seen[*e] {
				seen[*e] = true
				metas = append(metas, e)
			}
		case MetaErrors:
			for _, me := range e {
				walk(me)
			}
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				walk(inner)
			}
		default:
			others = append(others, err)
		}
	}
	for _, err := range errs {
		walk(err)
	}
	sort.SliceStable(metas, func(i, j int) bool {
		a, b := metas[i], metas[j]
		if a.InGroup != b.InGroup {
			return !a.InGroup
		}
		return !a.InGroup && a.Key < b.Key
	})
	err := metaErr(metas)
	if len(others) == 0 {
		return err
	}
	return errors.Join(append([]error{err}, others...)...)
}

type metaParser func(s *Spec, v string) string

// metaParsers maps each key to a parser returning "" or the reason it failed.
var metaParsers = map[string]metaParser{
	MetaTier: func(s *Spec, v string) string {
		if !validName(v) {
			return "must be a tier name (letters, digits, '-', '_')"
		}
		s.Tier = intern(v)
		return ""
	},
	MetaProject: func(s *Spec, v string) string {
		if !validName(v) {
			return "must be a project name (letters, digits, '-', '_', '.')"
		}
		s.Project = intern(v)
		return ""
	},
	MetaDeadline: func(s *Spec, v string) string {
		t, err := time.Parse(time.RFC3339, strings.TrimSpace(v))
		if err != nil {
			return "must be an RFC 3339 time such as 2026-12-05T00:00:00Z"
		}
		s.Deadline = t.UTC()
		return ""
	},
	MetaPreemptible: func(s *Spec, v string) string {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return "must be true or false"
		}
		s.Preemptible, s.PreemptibleSet = b, true
		return ""
	},
	MetaGrace: func(s *Spec, v string) string {
		d, why := parseDuration(v)
		if why != "" {
			return why
		}
		s.Grace = d
		return ""
	},
	MetaCheckpointSignal: func(s *Spec, v string) string {
		sig := strings.TrimSpace(v)
		if !validSignal(sig) {
			return "must be a signal name such as SIGUSR1 or SIGTERM"
		}
		s.CheckpointSignal = sig
		return ""
	},
	MetaMinRuntime: func(s *Spec, v string) string {
		d, why := parseDuration(v)
		if why != "" {
			return why
		}
		s.MinRuntime = d
		return ""
	},
	MetaWalltime: func(s *Spec, v string) string {
		d, why := parseDuration(v)
		if why != "" {
			return why
		}
		if d == 0 {
			return "must be greater than zero (omit the key when unknown)"
		}
		s.Walltime = d
		return ""
	},
	MetaTopology: func(s *Spec, v string) string {
		switch t := Topology(strings.TrimSpace(v)); t {
		case TopologyNVLink, TopologyNode, TopologyAny:
			s.Topology = t
			return ""
		}
		return `must be one of "nvlink", "node", "any"`
	},
	MetaCheckpointInterval: func(s *Spec, v string) string {
		d, why := parseDuration(v)
		if why != "" {
			return why
		}
		if d == 0 {
			return "must be greater than zero (omit the key when the job does not checkpoint)"
		}
		s.CheckpointInterval = d
		return ""
	},
	MetaRequeueExitCode: func(s *Spec, v string) string {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || n > 255 {
			return "must be an exit code from 1 to 255 (0 means the work is done)"
		}
		s.RequeueExitCode = n
		return ""
	},
	MetaOnFailure: func(s *Spec, v string) string {
		switch strings.TrimSpace(v) {
		case "requeue":
			s.FailOnLoss = false
			return ""
		case "fail":
			s.FailOnLoss = true
			return ""
		}
		return `must be "requeue" (the default: requeued whole, with back-off) or "fail" (ended failed at the first lost member)`
	},
	MetaMaxFailures: func(s *Spec, v string) string {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			return "must be a whole number of runs, 1 or more (1: the first lost member ends the job)"
		}
		s.MaxFailures = n
		return ""
	},
	MetaIdle: func(s *Spec, v string) string {
		if strings.TrimSpace(v) != "ignore" {
			return `must be "ignore" (omit the key to let the tier's idle policy apply)`
		}
		s.IdleIgnore = true
		return ""
	},
	MetaPool: func(s *Spec, v string) string {
		if !validName(v) {
			return "must be a node pool name"
		}
		s.Pool = intern(v)
		return ""
	},
}

// intern returns the canonical copy of a tier, project or pool name.
// Thousands of jobs name the same few: one copy of each keeps the bytes
// the scheduler hashes and compares every cycle in a few cache lines, not
// one per job (the engine's cold cycle reads them for every job).
func intern(s string) string { return unique.Make(s).Value() }

// parseInto parses every impact key of meta into s, returning one
// *MetaError per bad key in key order.
func parseInto(s *Spec, meta map[string]string, inGroup bool) []*MetaError {
	var errs []*MetaError
	for _, k := range sortedImpactKeys(meta) {
		if e := parseKey(s, k, meta[k], inGroup); e != nil {
			errs = append(errs, e)
		}
	}
	return errs
}

// parseKey parses one impact key into s, or says what is wrong with it.
func parseKey(s *Spec, k, v string, inGroup bool) *MetaError {
	p, ok := metaParsers[k]
	if !ok {
		return &MetaError{Key: k, Value: v, InGroup: inGroup, Reason: "unknown impact key (known: " + knownKeys() + ")"}
	}
	if why := p(s, v); why != "" {
		return &MetaError{Key: k, Value: v, InGroup: inGroup, Reason: why}
	}
	return nil
}

func sortedImpactKeys(meta map[string]string) []string {
	var keys []string
	for k := range meta {
		if strings.HasPrefix(k, MetaPrefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

func knownKeys() string {
	keys := make([]string, 0, len(metaParsers))
	for k := range metaParsers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

func parseDuration(v string) (time.Duration, string) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return 0, "must be a duration such as 90s, 10m or 6h"
	}
	if d < 0 {
		return 0, "must not be negative"
	}
	return d, ""
}

func validName(v string) bool {
	if v == "" || len(v) > 128 {
		return false
	}
	for _, r := range v {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
}

func validSignal(v string) bool {
	if !strings.HasPrefix(v, "SIG") || len(v) < 5 || len(v) > 16 {
		return false
	}
	for _, r := range v[3:] {
		if !(r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '+' || r == '-') {
			return false
		}
	}
	return true
}
