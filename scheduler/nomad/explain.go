package nomad

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// ExplainWriter writes each queued job's explanation to the Variable
// nomad/jobs/<job>/impact in the job's namespace, which the Nomad UI shows
// under the job (and which the job's own tasks may read). It writes only
// when the explanation changed, so a steady queue costs no Raft writes.
type ExplainWriter struct {
	c   *Client
	log hclog.Logger

	mu sync.Mutex
	// last holds the items written per job (without decided_at), to skip
	// unchanged writes; bounded, since jobs come and go.
	last *bounded[map[string]string]
}

// maxExplainCache bounds ExplainWriter's memory of what it wrote; a job
// forgotten there is only written once more.
const maxExplainCache = 100000

// NewExplainWriter builds a writer.
func NewExplainWriter(c *Client, logger hclog.Logger) *ExplainWriter {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &ExplainWriter{c: c, log: logger.Named("explain"), last: newBounded[map[string]string](maxExplainCache)}
}

// ExplainPath is the Variable path of a job's explanation.
func ExplainPath(jobName string) string { return "nomad/jobs/" + jobName + "/impact" }

// ExplainItems renders an explanation as Variable items (all strings).
func ExplainItems(e *engine.Explanation) map[string]string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	items := map[string]string{
		"position":         strconv.Itoa(e.Position),
		"status":           string(e.Status),
		"score":            f(e.Score.Total),
		"score_tier":       f(e.Score.Tier),
		"score_fair_share": f(e.Score.FairShare),
		"score_deadline":   f(e.Score.Deadline),
		"score_age":        f(e.Score.Age),
		"tier":             e.Tier,
		"project":          e.Project,
		"gpus":             strconv.Itoa(e.GPUs),
		"reason":           e.Reason,
	}
	if len(e.Rejected) > 0 {
		b, _ := json.Marshal(e.Rejected)
		items["rejected"] = string(b)
	}
	if len(e.Victims) > 0 {
		items["victims"] = strings.Join(e.Victims, ",")
	}
	if !e.ReservedUntil.IsZero() {
		items["reserved_until"] = e.ReservedUntil.UTC().Format(time.RFC3339)
	}
	for k, v := range items {
		if v == "" {
			delete(items, k)
		}
	}
	return items
}

// Write stores the plan's explanations. Errors for single jobs are
// collected; the other jobs are still written.
func (x *ExplainWriter) Write(ctx context.Context, plan *engine.Plan) error {
	if plan == nil {
		return nil
	}
	ids := make([]string, 0, len(plan.Explanations))
	for id := range plan.Explanations {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var errs []error
	for _, id := range ids {
		if err := x.WriteOne(ctx, plan.Explanations[id], plan.Now); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// WriteOne writes one job's explanation if it changed since the last
// write; decidedAt is recorded as decided_at.
func (x *ExplainWriter) WriteOne(ctx context.Context, e *engine.Explanation, decidedAt time.Time) error {
	if e == nil {
		return nil
	}
	items := ExplainItems(e)
	x.mu.Lock()
	prev, seen := x.last.get(e.JobID)
	same := seen && maps.Equal(prev, items)
	x.mu.Unlock()
	if same {
		return nil
	}
	ns, id := splitJobKey(e.JobID)
	stored := maps.Clone(items)
	if decidedAt.IsZero() {
		decidedAt = time.Now()
	}
	stored["decided_at"] = decidedAt.UTC().Format(time.RFC3339)
	path := ExplainPath(id)
	if _, _, err := x.c.api.Variables().Update(&api.Variable{Path: path, Namespace: ns, Items: stored}, x.c.wns(ctx, ns)); err != nil {
		return fmt.Errorf("write explanation %s (namespace %s): %w", path, ns, err)
	}
	x.mu.Lock()
	x.last.set(e.JobID, items)
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

// Forget deletes a job's explanation (the job left the queue for good).
func (x *ExplainWriter) Forget(ctx context.Context, jobID string) error {
	ns, id := splitJobKey(jobID)
	x.mu.Lock()
	x.last.del(jobID)
	x.mu.Unlock()
	if _, err := x.c.api.Variables().Delete(ExplainPath(id), x.c.wns(ctx, ns)); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete explanation of %s: %w", jobID, err)
	}
	return nil
}
