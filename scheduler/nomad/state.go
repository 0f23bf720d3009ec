package nomad

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// StateConfig tunes the durable state store.
type StateConfig struct {
	// Prefix of the Variables the scheduler owns (default "impact/state").
	Prefix string
	// MaxPreemptionRecords bounds the preemption history (default 500).
	MaxPreemptionRecords int
}

// StateStore keeps the scheduler's durable state in Nomad Variables, so a
// new leader resumes where the old one stopped:
//
//	<prefix>/usage                   decayed GPU-hours per project, and when
//	<prefix>/intents/<ns>/<job>      an admission or preemption under way
//	<prefix>/preemptions             recent preemption records
//	<prefix>/requeues                idle requeues per job (max_requeues)
//
// Variable items are strings; structured values are JSON in one item.
type StateStore struct {
	c   *Client
	cfg StateConfig
	log hclog.Logger
}

// NewStateStore builds a store on the client's namespace.
func NewStateStore(c *Client, cfg StateConfig, logger hclog.Logger) *StateStore {
	if cfg.Prefix == "" {
		cfg.Prefix = "impact/state"
	}
	cfg.Prefix = strings.Trim(cfg.Prefix, "/")
	if cfg.MaxPreemptionRecords <= 0 {
		cfg.MaxPreemptionRecords = 500
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &StateStore{c: c, cfg: cfg, log: logger.Named("state")}
}

// varPathSegment escapes a string for a Variable path segment (Nomad allows
// only letters, digits, '-', '_' and '~' there): any other byte becomes
// "~XX" (hex), and '~' itself "~7e", so the mapping is reversible.
func varPathSegment(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9', ch == '-', ch == '_':
			b.WriteByte(ch)
		default:
			fmt.Fprintf(&b, "~%02x", ch)
		}
	}
	return b.String()
}

func unescapeSegment(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '~' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("bad escape in %q", s)
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("bad escape in %q: %w", s, err)
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), nil
}

// splitJobKey splits a cluster.JobKey ("ns/id") into namespace and ID.
func splitJobKey(key string) (ns, id string) {
	ns, id, ok := strings.Cut(key, "/")
	if !ok {
		return "default", key
	}
	return ns, id
}

func (s *StateStore) read(ctx context.Context, path string) (*api.Variable, error) {
	v, _, err := s.c.api.Variables().Peek(path, s.c.q(ctx))
	if err != nil {
		return nil, fmt.Errorf("read variable %s: %w", path, err)
	}
	return v, nil
}

// write stores items at path, checking that the variable is still at
// modifyIndex (0: must not exist). It returns the new ModifyIndex.
func (s *StateStore) write(ctx context.Context, path string, items map[string]string, modifyIndex uint64) (uint64, error) {
	v := &api.Variable{Path: path, Items: items, ModifyIndex: modifyIndex}
	var out *api.Variable
	var err error
	if modifyIndex == 0 {
		out, _, err = s.c.api.Variables().CheckedCreate(v, s.c.w(ctx))
	} else {
		out, _, err = s.c.api.Variables().CheckedUpdate(v, s.c.w(ctx))
	}
	if err != nil {
		var cas api.ErrCASConflict
		if errors.As(err, &cas) {
			return 0, fmt.Errorf("write variable %s: %w", path, ErrConflict)
		}
		return 0, fmt.Errorf("write variable %s: %w", path, err)
	}
	return out.ModifyIndex, nil
}

// ErrConflict says a check-and-set write lost to a concurrent writer.
var ErrConflict = errors.New("conflicting concurrent update")

// LoadUsage returns the saved per-project usage and the instant it was
// measured at (zero values when none was saved).
func (s *StateStore) LoadUsage(ctx context.Context) (map[string]float64, time.Time, error) {
	path := s.cfg.Prefix + "/usage"
	v, err := s.read(ctx, path)
	if err != nil || v == nil {
		return map[string]float64{}, time.Time{}, err
	}
	var at time.Time
	out := map[string]float64{}
	for k, val := range v.Items {
		if k == "at" {
			t, err := time.Parse(time.RFC3339Nano, val)
			if err != nil {
				return nil, time.Time{}, fmt.Errorf("variable %s: item at=%q: %w", path, val, err)
			}
			at = t
			continue
		}
		proj, err := unescapeSegment(k)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("variable %s: item %q: %w", path, k, err)
		}
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("variable %s: project %q usage %q: %w", path, proj, val, err)
		}
		out[proj] = f
	}
	return out, at, nil
}

// usageItemKey is the Variable item holding a project's usage: the
// project name escaped like a path segment, with a project literally named
// "at" escaped further ("~61t") so that it cannot overwrite the "at" item
// (the instant the values are measured at). unescapeSegment reverses both.
func usageItemKey(project string) string {
	k := varPathSegment(project)
	if k == "at" {
		return "~61t"
	}
	return k
}

// SaveUsage stores per-project usage measured at instant at.
func (s *StateStore) SaveUsage(ctx context.Context, values map[string]float64, at time.Time) error {
	items := map[string]string{"at": at.UTC().Format(time.RFC3339Nano)}
	for k, v := range values {
		items[usageItemKey(k)] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	path := s.cfg.Prefix + "/usage"
	if _, _, err := s.c.api.Variables().Update(&api.Variable{Path: path, Items: items}, s.c.w(ctx)); err != nil {
		return fmt.Errorf("write variable %s: %w", path, err)
	}
	return nil
}

// LoadRequeues returns, per job (its model key, "namespace/job"), how many
// times its tier's idle action has requeued it, as SaveRequeues stored them
// (empty when none was saved). A new leader needs them so that a hung job
// is requeued at most max_requeues times in all, not that many per leader.
func (s *StateStore) LoadRequeues(ctx context.Context) (map[string]int, error) {
	path := s.cfg.Prefix + "/requeues"
	v, err := s.read(ctx, path)
	if err != nil || v == nil {
		return map[string]int{}, err
	}
	out := make(map[string]int, len(v.Items))
	for k, val := range v.Items {
		job, err := unescapeSegment(k)
		if err != nil {
			return nil, fmt.Errorf("variable %s: item %q: %w", path, k, err)
		}
		n, err := strconv.Atoi(val)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("variable %s: job %q requeues %q: not a count", path, job, val)
		}
		out[job] = n
	}
	return out, nil
}

// SaveRequeues replaces the saved requeue counts; with none left the
// Variable is deleted (Nomad keeps no Variable without items).
func (s *StateStore) SaveRequeues(ctx context.Context, counts map[string]int) error {
	path := s.cfg.Prefix + "/requeues"
	if len(counts) == 0 {
		if _, err := s.c.api.Variables().Delete(path, s.c.w(ctx)); err != nil && !isNotFound(err) {
			return fmt.Errorf("delete variable %s: %w", path, err)
		}
		return nil
	}
	items := make(map[string]string, len(counts))
	for job, n := range counts {
		items[varPathSegment(job)] = strconv.Itoa(n)
	}
	if _, _, err := s.c.api.Variables().Update(&api.Variable{Path: path, Items: items}, s.c.w(ctx)); err != nil {
		return fmt.Errorf("write variable %s: %w", path, err)
	}
	return nil
}

// IntentKind says what an intent is about to do.
type IntentKind string

const (
	IntentAdmit   IntentKind = "admit"
	IntentPreempt IntentKind = "preempt"
)

// Intent phases, in order.
const (
	PhaseDecided    = "decided"    // recorded, nothing done yet
	PhaseRegistered = "registered" // admit: job re-registered with pins
	PhaseSignalled  = "signalled"  // preempt: checkpoint signal sent
	PhaseParked     = "parked"     // preempt: job re-registered into the parking pool
)

// Intent is an admission or preemption the leader decided and is carrying
// out, recorded before it acts so that a successor can finish or undo it.
type Intent struct {
	Kind IntentKind `json:"kind"`
	// JobID is the cluster.JobKey of the job acted on.
	JobID string `json:"job_id"`
	Phase string `json:"phase"`
	// FromIndex is the JobModifyIndex the decision was made on; ToIndex
	// the one our own re-register produced.
	FromIndex uint64 `json:"from_index"`
	ToIndex   uint64 `json:"to_index,omitempty"`
	// Admission: target pool, pinned nodes per group, deadline to be
	// fully running.
	Pool     string              `json:"pool,omitempty"`
	Pins     map[string][]string `json:"pins,omitempty"`
	Deadline time.Time           `json:"deadline,omitzero"`
	// PinnedGPUs: the GPU IDs pinned per node (all groups), which the
	// read-back compares with what Nomad allocated.
	PinnedGPUs map[string][]string `json:"pinned_gpus,omitempty"`
	// Preemption: the victim's allocations, signal, grace, when the signal
	// went out, for whom and why.
	Allocs      []string      `json:"allocs,omitempty"`
	Signal      string        `json:"signal,omitempty"`
	Grace       time.Duration `json:"grace,omitempty"`
	SignalledAt time.Time     `json:"signalled_at,omitzero"`
	Preemptor   string        `json:"preemptor,omitempty"`
	Reason      string        `json:"reason,omitempty"`
	GPUs        int           `json:"gpus,omitempty"`
	LostGPUH    float64       `json:"lost_gpu_hours,omitempty"`
	// RequeueExitCode is the victim's "checkpointed, requeue me" exit
	// code (0: policy.DefaultRequeueExitCode).
	RequeueExitCode int `json:"requeue_exit_code,omitempty"`
	// Idle marks a reclaim of the tier's requeue idle action instead of a
	// preemption: IdleRequeue (stopped and queued again, as a preemption
	// is) or IdleStop (stopped for good: the job is deregistered, not
	// parked). "" for a preemption.
	Idle    string    `json:"idle,omitempty"`
	Created time.Time `json:"created"`

	// modifyIndex of the variable, for check-and-set updates.
	modifyIndex uint64
	// outcome of a preemption as this executor saw it (not persisted).
	outcome string
}

func (s *StateStore) intentPath(jobID string) string {
	ns, id := splitJobKey(jobID)
	return s.cfg.Prefix + "/intents/" + varPathSegment(ns) + "/" + varPathSegment(id)
}

// PutIntent creates the job's intent (none may exist yet) or updates the
// one read or written before (check-and-set: a concurrent writer, e.g. a
// second leader, makes it fail with ErrConflict).
func (s *StateStore) PutIntent(ctx context.Context, in *Intent) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encode intent for %s: %w", in.JobID, err)
	}
	idx, err := s.write(ctx, s.intentPath(in.JobID), map[string]string{"intent": string(b)}, in.modifyIndex)
	if err != nil {
		return err
	}
	in.modifyIndex = idx
	return nil
}

// Intent reads one job's intent (nil when none).
func (s *StateStore) Intent(ctx context.Context, jobID string) (*Intent, error) {
	path := s.intentPath(jobID)
	v, err := s.read(ctx, path)
	if err != nil || v == nil {
		return nil, err
	}
	return decodeIntent(path, v)
}

func decodeIntent(path string, v *api.Variable) (*Intent, error) {
	var in Intent
	if err := json.Unmarshal([]byte(v.Items["intent"]), &in); err != nil {
		return nil, fmt.Errorf("variable %s: intent: %w", path, err)
	}
	if in.JobID == "" || (in.Kind != IntentAdmit && in.Kind != IntentPreempt) {
		return nil, fmt.Errorf("variable %s: intent without job or with unknown kind %q", path, in.Kind)
	}
	in.modifyIndex = v.ModifyIndex
	return &in, nil
}

// Intents lists every recorded intent. Unreadable ones are reported in
// the error (after the readable ones are returned), never dropped silently.
func (s *StateStore) Intents(ctx context.Context) ([]*Intent, error) {
	prefix := s.cfg.Prefix + "/intents/"
	metas, _, err := s.c.api.Variables().PrefixList(prefix, s.c.q(ctx))
	if err != nil {
		return nil, fmt.Errorf("list variables %s: %w", prefix, err)
	}
	var out []*Intent
	var errs []error
	for _, m := range metas {
		v, err := s.read(ctx, m.Path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if v == nil {
			continue
		}
		in, err := decodeIntent(m.Path, v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].JobID < out[j].JobID })
	return out, errors.Join(errs...)
}

// DeleteIntent removes the job's intent (done, or abandoned).
func (s *StateStore) DeleteIntent(ctx context.Context, jobID string) error {
	path := s.intentPath(jobID)
	if _, err := s.c.api.Variables().Delete(path, s.c.w(ctx)); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete variable %s: %w", path, err)
	}
	return nil
}

// PreemptionRecord is one completed preemption.
type PreemptionRecord struct {
	JobID        string    `json:"job_id"`
	Preemptor    string    `json:"preemptor"`
	At           time.Time `json:"at"`
	GPUs         int       `json:"gpus"`
	LostGPUHours float64   `json:"lost_gpu_hours"`
	Reason       string    `json:"reason,omitempty"`
}

// RecordPreemption appends a record, keeping the newest
// MaxPreemptionRecords.
func (s *StateStore) RecordPreemption(ctx context.Context, rec PreemptionRecord) error {
	path := s.cfg.Prefix + "/preemptions"
	for attempt := 0; attempt < 5; attempt++ {
		v, err := s.read(ctx, path)
		if err != nil {
			return err
		}
		var recs []PreemptionRecord
		var idx uint64
		if v != nil {
			idx = v.ModifyIndex
			if err := json.Unmarshal([]byte(v.Items["records"]), &recs); err != nil {
				return fmt.Errorf("variable %s: records: %w", path, err)
			}
		}
		recs = append(recs, rec)
		if over := len(recs) - s.cfg.MaxPreemptionRecords; over > 0 {
			recs = recs[over:]
		}
		b, _ := json.Marshal(recs)
		if _, err := s.write(ctx, path, map[string]string{"records": string(b)}, idx); err != nil {
			if errors.Is(err, ErrConflict) {
				continue
			}
			return err
		}
		return nil
	}
	return fmt.Errorf("record preemption of %s: %w (5 attempts)", rec.JobID, ErrConflict)
}

// Preemptions returns the records at or after since, oldest first.
func (s *StateStore) Preemptions(ctx context.Context, since time.Time) ([]PreemptionRecord, error) {
	path := s.cfg.Prefix + "/preemptions"
	v, err := s.read(ctx, path)
	if err != nil || v == nil {
		return nil, err
	}
	var recs []PreemptionRecord
	if err := json.Unmarshal([]byte(v.Items["records"]), &recs); err != nil {
		return nil, fmt.Errorf("variable %s: records: %w", path, err)
	}
	out := recs[:0]
	for _, r := range recs {
		if !r.At.Before(since) {
			out = append(out, r)
		}
	}
	return out, nil
}
