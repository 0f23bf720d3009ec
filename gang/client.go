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
