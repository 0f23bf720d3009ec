package nomad

import (
	"context"
	"fmt"
)

// The decision history (each job's timeline, `impact explain`'s and the
// pages'), kept with the durable state so that it survives a restart and
// a failover. One Variable, <prefix>/timeline, one item per job (its
// events as the agent encodes them); the caller bounds it
// (MaxTimelineBytes).

// MaxTimelineBytes bounds the saved timeline: Nomad refuses a Variable
// over 64 KiB, and the history is worth less than the rest of the state.
const MaxTimelineBytes = 48 << 10

// LoadTimeline returns the saved timeline items by job ID (empty when
// none was saved).
func (s *StateStore) LoadTimeline(ctx context.Context) (map[string]string, error) {
	path := s.cfg.Prefix + "/timeline"
	v, err := s.read(ctx, path)
	if err != nil || v == nil {
		return map[string]string{}, err
	}
	out := make(map[string]string, len(v.Items))
	for k, val := range v.Items {
		job, err := unescapeSegment(k)
		if err != nil {
			return nil, fmt.Errorf("variable %s: item %q: %w", path, k, err)
		}
		out[job] = val
	}
	return out, nil
}

// SaveTimeline replaces the saved timeline; with none left the Variable
// is deleted (Nomad keeps no Variable without items).
func (s *StateStore) SaveTimeline(ctx context.Context, byJob map[string]string) error {
	path := s.cfg.Prefix + "/timeline"
	if len(byJob) == 0 {
		return s.del(ctx, path)
	}
	items := make(map[string]string, len(byJob))
	for job, v := range byJob {
		items[varPathSegment(job)] = v
	}
	return s.put(ctx, path, items)
}
