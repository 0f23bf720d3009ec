package agent

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/nomad"
)

// The timeline with the durable state: the leader saves each job's
// history with the state, and a new leader (after a restart or a
// failover) starts from it instead of from nothing.

// encodeTimeline encodes each job's events, keeping the jobs with the
// most recent events within maxBytes (the rest are dropped: the history
// is bounded, the newest matters most).
func encodeTimeline(tl map[string][]agentapi.Event, maxBytes int) map[string]string {
	ids := slices.Collect(maps.Keys(tl))
	last := func(id string) time.Time {
		if evs := tl[id]; len(evs) > 0 {
			return evs[len(evs)-1].At
		}
		return time.Time{}
	}
	slices.SortFunc(ids, func(a, b string) int { return last(b).Compare(last(a)) })
	out := map[string]string{}
	size := 0
	for _, id := range ids {
		if len(tl[id]) == 0 {
			continue
		}
		b, err := json.Marshal(tl[id])
		if err != nil {
			continue
		}
		if size+len(id)+len(b) > maxBytes {
			break
		}
		size += len(id) + len(b)
		out[id] = string(b)
	}
	return out
}

// decodeTimeline is encodeTimeline's inverse; items that do not decode
// are skipped.
func decodeTimeline(items map[string]string) map[string][]agentapi.Event {
	out := make(map[string][]agentapi.Event, len(items))
	for id, s := range items {
		var evs []agentapi.Event
		if json.Unmarshal([]byte(s), &evs) == nil && len(evs) > 0 {
			out[id] = evs
		}
	}
	return out
}

// mergeTimeline starts each job's timeline from the saved one, followed
// by what this agent saw after its last saved event (a standby keeps its
// own timeline, from when it started).
func (c *cycler) mergeTimeline(saved map[string][]agentapi.Event) {
	for id, evs := range saved {
		own := c.timeline[id]
		merged := slices.Clone(evs)
		lastAt := evs[len(evs)-1].At
		for _, e := range own {
			if !e.At.After(lastAt) {
				continue
			}
			if p := merged[len(merged)-1]; p.State == e.State && p.Decision == e.Decision {
				continue
			}
			merged = append(merged, e)
		}
		if len(merged) > agentapi.MaxHistory {
			merged = merged[len(merged)-agentapi.MaxHistory:]
		}
		c.timeline[id] = merged
	}
}

// saveTimeline writes the timeline when it changed since the last save.
func (s *stateAdapter) saveTimeline(ctx context.Context, tl map[string][]agentapi.Event) error {
	enc := encodeTimeline(tl, nomad.MaxTimelineBytes)
	if s.savedTimeline != nil && maps.Equal(s.savedTimeline, enc) {
		return nil
	}
	if err := s.st.SaveTimeline(ctx, enc); err != nil {
		return err
	}
	s.savedTimeline = enc
	return nil
}
