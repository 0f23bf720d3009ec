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
	if len(e.Placement) > 0 {
		items["placement"] = placementItem(e.Placement)
	}
	items["warnings"] = strings.Join(e.Warnings, "; ")
	// The utilisation layer: only whether the job is idle or hung, since
	// when, and what is done (the idle time itself grows every poll).
	switch {
	case e.Hung:
		items["idle"] = "hung"
	case e.Idle:
		items["idle"] = "idle"
	}
	if e.Idle && !e.IdleSince.IsZero() {
		items["idle_since"] = e.IdleSince.UTC().Format(time.RFC3339)
	}
	if e.Idle {
		items["idle_note"] = e.IdleNote
	}
	for k, v := range items {
		if v == "" {
			delete(items, k)
		}
	}
	return items
}

// placementItem renders the planned allocations, one per line:
// "<group> on <node>: <gpu> (island <n>), ...", the GPU IDs the admission
// pinned with their NVLink islands.
func placementItem(ps []agentapi.PlacedAlloc) string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		parts := make([]string, len(p.GPUs))
		for k, id := range p.GPUs {
			parts[k] = id
			if k < len(p.Islands) {
				parts[k] += " (island " + strconv.Itoa(p.Islands[k]) + ")"
			}
		}
		lines[i] = p.Group + " on " + p.Node + ": " + strings.Join(parts, ", ")
	}
	return strings.Join(lines, "\n")
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
