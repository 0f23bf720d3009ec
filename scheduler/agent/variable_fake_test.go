package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
)

// The job's Variable holds everything /v1/explain/<job> shows, field by
// field, for a running, a waiting and an invalid job on the Nomad fake:
// every field of the API's JSON (the engine's explanation included) that
// is set must be in the Variable with the same value, or be one of the
// few that change every cycle (which the Variable leaves out on purpose).
// A field added to the explanation fails this test until the Variable
// carries it too.
func TestFakeNomadVariableHoldsTheExplanation(t *testing.T) {
	c := newFakeCluster(t, 1, 1, 4)
	s := c.start("a1")
	eventuallyT(t, 5*time.Second, "leader", func() (bool, string) { return s.svc.Agent.IsLeader(), "" })
	c.submit("first", map[string]string{"impact_tier": "high"}, 1, 4)
	eventuallyT(t, 10*time.Second, "first running", func() (bool, string) { return c.running("first") == 1, "" })
	c.submit("second", map[string]string{"impact_tier": "normal", "impact_project": "olmo"}, 1, 4)
	c.submit("typo", map[string]string{"impact_tier": "urgnet"}, 1, 1)
	for job, state := range map[string]string{"first": agentapi.StateRunning, "second": agentapi.StateWaiting, "typo": agentapi.StateInvalid} {
		eventuallyT(t, 10*time.Second, job+": the Variable says what /v1/explain says", func() (bool, string) {
			e, err := s.api.Explain(context.Background(), "", job)
			if err != nil || e.State != state {
				return false, fmt.Sprintf("explain: %v, state %q", err, e.State)
			}
			items := c.fake.Variable("nomad/jobs/" + job + "/impact")
			bad := variableMismatches(t, e, items)
			return len(bad) == 0, fmt.Sprintf("%s\nvariable %v", strings.Join(bad, "\n"), items)
		})
	}
	e, _ := s.api.Explain(context.Background(), "", "first")
	if e.Engine == nil || len(e.Engine.Placement) == 0 {
		t.Errorf("the running job's explanation lacks the engine's admission (placement): %+v", e.Engine)
	}
	s.stop()
}

// volatileFields are the fields of /v1/explain the Variable leaves out:
// they change every cycle or poll, or are where the Variable is.
var volatileFields = map[string]string{
	"wait_seconds":        "grows every second; since is in the Variable",
	"generated_at":        "every cycle; the writer records decided_at",
	"leader":              "only the leader writes",
	"utilization_percent": "every poll; idle and idle_since are in the Variable",
	"idle_seconds":        "every poll; idle_since is in the Variable",
	"namespace":           "the Variable's namespace",
	"job":                 "the Variable's path",
	"engine.job_id":       "the Variable's namespace and path",
}

// variableMismatches compares an explanation with its Variable's items,
// one JSON field of the explanation at a time.
func variableMismatches(t *testing.T, e agentapi.Explanation, items map[string]string) []string {
	t.Helper()
	if items == nil {
		return []string{"no Variable"}
	}
	var bad []string
	for _, key := range setFields(t, e) {
		if _, ok := volatileFields[key]; ok {
			continue
		}
		if msg := checkField(key, e, items); msg != "" {
			bad = append(bad, key+": "+msg)
		}
	}
	return bad
}

// setFields lists the JSON fields of e that are set (not zero), the
// engine's as engine.<field>.
func setFields(t *testing.T, e agentapi.Explanation) []string {
	t.Helper()
	top := rawFields(t, e)
	var out []string
	for k, v := range top {
		if k == "engine" {
			for ek, ev := range rawFields(t, json.RawMessage(v)) {
				if !zeroJSON(ev) {
					out = append(out, "engine."+ek)
				}
			}
			continue
		}
		if !zeroJSON(v) {
			out = append(out, k)
		}
	}
	return out
}

func rawFields(t *testing.T, v any) map[string]json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func zeroJSON(v json.RawMessage) bool {
	switch s := string(bytes.TrimSpace(v)); s {
	case `""`, "0", "false", "null", "[]", "{}", `"0001-01-01T00:00:00Z"`:
		return true
	}
	return false
}

// checkField says how the Variable differs from e in one field ("" when
// it does not).
func checkField(key string, e agentapi.Explanation, items map[string]string) string {
	x := e.Decided()
	eq := func(item, want string) string {
		if items[item] != want {
			return fmt.Sprintf("item %s = %q, want %q", item, items[item], want)
		}
		return ""
	}
	has := func(item string, parts ...string) string {
		for _, p := range parts {
			if !strings.Contains(items[item], p) {
				return fmt.Sprintf("item %s = %q lacks %q", item, items[item], p)
			}
		}
		return ""
	}
	points := func(v float64) string {
		if r := math.Round(v); r != 0 {
			return strconv.FormatFloat(r, 'f', 0, 64)
		}
		return "0"
	}
	switch key {
	case "state", "decision", "summary", "reason", "tier", "project", "preempted_by", "idle_note", "idle_action":
		return eq(key, stringField(e, key))
	case "position":
		return eq(key, strconv.Itoa(e.Position))
	case "gpus":
		return eq(key, strconv.Itoa(e.GPUs))
	case "allocations":
		return eq(key, strconv.Itoa(e.Allocations))
	case "score", "engine.score":
		return eq("score", points(e.Score)) + eq("score_tier", points(x.Score.Tier)) + eq("score_fair_share", points(x.Score.FairShare)) +
			eq("score_deadline", points(x.Score.Deadline)) + eq("score_age", points(x.Score.Age)) + eq("score_short", points(x.Score.Short))
	case "since":
		return eq(key, e.Since.UTC().Format(time.RFC3339))
	case "submitted":
		return eq(key, e.Submitted.UTC().Format(time.RFC3339))
	case "idle_since":
		return eq(key, e.IdleSince.UTC().Format(time.RFC3339))
	case "idle", "hung":
		return eq("idle", map[bool]string{true: "hung", false: "idle"}[e.Hung])
	case "errors":
		return has(key, e.Errors...)
	case "nodes":
		for g, nodes := range e.Nodes {
			if msg := has(key, append([]string{g + ": "}, nodes...)...); msg != "" {
				return msg
			}
		}
		return ""
	case "history":
		if n := len(strings.Split(items[key], "\n")); n != len(e.History) {
			return fmt.Sprintf("item history has %d lines, want %d", n, len(e.History))
		}
		for _, h := range e.History {
			if msg := has(key, h.At.UTC().Format(time.RFC3339)+" "+h.State+" "+h.Decision+": "+h.Summary); msg != "" {
				return msg
			}
		}
		return ""
	case "engine.position":
		// The queue position counts only the waiting jobs: at most the
		// engine's, which also counts admitted jobs not yet running.
		if e.State == agentapi.StateWaiting && (e.Position < 1 || e.Position > x.Position) {
			return fmt.Sprintf("engine position %d, queue position %d", x.Position, e.Position)
		}
		return "" // an admitted job's place in the decision order is not its queue position
	case "engine.status":
		return eq("status", string(x.Status))
	case "engine.tier", "engine.project", "engine.gpus":
		if x.Tier != e.Tier && x.Tier != "" || x.Project != e.Project && x.Project != "" || x.GPUs != e.GPUs {
			return fmt.Sprintf("the engine's tier/project/GPUs %s/%s/%d differ from the entry's %s/%s/%d (which the Variable holds)",
				x.Tier, x.Project, x.GPUs, e.Tier, e.Project, e.GPUs)
		}
		return ""
	case "engine.reason":
		if strings.Contains(items["reason"], x.Reason) {
			return ""
		}
		return eq("engine_reason", x.Reason)
	case "engine.rejected":
		for why, n := range x.Rejected {
			if msg := has("rejected", fmt.Sprintf("%s: %d node(s)", why, n)); msg != "" {
				return msg
			}
		}
		return ""
	case "engine.reserved_until":
		return eq("reserved_until", x.ReservedUntil.UTC().Format(time.RFC3339))
	case "engine.victims":
		return has("victims", x.Victims...)
	case "engine.warnings":
		return has("warnings", x.Warnings...)
	case "engine.placement":
		for _, g := range x.Placement {
			for _, a := range g.Allocs {
				if msg := has("placement", append([]string{g.Group + " on " + a.NodeID + ": "}, a.GPUs...)...); msg != "" {
					return msg
				}
				for _, b := range a.Blocks {
					if msg := has("blocks", b.Task+"#"+strconv.Itoa(b.Index)+": "+strings.Join(b.GPUs, ",")); msg != "" {
						return msg
					}
				}
			}
		}
		return ""
	}
	return "is shown by /v1/explain but not in the Variable (add it to VariableItems, or to volatileFields with why)"
}

// stringField reads one string field of the explanation by its JSON name.
func stringField(e agentapi.Explanation, key string) string {
	switch key {
	case "state":
		return e.State
	case "decision":
		return e.Decision
	case "summary":
		return e.Summary
	case "reason":
		return e.Reason
	case "tier":
		return e.Tier
	case "project":
		return e.Project
	case "preempted_by":
		return e.PreemptedBy
	case "idle_note":
		return e.IdleNote
	case "idle_action":
		return e.IdleAction
	}
	return ""
}
