package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
)

// VariableItems renders an explanation as the items of the job's Nomad
// Variable (nomad/jobs/<job>/impact): the same state words as `impact
// queue`, the summary sentence first and the full reason after it, and
// the score and its terms rounded to whole points. Only what changes when
// the scheduler's view of the job changes is in it (no wait time, which
// grows every second: since is the moment it started), so a stable queue
// costs no writes, and a score moves the Variable only when it moves by a
// point. pageURL, when set, is the job's page on the agent (/ui/...).
func VariableItems(e agentapi.Explanation, pageURL string) map[string]string {
	items := map[string]string{
		"state":        e.State,
		"decision":     e.Decision,
		"summary":      e.Summary,
		"reason":       e.Reason,
		"tier":         e.Tier,
		"project":      e.Project,
		"gpus":         strconv.Itoa(e.GPUs),
		"allocations":  strconv.Itoa(e.Allocations),
		"preempted_by": e.PreemptedBy,
		"victims":      strings.Join(e.Victims, ","),
		"errors":       strings.Join(e.Errors, "; "),
		"page":         pageURL,
	}
	if e.Position > 0 {
		items["position"] = strconv.Itoa(e.Position)
	}
	if len(e.Terms) > 0 || e.Score != 0 {
		items["score"] = roundPoints(e.Score)
		for _, t := range e.Terms {
			items["score_"+t.Name] = roundPoints(t.Value)
		}
	}
	if !e.Since.IsZero() {
		items["since"] = e.Since.UTC().Format(time.RFC3339)
	}
	if len(e.Nodes) > 0 {
		groups := make([]string, 0, len(e.Nodes))
		for g := range e.Nodes {
			groups = append(groups, g)
		}
		sort.Strings(groups)
		parts := make([]string, len(groups))
		for i, g := range groups {
			parts[i] = g + ": " + strings.Join(e.Nodes[g], ",")
		}
		items["nodes"] = strings.Join(parts, "; ")
	}
	for k, v := range items {
		if v == "" {
			delete(items, k)
		}
	}
	return items
}

// roundPoints writes a score to whole points ("-0" as "0").
func roundPoints(v float64) string {
	r := math.Round(v)
	if r == 0 {
		r = 0
	}
	return strconv.FormatFloat(r, 'f', 0, 64)
}

// digest fingerprints what the job's Variable would say: a changed digest
// is exactly a Variable that needs rewriting.
func digest(e agentapi.Explanation) string {
	b, _ := json.Marshal(VariableItems(e, "")) // map keys are sorted
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
