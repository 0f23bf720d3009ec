package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// VariableItems renders an explanation as the items of the job's Nomad
// Variable (nomad/jobs/<job>/impact): everything /v1/explain/<job> shows
// but what grows every cycle, in the same words as `impact queue` and the
// job's page (the summary sentence first, the full reason after it).
// The run (RunLine) changes only when the job is registered again, as
// a parked job is with the work it saved. Left out, so a stable queue
// costs no writes: the wait time (since is the moment it started), the
// utilisation percentage and idle time (idle, idle_since and idle_note
// say what matters), and generated_at and leader (the writer adds
// decided_at; only the leader writes). The score and its
// terms are rounded to whole points, so a score moves the Variable only
// when it moves by a point. The engine's explanation is in it as well:
// its status, its reason where the agent's says more, the nodes that
// could not take the job (rejected), the reservation, victims, the
// pinned placement (GPUs and islands; blocks: each device block's GPUs)
// and warnings. pageURL, when set, is the job's page on
// the agent (/ui/...).
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
		"run":          e.RunLine(),
		"preempted_by": e.PreemptedBy,
		"errors":       strings.Join(e.Errors, "; "),
		"nodes":        strings.Join(agentapi.NodeLines(e.Nodes, ","), "; "),
		"history":      historyItem(e.History),
		"page":         pageURL,
	}
	if e.Position > 0 {
		items["position"] = strconv.Itoa(e.Position)
	}
	if !e.Since.IsZero() {
		items["since"] = e.Since.UTC().Format(time.RFC3339)
	}
	if !e.Submitted.IsZero() {
		items["submitted"] = e.Submitted.UTC().Format(time.RFC3339)
	}
	engineItems(items, e)
	idleItems(items, e.Entry)
	for k, v := range items {
		if v == "" {
			delete(items, k)
		}
	}
	return items
}

// engineItems adds the engine's explanation to items.
func engineItems(items map[string]string, e agentapi.Explanation) {
	if e.Engine == nil {
		return
	}
	x := e.Engine
	items["score"] = roundPoints(e.Score)
	for _, t := range e.Terms() {
		items["score_"+t.Name] = roundPoints(t.Value)
	}
	items["status"] = string(x.Status)
	if !strings.Contains(e.Reason, x.Reason) {
		// The agent's reason replaced the engine's (a standby, an
		// admission not carried out, a preempted job): keep both.
		items["engine_reason"] = x.Reason
	}
	items["rejected"] = rejectedItem(x.Rejected)
	if !x.ReservedUntil.IsZero() {
		items["reserved_until"] = x.ReservedUntil.UTC().Format(time.RFC3339)
	}
	items["victims"] = strings.Join(x.Victims, ",")
	items["placement"] = placementItem(x.Placement)
	items["blocks"] = blocksItem(x.Placement)
	items["warnings"] = strings.Join(x.Warnings, "; ")
}

// idleItems adds the utilisation layer: only whether the job is idle or
// hung, since when, and what is done (the idle time itself grows every
// poll).
func idleItems(items map[string]string, e agentapi.Entry) {
	items["idle_action"] = e.IdleAction
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
}

// rejectedItem renders why nodes could not take the job, one reason per
// clause: "<reason>: <n> node(s); ...", reasons sorted.
func rejectedItem(r map[string]int) string {
	parts := make([]string, 0, len(r))
	for why, n := range r {
		parts = append(parts, fmt.Sprintf("%s: %d node(s)", why, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// historyItem renders the state changes, one per line:
// "<RFC 3339> <state> <decision>: <summary>".
func historyItem(h []agentapi.Event) string {
	lines := make([]string, len(h))
	for i, ev := range h {
		lines[i] = ev.At.UTC().Format(time.RFC3339) + " " + ev.State + " " + ev.Decision + ": " + ev.Summary
	}
	return strings.Join(lines, "\n")
}

// placementItem renders the planned allocations, one per line:
// "<group> on <node>: <gpu> (island <n>), ...", the GPU IDs the admission
// pinned with their NVLink islands.
func placementItem(groups []engine.GroupPlacement) string {
	var lines []string
	for _, g := range groups {
		for _, p := range g.Allocs {
			parts := make([]string, len(p.GPUs))
			for k, id := range p.GPUs {
				parts[k] = id
				if k < len(p.Islands) {
					parts[k] += " (island " + strconv.Itoa(p.Islands[k]) + ")"
				}
			}
			lines = append(lines, g.Group+" on "+p.NodeID+": "+strings.Join(parts, ", "))
		}
	}
	return strings.Join(lines, "\n")
}

// blocksItem renders which GPUs each device block of a planned allocation
// gets, one allocation per line: "<group> on <node>: <task>#<index>:
// <gpu>,<gpu>; ..." ("" when the placement lists no blocks).
func blocksItem(groups []engine.GroupPlacement) string {
	var lines []string
	for _, g := range groups {
		for _, p := range g.Allocs {
			if len(p.Blocks) == 0 {
				continue
			}
			parts := make([]string, len(p.Blocks))
			for i, b := range p.Blocks {
				parts[i] = b.Task + "#" + strconv.Itoa(b.Index) + ": " + strings.Join(b.GPUs, ",")
			}
			lines = append(lines, g.Group+" on "+p.NodeID+": "+strings.Join(parts, "; "))
		}
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
