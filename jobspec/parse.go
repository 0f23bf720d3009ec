package jobspec

import (
	"errors"
	"sort"
	"strconv"
	"strings"
	"time"
	"unique"
)

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
		if !ValidName(v) {
			return "must be a tier name (letters, digits, '-', '_', '.')"
		}
		s.Tier = intern(v)
		return ""
	},
	MetaProject: func(s *Spec, v string) string {
		if !ValidName(v) {
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
	MetaGrace: durationKey(func(s *Spec) *time.Duration { return &s.Grace }, ""),
	MetaCheckpointSignal: func(s *Spec, v string) string {
		sig, why := signalName(v)
		if why != "" {
			return why
		}
		s.CheckpointSignal = sig
		return ""
	},
	MetaMinRuntime: durationKey(func(s *Spec) *time.Duration { return &s.MinRuntime }, ""),
	MetaWalltime: durationKey(func(s *Spec) *time.Duration { return &s.Walltime },
		"must be greater than zero (omit the key when unknown)"),
	MetaTopology: func(s *Spec, v string) string {
		switch t := Topology(strings.TrimSpace(v)); t {
		case TopologyNVLink, TopologyNode, TopologyAny:
			s.Topology = t
			return ""
		}
		return `must be one of "nvlink", "node", "any"`
	},
	MetaCheckpointInterval: durationKey(func(s *Spec) *time.Duration { return &s.CheckpointInterval },
		"must be greater than zero (omit the key when the job does not checkpoint)"),
	MetaProgress: durationKey(func(s *Spec) *time.Duration { return &s.Progress }, ""),
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
		if !ValidName(v) {
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

// Keys lists every meta key of the contract, sorted.
func Keys() []string {
	keys := make([]string, 0, len(metaParsers))
	for k := range metaParsers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func knownKeys() string { return strings.Join(Keys(), ", ") }

// ParseDuration reads a duration as the contract's duration keys do
// (impact_grace, impact_min_runtime, ...): Go's syntax ("90s", "10m",
// "6h"), surrounding spaces ignored, never negative. The driver's gang
// block (grace) reads its durations with it too. The error says what is
// wrong, not where: callers name the key.
func ParseDuration(v string) (time.Duration, error) {
	d, why := parseDuration(v)
	if why != "" {
		return 0, errors.New(why)
	}
	return d, nil
}

// durationKey parses a duration key into the field it names; ifZero,
// when not "", is the error of a zero duration (a key that must be
// omitted rather than zero).
func durationKey(field func(*Spec) *time.Duration, ifZero string) func(*Spec, string) string {
	return func(s *Spec, v string) string {
		d, why := parseDuration(v)
		if why != "" {
			return why
		}
		if d == 0 && ifZero != "" {
			return ifZero
		}
		*field(s) = d
		return ""
	}
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

// ValidName reports whether v may name a tier, a project or a node pool:
// 1 to 128 letters, digits, '-', '_' or '.'. The policy file's names follow
// the same rule, so that every name a policy defines can be written in a
// job's meta.
func ValidName(v string) bool {
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
