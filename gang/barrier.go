package gang

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Assignment is what a member learns when its gang is complete.
type Assignment struct {
	Gang           string
	Generation     int
	WorldSize      int
	Rank           int
	NodeRank       int
	NNodes         int
	LocalRank      int
	LocalWorldSize int
	MasterAddr     string
	MasterPort     int
}

// Env is the rendezvous environment injected into the task.
func (a Assignment) Env() map[string]string {
	return map[string]string{
		"WORLD_SIZE":        strconv.Itoa(a.WorldSize),
		"RANK":              strconv.Itoa(a.Rank),
		"NODE_RANK":         strconv.Itoa(a.NodeRank),
		"NNODES":            strconv.Itoa(a.NNodes),
		"LOCAL_RANK":        strconv.Itoa(a.LocalRank),
		"LOCAL_WORLD_SIZE":  strconv.Itoa(a.LocalWorldSize),
		"MASTER_ADDR":       a.MasterAddr,
		"MASTER_PORT":       strconv.Itoa(a.MasterPort),
		"IMPACT_GANG_ID":    a.Gang,
		"IMPACT_GANG_EPOCH": strconv.Itoa(a.Generation),
	}
}

// AssignmentFor extracts a member's assignment from a ready gang's status.
func AssignmentFor(st Status, member string) (Assignment, error) {
	m, ok := st.Member(member)
	if !ok {
		return Assignment{}, fmt.Errorf("member %q is not in gang %q", member, st.ID)
	}
	if st.State == StateForming || m.Rank < 0 {
		return Assignment{}, fmt.Errorf("gang %q is not complete (%d of %d arrived)", st.ID, st.Arrived, st.Size)
	}
	return Assignment{Gang: st.ID, Generation: st.Generation, WorldSize: st.Size, Rank: m.Rank,
		NodeRank: m.NodeRank, NNodes: st.NNodes, LocalRank: m.LocalRank,
		LocalWorldSize: m.LocalWorldSize, MasterAddr: st.MasterAddr, MasterPort: st.MasterPort}, nil
}

// TimeoutError is returned by Barrier when the gang did not complete in time.
type TimeoutError struct {
	Gang    string
	Arrived int
	Size    int
	Timeout time.Duration
	// JoinErr is the last error of a member that never managed to join
	// (size conflict, unreachable server, unresolvable size).
	JoinErr error
}

func (e *TimeoutError) Error() string {
	msg := fmt.Sprintf("gang %s: barrier timed out after %s: %s", e.Gang, e.Timeout, e.Progress())
	if e.JoinErr != nil {
		msg += fmt.Sprintf(" (this member could not join: %v)", e.JoinErr)
	}
	return msg
}

func (e *TimeoutError) Unwrap() error { return e.JoinErr }

// Progress says how many members arrived: "1 of 2 members arrived", or,
// when this member never learnt the gang's size (it could not join a gang
// whose size the server resolves), "0 members arrived (gang size unknown)".
func (e *TimeoutError) Progress() string {
	if e.Size <= 0 {
		return fmt.Sprintf("%d members arrived (gang size unknown)", e.Arrived)
	}
	return fmt.Sprintf("%d of %d members arrived", e.Arrived, e.Size)
}

// StoppedError is returned by Barrier when the gang failed or was stopped
// while this member waited.
type StoppedError struct {
	Gang   string
	State  State
	Reason string
}

func (e *StoppedError) Error() string {
	return fmt.Sprintf("gang %s is %s while waiting at the barrier: %s", e.Gang, e.State, e.Reason)
}

// BarrierConfig configures one member's wait at the barrier.
type BarrierConfig struct {
	Gang    string
	Member  string
	Join    JoinRequest
	Timeout time.Duration
	// Heartbeat is the period of heartbeats while waiting (default TTL/3).
	Heartbeat time.Duration
	// Progress is called whenever the number of arrived members changes.
	Progress func(Status)
}

// Barrier joins the gang and blocks until it is complete, returning this
// member's assignment. It retries transient failures (transport errors,
// 409 while a previous run of the gang is still stopping) until the
// timeout; on timeout it leaves the gang and returns a *TimeoutError; on
// ctx cancellation it leaves and returns ctx's error.
func (c *Client) Barrier(ctx context.Context, cfg BarrierConfig) (Assignment, error) {
	if cfg.Timeout <= 0 {
		return Assignment{}, fmt.Errorf("gang %s: barrier timeout must be positive", cfg.Gang)
	}
	hb := cfg.Heartbeat
	if hb <= 0 {
		hb = 5 * time.Second
	}
	bctx, cancel := context.WithDeadline(ctx, time.Now().Add(cfg.Timeout))
	defer cancel()
	w := &barrierWait{c: c, cfg: cfg, ctx: ctx, bctx: bctx, last: Status{ID: cfg.Gang, Size: cfg.Join.Size}, arrived: -1}
	if err := w.join(); err != nil {
		return Assignment{}, err
	}
	return w.wait(hb)
}

// barrierWait is one member's wait at its gang's barrier (Client.Barrier).
type barrierWait struct {
	c    *Client
	cfg  BarrierConfig
	ctx  context.Context // the caller's
	bctx context.Context // ctx with the barrier's deadline
	// last is the gang's status as last seen; arrived the count last
	// reported to cfg.Progress (-1: none yet).
	last    Status
	arrived int
	joinErr error // set while this member is not registered
}

// wait heartbeats (every hb) and blocks on the gang's status in between
// until the gang is ready (this member's assignment) or ends, failed or
// stopped. A server that lost the gang (a restart) is joined again; a
// transport error is retried until the barrier's deadline.
func (w *barrierWait) wait(hb time.Duration) (Assignment, error) {
	nextHB := time.Now().Add(hb)
	for {
		switch {
		case w.last.State == StateReady:
			a, err := AssignmentFor(w.last, w.cfg.Member)
			if err != nil {
				return w.fail(err)
			}
			return a, nil
		case w.last.State.Terminal():
			return w.fail(&StoppedError{Gang: w.cfg.Gang, State: w.last.State, Reason: w.last.Reason})
		}
		var st Status
		var err error
		heartbeat := time.Now().After(nextHB)
		if heartbeat {
			st, err = w.c.Heartbeat(w.bctx, w.cfg.Gang, w.cfg.Member)
		} else {
			// At least 1ms: the heartbeat check above may pass just before
			// nextHB, and a negative wait is a 400 that costs a backoff.
			st, err = w.c.GetMember(w.bctx, w.cfg.Gang, w.cfg.Member, w.last.Index, max(time.Until(nextHB), time.Millisecond))
		}
		var apiErr *APIError
		switch {
		case errors.As(err, &apiErr) && apiErr.Code == http.StatusNotFound:
			// The server lost the gang (restart): join again.
			if err := w.join(); err != nil {
				return Assignment{}, err
			}
		case err != nil && heartbeat && errors.As(err, &apiErr):
			return w.fail(fmt.Errorf("heartbeat: %w", err))
		case err != nil:
			// A transport error (the server may be restarting), or a
			// failed read of the status: retry.
			if !w.pause() {
				return w.fail(err)
			}
			continue
		default:
			w.report(st)
		}
		if heartbeat {
			nextHB = time.Now().Add(hb)
		}
	}
}

// join registers (again, after a rendezvous server restart lost the
// gang), retrying transient failures with backoff.
func (w *barrierWait) join() error {
	cfg := w.cfg
	backoff := 200 * time.Millisecond
	for {
		st, err := w.c.Join(w.bctx, cfg.Gang, cfg.Member, cfg.Join)
		if err == nil {
			w.joinErr = nil
			w.report(st)
			return nil
		}
		if w.bctx.Err() == nil {
			w.joinErr = err
		}
		var apiErr *APIError
		if errors.As(err, &apiErr) && apiErr.Code != http.StatusConflict && apiErr.Code/100 == 4 {
			_, ferr := w.fail(fmt.Errorf("joining gang: %w", err))
			return ferr
		}
		if ge, gerr := w.c.Get(w.bctx, cfg.Gang, 0, 0); gerr == nil {
			w.last.Arrived, w.last.Size = ge.Arrived, ge.Size
		}
		select {
		case <-w.bctx.Done():
			_, ferr := w.fail(err)
			return ferr
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// report records the gang's status, telling cfg.Progress when the number
// of arrived members changed.
func (w *barrierWait) report(st Status) {
	w.last = st
	if st.Arrived != w.arrived && w.cfg.Progress != nil {
		w.cfg.Progress(st)
	}
	w.arrived = st.Arrived
}

// pause waits before a retry; false once the barrier has timed out.
func (w *barrierWait) pause() bool {
	select {
	case <-w.bctx.Done():
		return false
	case <-time.After(200 * time.Millisecond):
		return true
	}
}

// fail leaves the gang and says why the wait ended: the caller's ctx, the
// barrier's timeout (a *TimeoutError) or err.
func (w *barrierWait) fail(err error) (Assignment, error) {
	lctx, lcancel := context.WithTimeout(context.WithoutCancel(w.ctx), 5*time.Second)
	defer lcancel()
	_, _ = w.c.Leave(lctx, w.cfg.Gang, w.cfg.Member)
	if w.ctx.Err() != nil {
		return Assignment{}, w.ctx.Err()
	}
	if w.bctx.Err() != nil {
		return Assignment{}, &TimeoutError{Gang: w.cfg.Gang, Arrived: w.last.Arrived, Size: w.last.Size, Timeout: w.cfg.Timeout, JoinErr: w.joinErr}
	}
	return Assignment{}, err
}
