package nomad

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
//	<prefix>/gang-requeues           runs in a row that lost a member, per job
//	                                 (the back-off and impact_max_failures)
//
// Variable items are strings; structured values are JSON in one item.
type StateStore struct {
	c   *Client
	cfg StateConfig
	log hclog.Logger
	// written is what this store last wrote of each durable-state
	// Variable (statecheck.go).
	written writtenVars
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
	return s.put(ctx, s.cfg.Prefix+"/usage", items)
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
		return s.del(ctx, path)
	}
	items := make(map[string]string, len(counts))
	for job, n := range counts {
		items[varPathSegment(job)] = strconv.Itoa(n)
	}
	return s.put(ctx, path, items)
}

// GangRequeue is a job's record of runs in a row that lost a member (each
// requeued whole, or the last ended failed): how many, and when the last
// was requeued. The agent keeps it for the back-off and the job's
// impact_max_failures, and resets it when a run stays whole.
type GangRequeue struct {
	Runs int
	Last time.Time
}

// LoadGangRequeues returns the saved gang requeue records, per job (its
// model key), as SaveGangRequeues stored them (empty when none).
func (s *StateStore) LoadGangRequeues(ctx context.Context) (map[string]GangRequeue, error) {
	path := s.cfg.Prefix + "/gang-requeues"
	v, err := s.read(ctx, path)
	if err != nil || v == nil {
		return map[string]GangRequeue{}, err
	}
	out := make(map[string]GangRequeue, len(v.Items))
	for k, val := range v.Items {
		job, err := unescapeSegment(k)
		if err != nil {
			return nil, fmt.Errorf("variable %s: item %q: %w", path, k, err)
		}
		n, at, ok := strings.Cut(val, "@")
		runs, err := strconv.Atoi(n)
		if !ok || err != nil || runs < 0 {
			return nil, fmt.Errorf("variable %s: job %q: %q is not <runs>@<time>", path, job, val)
		}
		last, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return nil, fmt.Errorf("variable %s: job %q: time %q: %w", path, job, at, err)
		}
		out[job] = GangRequeue{Runs: runs, Last: last}
	}
	return out, nil
}

// SaveGangRequeues replaces the saved gang requeue records; with none left
// the Variable is deleted.
func (s *StateStore) SaveGangRequeues(ctx context.Context, recs map[string]GangRequeue) error {
	path := s.cfg.Prefix + "/gang-requeues"
	if len(recs) == 0 {
		return s.del(ctx, path)
	}
	items := make(map[string]string, len(recs))
	for job, r := range recs {
		items[varPathSegment(job)] = strconv.Itoa(r.Runs) + "@" + r.Last.UTC().Format(time.RFC3339Nano)
	}
	return s.put(ctx, path, items)
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
	return s.updatePreemptions(ctx, "record preemption of "+rec.JobID, func(recs []PreemptionRecord, unreadable error, _ bool) ([]PreemptionRecord, bool, error) {
		if unreadable != nil {
			return nil, false, unreadable
		}
		return append(recs, rec), true, nil
	})
}

// updatePreemptions changes the preemption records check-and-set. change
// gets the records read, the error that made them unreadable (the
// Variable overwritten with something else) and whether the Variable
// exists; it returns the records to write, or false to leave the
// Variable as it is. The newest MaxPreemptionRecords are written; a
// conflict reads again, 5 times at most (what names the change in that
// error).
func (s *StateStore) updatePreemptions(ctx context.Context, what string,
	change func(recs []PreemptionRecord, unreadable error, exists bool) ([]PreemptionRecord, bool, error)) error {
	path := s.cfg.Prefix + "/preemptions"
	for attempt := 0; attempt < 5; attempt++ {
		v, err := s.read(ctx, path)
		if err != nil {
			return err
		}
		var recs []PreemptionRecord
		var idx uint64
		var unreadable error
		if v != nil {
			idx = v.ModifyIndex
			if err := json.Unmarshal([]byte(v.Items["records"]), &recs); err != nil {
				recs, unreadable = nil, fmt.Errorf("variable %s: records: %w", path, err)
			}
		}
		recs, write, err := change(recs, unreadable, v != nil)
		if err != nil {
			return err
		}
		if !write {
			if v != nil {
				s.written.set(path, idx)
			}
			return nil
		}
		if over := len(recs) - s.cfg.MaxPreemptionRecords; over > 0 {
			recs = recs[over:]
		}
		b, _ := json.Marshal(recs)
		written, err := s.write(ctx, path, map[string]string{"records": string(b)}, idx)
		if errors.Is(err, ErrConflict) {
			continue
		}
		if err != nil {
			return err
		}
		s.written.set(path, written)
		return nil
	}
	return fmt.Errorf("%s: %w (5 attempts)", what, ErrConflict)
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
