package agent

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Start-up and shutdown chores of Run that no other part owns: the
// parking pool, and the Consul registration with its retries.

// ensurePool creates the parking pool, retrying for a while: at start-up
// (make dev, a node reboot) Nomad may come up after the agent. A pool that
// still cannot be created after PoolRetryFor is an error the operator must
// see (usually a token without node_pool write).
func (a *Agent) ensurePool(ctx context.Context) error {
	deadline := a.opts.Clock().Add(a.opts.PoolRetryFor)
	backoff := 250 * time.Millisecond
	for {
		err := a.opts.Pools.EnsureNodePool(ctx, a.opts.ParkingPool,
			"impact scheduler parking pool: jobs wait here (no nodes) until admitted")
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

// register registers the agent in Consul. A failure is not fatal:
// scheduling works without Consul. Health reports it, and registration is
// retried in the background (tracked by wg) until it succeeds.
func (a *Agent) register(ctx context.Context, r *Registrar, wg *sync.WaitGroup) {
	err := r.Register()
	if err == nil {
		return
	}
	a.log.Error("consul registration failed; retrying in the background", "error", err)
	a.health.setConsulErr(err)
	goWG(wg, func() { a.retryRegister(ctx, r) })
}

// retryRegister retries the Consul registration with backoff (1s doubling
// to 1m) until it succeeds or ctx ends: Consul down at start-up must not
// leave the agent out of the catalog until its next restart.
func (a *Agent) retryRegister(ctx context.Context, r *Registrar) {
	backoff := time.Second
	for sleepCtx(ctx, backoff) {
		err := r.Register()
		a.health.setConsulErr(err)
		if err == nil {
			return
		}
		a.log.Warn("consul registration failed, retrying", "error", err, "backoff", backoff)
		backoff = min(backoff*2, time.Minute)
	}
}

func (a *Agent) deregister(r *Registrar) {
	if err := r.Deregister(); err != nil {
		a.log.Error("consul deregistration failed", "error", err)
	}
}
