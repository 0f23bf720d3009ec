package nomad

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Checking the durable state against Nomad. Writing a Variable once is not
// enough: an operator (or a script cleaning up) may delete or overwrite
// it, and the agent writes the idle and gang requeue counts and the
// timeline only when they change, so a deleted one would stay deleted.
// The store remembers the ModifyIndex Nomad gave each of its last writes
// of the durable-state Variables (usage, requeues, gang-requeues,
// timeline, preemptions; not intents, which the executor reads back
// itself) and Drift compares them with one list of the prefix (metadata
// only): a Variable missing, or written by someone else since, is drift.
// The agent repairs it by writing its state again (RestorePreemptions for
// the records the executor appends to).

// writtenVars is, per Variable path, the ModifyIndex of this store's last
// write. Writers are the agent's loop and the executor's preemptions, so
// it has its own lock.
type writtenVars struct {
	mu  sync.Mutex
	idx map[string]uint64
}

func (w *writtenVars) set(path string, idx uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.idx == nil {
		w.idx = map[string]uint64{}
	}
	w.idx[path] = idx
}

func (w *writtenVars) drop(path string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.idx, path)
}

func (w *writtenVars) snapshot() map[string]uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.idx)
}

func (w *writtenVars) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.idx = nil
}

// put writes a durable-state Variable (last writer wins) and remembers
// the index it got.
func (s *StateStore) put(ctx context.Context, path string, items map[string]string) error {
	out, _, err := s.c.api.Variables().Update(&api.Variable{Path: path, Items: items}, s.c.w(ctx))
	if err != nil {
		return fmt.Errorf("write variable %s: %w", path, err)
	}
	s.written.set(path, out.ModifyIndex)
	return nil
}

// del deletes a durable-state Variable (Nomad keeps none without items).
func (s *StateStore) del(ctx context.Context, path string) error {
	if _, err := s.c.api.Variables().Delete(path, s.c.w(ctx)); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete variable %s: %w", path, err)
	}
	s.written.drop(path)
	return nil
}

// VariableDrift is a durable-state Variable Nomad no longer holds as this
// store last wrote it.
type VariableDrift struct {
	// Name is the Variable's path under the state prefix ("usage",
	// "requeues", "gang-requeues", "timeline", "preemptions").
	Name string
	// Missing: Nomad holds no such Variable (it was deleted). Otherwise
	// someone else wrote it since: Have is its ModifyIndex now, Want the
	// one this store's write got.
	Missing    bool
	Want, Have uint64
}

func (d VariableDrift) String() string {
	if d.Missing {
		return "variable " + d.Name + " deleted"
	}
	return fmt.Sprintf("variable %s written by someone else (modify index %d, this agent wrote %d)", d.Name, d.Have, d.Want)
}

// Drift lists the durable-state Variables written since ForgetWritten
// that Nomad no longer holds as written, by name. One list request.
func (s *StateStore) Drift(ctx context.Context) ([]VariableDrift, error) {
	before := s.written.snapshot()
	if len(before) == 0 {
		return nil, nil
	}
	prefix := s.cfg.Prefix + "/"
	metas, _, err := s.c.api.Variables().PrefixList(prefix, s.c.q(ctx))
	if err != nil {
		return nil, fmt.Errorf("list variables under %s: %w", prefix, err)
	}
	have := make(map[string]uint64, len(metas))
	for _, m := range metas {
		have[m.Path] = m.ModifyIndex
	}
	// A write that landed while the list was on its way may be missing
	// from it: only what was unchanged throughout is compared.
	after := s.written.snapshot()
	var out []VariableDrift
	for path, want := range before {
		if got, ok := after[path]; !ok || got != want {
			continue
		}
		got, ok := have[path]
		if ok && got == want {
			continue
		}
		out = append(out, VariableDrift{Name: strings.TrimPrefix(path, prefix), Missing: !ok, Want: want, Have: got})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ForgetWritten forgets what this store wrote: a new term starts it (in
// between another leader wrote the state), and a Variable forgotten is
// not checked until this store writes it again.
func (s *StateStore) ForgetWritten() { s.written.reset() }

// RestorePreemptions writes the preemption records the agent still knows
// back into the preemptions Variable, together with the ones Nomad holds
// now (check-and-set, so a record the executor appends meanwhile is not
// lost), after the Variable was deleted or overwritten. The agent dates a
// preemption when it decided it, the executor when it finished (a grace
// later), so a known record is taken for one already there when job and
// preemptor match and the times lie within sameRecordWithin. The newest
// MaxPreemptionRecords are kept.
func (s *StateStore) RestorePreemptions(ctx context.Context, known []PreemptionRecord) error {
	return s.updatePreemptions(ctx, "restore preemption records", func(recs []PreemptionRecord, unreadable error, exists bool) ([]PreemptionRecord, bool, error) {
		if unreadable != nil {
			// Overwritten with something else: the agent's records are
			// all there is.
			s.log.Warn("preemption records unreadable; writing the agent's own", "error", unreadable)
		}
		held := len(recs)
		for _, r := range known {
			if !slices.ContainsFunc(recs[:held], func(h PreemptionRecord) bool { return sameRecord(h, r) }) {
				recs = append(recs, r)
			}
		}
		if len(recs) == 0 || (len(recs) == held && exists) {
			return nil, false, nil
		}
		slices.SortStableFunc(recs, func(a, b PreemptionRecord) int { return a.At.Compare(b.At) })
		return recs, true, nil
	})
}

// sameRecordWithin is how far apart the agent's and the executor's times
// of one preemption may lie (its grace and settling, in practice seconds
// to minutes).
const sameRecordWithin = 15 * time.Minute

func sameRecord(a, b PreemptionRecord) bool {
	d := a.At.Sub(b.At)
	return a.JobID == b.JobID && a.Preemptor == b.Preemptor && d <= sameRecordWithin && d >= -sameRecordWithin
}
