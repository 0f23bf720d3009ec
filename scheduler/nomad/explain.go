package nomad

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// ExplainWriter keeps each managed job's explanation in the Variable
// nomad/jobs/<job>/impact of the job's namespace, where `nomad var get`
// and the job's own tasks (workload identity) can read it. The Nomad UI
// does not show it under the job: the job's Variables tab links
// nomad/jobs/<job> and the per-group and per-task paths only, and lists
// this one as if "impact" were a task group; the way in for people is the
// agent's page (/ui/), which the Variable names in its page item.
//
// The items are the caller's (the agent renders them); the writer adds
// written_by and decided_at. It writes only when the items changed, so a
// steady queue costs no Raft writes, and it never takes over a Variable
// it did not write: every write is checked-and-set against the index it
// last wrote (or "must not exist" for the first), and a Variable without
// the written_by item (a user's: a task group named "impact" makes the
// path theirs) is left alone. It deletes only its own Variables.
type ExplainWriter struct {
	c   *Client
	log hclog.Logger

	mu sync.Mutex
	// last holds, per job, the items written (without decided_at) and the
	// Variable's ModifyIndex after the write, to skip unchanged writes
	// and to check-and-set the next; bounded, since jobs come and go.
	last *bounded[written]
	// foreign remembers jobs whose path holds a Variable someone else
	// wrote, so it is not read again on every change.
	foreign *bounded[bool]
}

type written struct {
	items map[string]string
	index uint64
}

// Explanation Variable items the writer owns.
const (
	// WrittenByItem marks a Variable the scheduler wrote (and may
	// rewrite or delete); its value is WrittenBy.
	WrittenByItem = "written_by"
	WrittenBy     = "impact agent"
	// DecidedAtItem is when the explanation was decided (RFC 3339).
	DecidedAtItem = "decided_at"
)

// maxExplainCache bounds ExplainWriter's memory of what it wrote; a job
// forgotten there is only written once more.
const maxExplainCache = 100000

// ErrNotOurs says a job's explanation path holds a Variable the scheduler
// did not write; it is left as it is.
var ErrNotOurs = errors.New("a Variable the impact agent did not write is at this path; leaving it alone")

// NewExplainWriter builds a writer.
func NewExplainWriter(c *Client, logger hclog.Logger) *ExplainWriter {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &ExplainWriter{c: c, log: logger.Named("explain"),
		last: newBounded[written](maxExplainCache), foreign: newBounded[bool](maxExplainCache)}
}

// ExplainPath is the Variable path of a job's explanation.
func ExplainPath(jobName string) string { return "nomad/jobs/" + jobName + "/impact" }

// WriteItems stores a job's explanation (jobID is namespace/job) unless it
// equals the last one written. decidedAt is recorded as decided_at. A
// Variable at the path that the scheduler did not write makes it return
// ErrNotOurs (once; later calls for the job skip it silently).
func (x *ExplainWriter) WriteItems(ctx context.Context, jobID string, items map[string]string, decidedAt time.Time) error {
	x.mu.Lock()
	prev, seen := x.last.get(jobID)
	_, isForeign := x.foreign.get(jobID)
	x.mu.Unlock()
	if isForeign || (seen && maps.Equal(prev.items, items)) {
		return nil
	}
	ns, id := splitJobKey(jobID)
	stored := maps.Clone(items)
	if decidedAt.IsZero() {
		decidedAt = time.Now()
	}
	stored[DecidedAtItem] = decidedAt.UTC().Format(time.RFC3339)
	stored[WrittenByItem] = WrittenBy
	path := ExplainPath(id)
	v := &api.Variable{Path: path, Namespace: ns, Items: stored, ModifyIndex: prev.index}
	out, _, err := x.c.api.Variables().CheckedUpdate(v, x.c.wns(ctx, ns))
	var conflict api.ErrCASConflict
	if errors.As(err, &conflict) {
		// Not the Variable this writer last wrote: another leader's
		// write (ours to take over), a user's (not ours), or deleted.
		switch cur := conflict.Conflict; {
		case cur == nil || cur.ModifyIndex == 0:
			v.ModifyIndex = 0
		case cur.Items[WrittenByItem] != WrittenBy:
			x.mu.Lock()
			x.foreign.set(jobID, true)
			x.last.del(jobID)
			x.mu.Unlock()
			x.log.Warn("not writing the explanation: the path holds a Variable the agent did not write",
				"path", path, "namespace", ns)
			return fmt.Errorf("write explanation %s (namespace %s): %w", path, ns, ErrNotOurs)
		default:
			v.ModifyIndex = cur.ModifyIndex
		}
		out, _, err = x.c.api.Variables().CheckedUpdate(v, x.c.wns(ctx, ns))
	}
	if err != nil {
		x.mu.Lock()
		x.last.del(jobID) // unknown state: check-and-set afresh next time
		x.mu.Unlock()
		return fmt.Errorf("write explanation %s (namespace %s): %w", path, ns, err)
	}
	x.mu.Lock()
	x.last.set(jobID, written{items: maps.Clone(items), index: out.ModifyIndex})
	x.mu.Unlock()
	return nil
}

// Read returns a job's stored explanation items (nil when none).
func (x *ExplainWriter) Read(ctx context.Context, jobID string) (map[string]string, error) {
	ns, id := splitJobKey(jobID)
	v, _, err := x.c.api.Variables().Peek(ExplainPath(id), x.c.qns(ctx, ns))
	if err != nil {
		return nil, fmt.Errorf("read explanation of %s: %w", jobID, err)
	}
	if v == nil {
		return nil, nil
	}
	return v.Items, nil
}

// Forget deletes a job's explanation (the job left the queue for good),
// if the scheduler wrote it: the delete is checked against the index
// read, so a Variable rewritten meanwhile is not lost.
func (x *ExplainWriter) Forget(ctx context.Context, jobID string) error {
	x.mu.Lock()
	x.last.del(jobID)
	x.foreign.del(jobID)
	x.mu.Unlock()
	ns, id := splitJobKey(jobID)
	_, err := x.deleteOurs(ctx, ns, ExplainPath(id))
	return err
}

// deleteOurs deletes the Variable at path if the scheduler wrote it and
// reports whether it did.
func (x *ExplainWriter) deleteOurs(ctx context.Context, ns, path string) (bool, error) {
	v, _, err := x.c.api.Variables().Peek(path, x.c.qns(ctx, ns))
	if err != nil {
		return false, fmt.Errorf("read explanation %s (namespace %s) before deleting it: %w", path, ns, err)
	}
	if v == nil || v.Items[WrittenByItem] != WrittenBy {
		return false, nil
	}
	if _, err := x.c.api.Variables().CheckedDelete(path, v.ModifyIndex, x.c.wns(ctx, ns)); err != nil {
		var conflict api.ErrCASConflict
		if errors.As(err, &conflict) || isNotFound(err) {
			return false, nil // rewritten or deleted meanwhile: not ours to delete now
		}
		return false, fmt.Errorf("delete explanation %s (namespace %s): %w", path, ns, err)
	}
	return true, nil
}

// Sweep deletes the scheduler's explanations of jobs that keep says are
// gone (keep gets namespace/job), in every namespace the token may list:
// explanations of jobs that left while no agent led, or before this
// version removed them. It returns how many it deleted.
func (x *ExplainWriter) Sweep(ctx context.Context, keep func(jobID string) bool) (int, error) {
	metas, _, err := x.c.api.Variables().PrefixList("nomad/jobs/", x.c.qns(ctx, "*"))
	if err != nil {
		return 0, fmt.Errorf("list explanations: %w", err)
	}
	n := 0
	var errs []error
	for _, m := range metas {
		job, ok := strings.CutSuffix(strings.TrimPrefix(m.Path, "nomad/jobs/"), "/impact")
		if !ok || job == "" || strings.Contains(job, "/") {
			continue
		}
		key := m.Namespace + "/" + job
		if keep(key) {
			continue
		}
		x.mu.Lock()
		x.last.del(key)
		x.foreign.del(key)
		x.mu.Unlock()
		deleted, err := x.deleteOurs(ctx, m.Namespace, m.Path)
		if err != nil {
			errs = append(errs, err)
		} else if deleted {
			n++
		}
	}
	return n, errors.Join(errs...)
}
