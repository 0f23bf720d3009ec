package nomad

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

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
	// code (0: jobspec.DefaultRequeueExitCode).
	RequeueExitCode int `json:"requeue_exit_code,omitempty"`
	// Progress and ProgressOnSignal: the work the job will have saved
	// when it is parked, if its tasks are still running at the end of
	// the grace and if one exits with the requeue code (saved at the
	// signal) (engine.Stop.Progress); savedProgress picks by the outcome.
	Progress         time.Duration `json:"progress,omitempty"`
	ProgressOnSignal time.Duration `json:"progress_on_signal,omitempty"`
	// MovedTo: for a defragmenting preemption, the GPUs the victim
	// restarts on (engine.Preemption.MovedTo), so that a new leader binds
	// them to it again (engine.Engine.Preempting).
	MovedTo []engine.AllocPlacement `json:"moved_to,omitempty"`
	// PreemptorGPUs: for a move, what is bound to the job it makes room
	// for (engine.Preemption.PreemptorGPUs).
	PreemptorGPUs []engine.AllocPlacement `json:"preemptor_gpus,omitempty"`
	// Idle marks a reclaim of the tier's requeue idle action instead of a
	// preemption: IdleRequeue (stopped and queued again, as a preemption
	// is) or IdleStop (stopped for good: the job is deregistered, not
	// parked). "" for a preemption.
	Idle string `json:"idle,omitempty"`
	// Replacements: allocations Nomad placed on its own to replace a
	// lost or failed member of a gang being requeued, stopped at once
	// (engine.Preemption.Replacements). EndFailed: the gang is ended
	// failed (deregistered) instead of parked (engine.Preemption.EndFailed).
	Replacements []string  `json:"replacements,omitempty"`
	EndFailed    bool      `json:"end_failed,omitempty"`
	Created      time.Time `json:"created"`

	// modifyIndex of the variable, for check-and-set updates.
	modifyIndex uint64
	// outcome of a preemption as this executor saw it (not persisted).
	outcome string
	// withdraw: why the engine withdrew the preemption while it was
	// under way (Executor.applyWithdrawals; under Executor.mu; not
	// persisted: a new leader's engine decides again).
	withdraw string
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
