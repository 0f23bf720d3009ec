package agent

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/nomad"
)

// Reconciling what the agent keeps in Nomad, as consul_reconcile.go does
// for the Consul registration: creating it once is not enough, an
// operator or a clean-up script may delete it under a running agent. At
// every check (Options.ReconcileEvery, at the end of a cycle) the agent
// compares what Nomad holds with what it wants:
//
//   - the parking pool exists (every agent checks; the leader creates it
//     again: without it every submission to the queue and every park
//     fails) and holds no node (reported, not repaired: a node's pool is
//     its client's configuration, and Nomad would place queued jobs on
//     it);
//   - the leader's durable-state Variables (usage, requeue counts,
//     timeline, preemption records) are as it last wrote them
//     (StateChecker): one deleted or overwritten is written again at once;
//   - the lease: the elector writes it again itself within a beat when it
//     was deleted under the leader (nomad/lease.go); counted here. The
//     lock cannot be deleted while held (Nomad refuses it).
//
// What is found out of date shows in /v1/health until repaired, sets
// impact_nomad_state_in_sync to 0 and counts
// impact_nomad_state_repairs_total{what}; a repair or check that fails is
// retried with back-off (1s doubling up to the check interval).
type nomadState struct {
	pool    string
	pools   PoolManager
	store   StateStore
	elector Elector
	every   time.Duration
	log     hclog.Logger
	metrics *Metrics

	// Loop goroutine only.
	next         time.Time     // when the next check is due (clock time)
	backoff      time.Duration // the wait after a failed check or repair
	leaseRepairs uint64        // the elector's count at the last check

	mu       sync.Mutex
	problems []string
}

func newNomadState(o Options, log hclog.Logger) *nomadState {
	return &nomadState{pool: o.ParkingPool, pools: o.Pools, store: o.State, elector: o.Elector,
		every: o.ReconcileEvery, log: log, metrics: o.Metrics, backoff: time.Second}
}

// parkingPoolDescription is the description the agent gives the parking
// pool it creates.
const parkingPoolDescription = "impact scheduler parking pool: jobs wait here (no nodes) until admitted"

// reconcile checks, when due, what Nomad holds against what the agent
// wants and repairs what it may: the parking pool and the lease for
// anyone leading, the durable state for a term that may act (lctx set).
// resave writes the whole durable state at once; known are the
// preemption records the agent holds.
func (n *nomadState) reconcile(ctx, lctx context.Context, snap *cluster.Snapshot, now time.Time,
	resave func(context.Context) error, known func() []nomad.PreemptionRecord) {
	if now.Before(n.next) || ctx.Err() != nil {
		return
	}
	var problems []string
	failed := false
	if nodes := n.nodesInPool(snap); len(nodes) > 0 {
		problems = append(problems, fmt.Sprintf("node(s) %s are in the parking pool %q: Nomad places queued jobs on them; give them another node_pool in their client configuration",
			strings.Join(nodes, ", "), n.pool))
	}
	if p, bad := n.checkPool(ctx, lctx); p != "" {
		problems = append(problems, p)
		failed = failed || bad
	}
	if lr, ok := n.elector.(LeaseRepairReporter); ok {
		for c := lr.LeaseRepairs(); n.leaseRepairs < c; n.leaseRepairs++ {
			n.metrics.RecordNomadRepair("lease")
		}
	}
	if lctx != nil {
		if p := n.checkState(lctx, resave, known); p != "" {
			problems = append(problems, p)
			failed = true
		}
	}
	n.mu.Lock()
	n.problems = problems
	n.mu.Unlock()
	n.metrics.RecordNomadInSync(len(problems) == 0)
	if failed {
		n.next = now.Add(n.backoff)
		n.backoff = min(2*n.backoff, max(n.every, time.Second))
		return
	}
	n.next, n.backoff = now.Add(n.every), time.Second
}

// nodesInPool names the nodes the model has in the parking pool.
func (n *nomadState) nodesInPool(snap *cluster.Snapshot) []string {
	if snap == nil {
		return nil
	}
	var out []string
	for _, nd := range snap.Nodes() {
		if nd.Pool == n.pool {
			out = append(out, cmp.Or(nd.Name, nd.ID))
		}
	}
	slices.Sort(out)
	return out
}

// checkPool checks that the parking pool exists and, leading, creates it
// again. It returns the problem to report ("" if none) and whether it is
// a failure to retry with back-off.
func (n *nomadState) checkPool(ctx, lctx context.Context) (string, bool) {
	pc, ok := n.pools.(PoolChecker)
	if !ok {
		return "", false
	}
	exists, err := pc.NodePoolExists(ctx, n.pool)
	switch {
	case err != nil:
		return "checking the parking pool: " + err.Error(), true
	case exists:
		return "", false
	case lctx == nil:
		return fmt.Sprintf("parking pool %q does not exist in Nomad (the leader creates it again)", n.pool), false
	}
	if err := n.pools.EnsureNodePool(lctx, n.pool, parkingPoolDescription); err != nil {
		return fmt.Sprintf("parking pool %q was deleted; creating it again failed (retrying): %v", n.pool, err), true
	}
	n.log.Warn("the parking pool was deleted; created it again", "pool", n.pool)
	n.metrics.RecordNomadRepair("parking_pool")
	return "", false
}

// checkState compares the durable-state Variables with what this term
// wrote and writes the state again when they differ. It returns the
// problem left ("" when in sync or repaired).
func (n *nomadState) checkState(lctx context.Context, resave func(context.Context) error, known func() []nomad.PreemptionRecord) string {
	sc, ok := n.store.(StateChecker)
	if !ok {
		return ""
	}
	drift, err := sc.StateDrift(lctx)
	if err != nil {
		return "checking the durable state: " + err.Error()
	}
	if len(drift) == 0 {
		return ""
	}
	found := make([]string, len(drift))
	for i, d := range drift {
		found[i] = d.String()
	}
	sc.RewriteAll()
	if slices.ContainsFunc(drift, func(d nomad.VariableDrift) bool { return d.Name == "preemptions" }) {
		err = sc.RestorePreemptions(lctx, known())
	}
	if err == nil {
		err = resave(lctx)
	}
	if err != nil {
		return fmt.Sprintf("durable state out of date in Nomad (%s); writing it again failed (retrying): %v", strings.Join(found, "; "), err)
	}
	n.log.Warn("durable state in Nomad was out of date; written again", "found", strings.Join(found, "; "))
	for _, d := range drift {
		n.metrics.RecordNomadRepair(d.Name)
	}
	return ""
}

// newTerm starts a term's checks afresh: what earlier terms wrote is
// forgotten (another leader may have written since), and the first check
// comes at once.
func (n *nomadState) newTerm() {
	if sc, ok := n.store.(StateChecker); ok {
		sc.NewTerm()
	}
	n.next = time.Time{}
}

// problem is what health reports ("" when Nomad holds what the agent
// wants, as of the last check).
func (n *nomadState) problem() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.problems)
}
