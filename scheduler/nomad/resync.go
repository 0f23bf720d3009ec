package nomad

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// probeReset reports whether Nomad's table indexes are now below what the
// model has seen: the agent lost its state (a dev agent restart) and the
// stream's old index is meaningless. The probes use a prefix that matches
// nothing, so they are cheap whatever the cluster's size.
func (w *Watcher) probeReset(ctx context.Context) (bool, error) {
	probes := []struct {
		path string
		seen uint64
	}{
		{"/v1/nodes?prefix=0000000000000000", w.m.maxNodes},
		{"/v1/jobs?prefix=impact-probe-none", w.m.maxJobs},
		{"/v1/allocations?prefix=0000000000000000", w.m.maxAllocs},
	}
	for _, p := range probes {
		var out []map[string]any
		qm, err := w.c.api.Raw().Query(p.path, &out, w.c.qns(ctx, "*"))
		if err != nil {
			return false, fmt.Errorf("probe %s: %w", p.path, err)
		}
		if qm.LastIndex < p.seen {
			return true, nil
		}
	}
	return false, nil
}

// resync lists nodes, jobs and allocations and replaces the mirror. The
// stream opened before it replays what changed meanwhile; the ModifyIndex
// guard makes that replay harmless.
func (w *Watcher) resync(ctx context.Context) error {
	start := time.Now()
	nm := newMirror()
	l, err := w.list(ctx, nm)
	if err != nil {
		return err
	}
	ended := nm.fill(l)
	w.dropVanished(nm, ended)
	// Keep the regression guard across resyncs unless Nomad reset.
	if old := w.m; w.lastIndex.Load() != 0 {
		nm.maxJobs, nm.maxAllocs, nm.maxNodes = max(nm.maxJobs, old.maxJobs), max(nm.maxAllocs, old.maxAllocs), max(nm.maxNodes, old.maxNodes)
	}
	w.m = nm
	err = nm.flush(w.store, translateConfig{parkingPool: w.cfg.ParkingPool})
	w.mu.Lock()
	w.stats.Resyncs++
	w.syncNodeErrs()
	w.mu.Unlock()
	w.log.Info("resynced with Nomad", "nodes", len(nm.nodes), "jobs", len(nm.jobs), "allocs", len(nm.allocs), "took", time.Since(start).Round(time.Millisecond))
	w.readyOnce.Do(func() { close(w.ready) })
	w.notify()
	if err != nil {
		w.log.Error("model rejected objects during resync", "error", err)
	}
	return nil
}

// endedBadly reports whether a job's summary counts a failed or lost
// allocation.
func endedBadly(sum *struct {
	Summary map[string]struct{ Failed, Lost int }
}) bool {
	if sum == nil {
		return false
	}
	for _, g := range sum.Summary {
		if g.Failed+g.Lost > 0 {
			return true
		}
	}
	return false
}

// listing is what a resync read from Nomad.
type listing struct {
	nodes  []*wireNode // nil where a listed node was gone by the time it was read
	jobs   []*wireJob  // likewise; and nil for stopped and dead jobs (but dead ones with failed or lost allocations)
	allocs []*wireAlloc
}

// list reads every node and live job in full (8 reads at a time) and lists
// the allocations, noting each list's table index in nm.
func (w *Watcher) list(ctx context.Context, nm *mirror) (*listing, error) {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	l := &listing{}
	var err error
	if l.nodes, err = w.listNodes(ctx, gctx, g, nm); err != nil {
		return nil, err
	}
	if l.jobs, err = w.listJobs(ctx, gctx, g, nm); err != nil {
		_ = g.Wait()
		return nil, err
	}
	qm, err := w.c.api.Raw().Query("/v1/allocations?resources=true&task_states=true", &l.allocs, w.c.qns(ctx, "*"))
	if err != nil {
		_ = g.Wait()
		return nil, fmt.Errorf("list allocations: %w", err)
	}
	nm.listedAllocs = qm.LastIndex
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return l, nil
}

// listNodes lists the nodes and starts reading each on g (the list has no
// devices' attributes or meta); the slice is filled once g is done.
func (w *Watcher) listNodes(ctx, gctx context.Context, g *errgroup.Group, nm *mirror) ([]*wireNode, error) {
	var stubs []struct{ ID string }
	qm, err := w.c.api.Raw().Query("/v1/nodes", &stubs, w.c.q(ctx))
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	nm.listedNodes = qm.LastIndex
	nodes := make([]*wireNode, len(stubs))
	for i, s := range stubs {
		g.Go(func() error {
			var n wireNode
			if _, err := w.c.api.Raw().Query("/v1/node/"+s.ID, &n, w.c.q(gctx)); err != nil {
				if isNotFound(err) {
					return nil
				}
				return fmt.Errorf("read node %s: %w", s.ID, err)
			}
			nodes[i] = &n
			return nil
		})
	}
	return nodes, nil
}

// readOnResync says whether a listed job is read in full. A stopped job
// is not. A dead job is read only when some allocation of it failed or was
// lost (an admitted gang's run may then have ended with its work not
// done, and the model keeps it until the scheduler has decided:
// cluster.Job.Dead), or when it is in the parking pool, where it is queued
// all the same (translateJob: one parked after its allocations ended
// reads dead until its registration's evaluation blocks). Dead jobs that
// completed, the many, cost no read.
func readOnResync(stop bool, status, pool, parkingPool string, endedBadly bool) bool {
	if stop {
		return false
	}
	return status != "dead" || endedBadly || pool == parkingPool
}

// listJobs lists the jobs and starts reading the live ones in full on g;
// the slice is filled once g is done.
func (w *Watcher) listJobs(ctx, gctx context.Context, g *errgroup.Group, nm *mirror) ([]*wireJob, error) {
	var stubs []struct {
		ID, Namespace, Status string
		NodePool              string
		Stop                  bool
		JobSummary            *struct {
			Summary map[string]struct{ Failed, Lost int }
		}
	}
	qm, err := w.c.api.Raw().Query("/v1/jobs", &stubs, w.c.qns(ctx, "*"))
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	nm.listedJobs = qm.LastIndex
	jobs := make([]*wireJob, len(stubs))
	for i, s := range stubs {
		if !readOnResync(s.Stop, s.Status, s.NodePool, w.cfg.ParkingPool, endedBadly(s.JobSummary)) {
			continue
		}
		g.Go(func() error {
			var j wireJob
			ns := s.Namespace
			if ns == "" {
				ns = w.c.ns
			}
			if _, err := w.c.api.Raw().Query("/v1/job/"+s.ID, &j, w.c.qns(gctx, ns)); err != nil {
				if isNotFound(err) {
					return nil
				}
				return fmt.Errorf("read job %s: %w", s.ID, err)
			}
			jobs[i] = &j
			return nil
		})
	}
	return jobs, nil
}

// fill loads a resync's listing into a fresh mirror and returns the
// allocations it found ended, by ID. A replacement whose list entry lacks
// its PreviousAllocation gets it from its predecessor's NextAllocation.
func (m *mirror) fill(l *listing) map[string]*wireAlloc {
	for _, n := range l.nodes {
		if n != nil {
			m.upsertNode(n, 0)
		}
	}
	for _, j := range l.jobs {
		if j != nil {
			m.upsertJob(j, false, 0)
		}
	}
	ended := map[string]*wireAlloc{}
	replaced := map[string]string{} // replacement -> the allocation it replaced
	for _, a := range l.allocs {
		if a.NextAllocation != "" {
			replaced[a.NextAllocation] = a.ID
		}
	}
	for _, a := range l.allocs {
		a.listed = true
		if prev, ok := replaced[a.ID]; ok && a.PreviousAllocation == "" {
			a.PreviousAllocation = prev
		}
		if terminalAlloc(a) {
			ended[a.ID] = a
			ns := a.Namespace
			if ns == "" {
				ns = "default"
			}
			m.noteEnded(cluster.JobKey(ns, a.JobID), a, true)
		} else {
			m.upsertAlloc(a, 0)
		}
	}
	return ended
}

// dropVanished makes the model lose what Nomad no longer has: nodes and
// jobs the new mirror lacks are marked dirty (its flush deletes them), and
// allocations are finished (ended while the stream was down) or deleted
// (garbage-collected: their end is unknown).
func (w *Watcher) dropVanished(nm *mirror, ended map[string]*wireAlloc) {
	snap := w.store.Snapshot()
	for _, n := range snap.Nodes() {
		if nm.nodes[n.ID] == nil {
			nm.dirtyNodes[n.ID] = true
		}
	}
	for _, j := range snap.Jobs() {
		if nm.jobs[j.ID] == nil {
			nm.dirtyJobs[j.ID] = true
		}
	}
	for _, a := range snap.Allocs() {
		if nm.allocs[a.ID] != nil {
			continue
		}
		if t := ended[a.ID]; t != nil {
			finishAlloc(w.store, t)
		} else {
			w.store.DeleteAlloc(a.ID)
		}
	}
}
