package agent

import (
	"context"
	"fmt"
	"time"
)

// Start-up and shutdown chores of Run that no other part owns: the
// parking pool (kept afterwards by nomad_reconcile.go), and the Consul
// deregistration (the registration is kept
// up to date by reconcileConsul, consul_reconcile.go).

// ensurePool creates the parking pool, retrying for a while: at start-up
// (make dev, a node reboot) Nomad may come up after the agent. A pool that
// still cannot be created after PoolRetryFor is an error the operator must
// see (usually a token without node_pool write).
func (a *Agent) ensurePool(ctx context.Context) error {
	deadline := a.opts.Clock().Add(a.opts.PoolRetryFor)
	backoff := 250 * time.Millisecond
	for {
		err := a.opts.Pools.EnsureNodePool(ctx, a.opts.ParkingPool, parkingPoolDescription)
		if err == nil {
			a.log.Info("parking pool ready", "pool", a.opts.ParkingPool)
			return nil
		}
		if ctx.Err() != nil || !a.opts.Clock().Before(deadline) {
			return fmt.Errorf("creating parking pool %q: %w", a.opts.ParkingPool, err)
		}
		a.log.Warn("creating parking pool failed, retrying", "pool", a.opts.ParkingPool, "error", err, "backoff", backoff)
		if !sleepCtx(ctx, backoff) {
			return fmt.Errorf("creating parking pool %q: %w", a.opts.ParkingPool, ctx.Err())
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

func (a *Agent) deregister(r *Registrar) {
	if err := r.Deregister(); err != nil {
		a.log.Error("consul deregistration failed", "error", err)
	}
}
