package gang

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Client talks to a rendezvous endpoint (an impact agent or a Server).
type Client struct {
	http *http.Client
	cred Credential

	// Either a fixed base URL, or a resolver (e.g. Consul) asked again
	// after a transport error, so members follow a failed-over agent.
	mu      sync.Mutex
	base    string
	resolve func(context.Context) (string, error)
}

// NewResolvingClient returns a client whose base URL comes from resolve;
// it is cached and resolved again after a transport error.
func NewResolvingClient(resolve func(context.Context) (string, error), hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{resolve: resolve, http: hc}
}

func (c *Client) baseURL(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.base != "" || c.resolve == nil {
		return c.base, nil
	}
	b, err := c.resolve(ctx)
	if err != nil {
		return "", fmt.Errorf("resolving the rendezvous server: %w", err)
	}
	c.base = strings.TrimSuffix(b, "/")
	return c.base, nil
}

// forget drops a resolved base URL after a transport error.
func (c *Client) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.resolve != nil {
		c.base = ""
	}
}

// Credential is what a client presents on every request (as
// Authorization: Bearer): the task's workload identity.
type Credential interface {
	// Token returns the credential, read afresh (Nomad renews identity
	// files); "" when there is none.
	Token() (string, error)
	// Where says where the credential was looked for, for the error a
	// member gets when the server wants one and there was none.
	Where() string
}

// WithCredential makes the client present cred on every request.
func (c *Client) WithCredential(cred Credential) *Client {
	c.cred = cred
	return c
}

// IdentityCredential is a task's workload identity: the file Nomad writes
// with identity { file = true } (read on every request, so the renewed
// token is used) or, when there is no file, a token from the environment
// (identity { env = true }, not renewed while the task runs).
type IdentityCredential struct {
	File  string
	Env   string // the token from the task env, if any
	Label string // the env variable's name, for errors
}

// Token reads the identity file, else returns the env token.
func (c IdentityCredential) Token() (string, error) {
	if c.File != "" {
		b, err := os.ReadFile(c.File)
		if err == nil {
			if t := strings.TrimSpace(string(b)); t != "" {
				return t, nil
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("reading the task's workload identity %s: %w", c.File, err)
		}
	}
	return c.Env, nil
}

// Where names the file and variable that were looked at.
func (c IdentityCredential) Where() string {
	switch {
	case c.File != "" && c.Label != "":
		return fmt.Sprintf("no file %s, no %s in the task env", c.File, c.Label)
	case c.File != "":
		return "no file " + c.File
	}
	return "no identity configured"
}

// APIError is a non-2xx answer of the endpoint.
type APIError struct {
	Code    int
	Message string
}

func (e *APIError) Error() string { return fmt.Sprintf("rendezvous: HTTP %d: %s", e.Code, e.Message) }

// NewClient returns a client for the endpoint at baseURL (scheme://host:port,
// optionally with a path prefix in front of /v1/gang/).
func NewClient(baseURL string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("rendezvous address %q: want scheme://host:port", baseURL)
	}
	if hc == nil {
		hc = &http.Client{Timeout: 0}
	}
	return &Client{base: strings.TrimSuffix(baseURL, "/"), http: hc}, nil
}

func (c *Client) memberPath(gangID, member string) string {
	return PathPrefix + url.PathEscape(gangID) + "/members/" + url.PathEscape(member)
}

// Join registers this member.
func (c *Client) Join(ctx context.Context, gangID, member string, req JoinRequest) (Status, error) {
	return c.do(ctx, http.MethodPut, c.memberPath(gangID, member), req)
}

// Heartbeat refreshes this member's TTL and returns the gang's status.
func (c *Client) Heartbeat(ctx context.Context, gangID, member string) (Status, error) {
	return c.do(ctx, http.MethodPut, c.memberPath(gangID, member)+"/heartbeat", nil)
}

// Exit reports the end of this member's process.
func (c *Client) Exit(ctx context.Context, gangID, member string, req ExitRequest) (Status, error) {
	return c.do(ctx, http.MethodPut, c.memberPath(gangID, member)+"/exit", req)
}

// Leave withdraws a member that has not started.
func (c *Client) Leave(ctx context.Context, gangID, member string) (Status, error) {
	return c.do(ctx, http.MethodDelete, c.memberPath(gangID, member), nil)
}

// Resume re-registers a running member with its assignment, after the
// rendezvous server lost the gang (it answered 404).
func (c *Client) Resume(ctx context.Context, gangID, member string, join JoinRequest, a Assignment) (Status, error) {
	join.Size = a.WorldSize
	join.Resume = &Resume{Generation: a.Generation, Rank: a.Rank, NodeRank: a.NodeRank,
		LocalRank: a.LocalRank, LocalWorldSize: a.LocalWorldSize}
	return c.Join(ctx, gangID, member, join)
}

// Stop asks every member of the gang to checkpoint and stop.
func (c *Client) Stop(ctx context.Context, gangID, reason string) (Status, error) {
	return c.do(ctx, http.MethodPut, PathPrefix+url.PathEscape(gangID)+"/stop", StopRequest{Reason: reason})
}

// Get returns the gang's status; with index > 0 it blocks until the status
// changes past index or wait passes.
func (c *Client) Get(ctx context.Context, gangID string, index uint64, wait time.Duration) (Status, error) {
	return c.GetMember(ctx, gangID, "", index, wait)
}

// GetMember is Get with the member list trimmed to member (what a member
// needs for itself; cheap for large gangs).
func (c *Client) GetMember(ctx context.Context, gangID, member string, index uint64, wait time.Duration) (Status, error) {
	q := url.Values{}
	if member != "" {
		q.Set("member", member)
	}
	if index > 0 {
		q.Set("index", strconv.FormatUint(index, 10))
		q.Set("wait", wait.String())
	}
	p := PathPrefix + url.PathEscape(gangID)
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	return c.do(ctx, http.MethodGet, p, nil)
}

func (c *Client) do(ctx context.Context, method, path string, body any) (Status, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return Status{}, fmt.Errorf("encoding %T: %w", body, err)
		}
		rd = bytes.NewReader(b)
	}
	base, err := c.baseURL(ctx)
	if err != nil {
		return Status{}, err
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return Status{}, fmt.Errorf("rendezvous request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	presented := false
	if c.cred != nil {
		tok, err := c.cred.Token()
		if err != nil {
			return Status{}, err
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
			presented = true
		}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.forget()
		return Status{}, fmt.Errorf("rendezvous %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return Status{}, fmt.Errorf("rendezvous %s %s: reading reply: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e ErrorResponse
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
		}
		if resp.StatusCode == http.StatusUnauthorized && !presented && c.cred != nil {
			e.Error += " (impact-exec found no workload identity for this task: " + c.cred.Where() + ")"
		}
		return Status{}, &APIError{Code: resp.StatusCode, Message: e.Error}
	}
	var st Status
	if err := json.Unmarshal(data, &st); err != nil {
		return Status{}, fmt.Errorf("rendezvous %s %s: decoding reply: %w", method, path, err)
	}
	return st, nil
}

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
