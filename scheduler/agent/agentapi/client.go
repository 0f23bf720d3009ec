package agentapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client talks to one `impact agent`.
type Client struct {
	base  *url.URL
	http  *http.Client
	token string
}

// WithToken makes the client send a Nomad ACL token (X-Nomad-Token) on
// every request; "" sends none.
func (c *Client) WithToken(token string) *Client {
	c.token = token
	return c
}

// NewClient returns a client for the agent at addr ("http://host:port", or
// "host:port"); an empty addr means DefaultAddress. hc may be nil.
func NewClient(addr string, hc *http.Client) (*Client, error) {
	if addr == "" {
		addr = DefaultAddress
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, fmt.Errorf("agent address %q: %w", addr, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("agent address %q: scheme must be http or https", addr)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("agent address %q: no host", addr)
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	return &Client{base: u, http: hc}, nil
}

// StatusError is a non-2xx answer from the agent.
type StatusError struct {
	Code int
	Msg  string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("agent answered %d: %s", e.Code, e.Msg)
}

// IsNotFound reports whether err is the agent's 404.
func IsNotFound(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusNotFound
}

// Health fetches GET /v1/health. A degraded agent answers 503 with a body;
// that is returned as a Health, not an error.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	err := c.get(ctx, "/v1/health", nil, &h, http.StatusServiceUnavailable)
	return h, err
}

// Queue fetches GET /v1/queue.
func (c *Client) Queue(ctx context.Context) (Queue, error) {
	var q Queue
	err := c.get(ctx, "/v1/queue", nil, &q)
	return q, err
}

// Explain fetches GET /v1/explain/<job>; namespace may be empty for the
// agent's namespace.
func (c *Client) Explain(ctx context.Context, namespace, job string) (Explanation, error) {
	var e Explanation
	q := url.Values{}
	if namespace != "" {
		q.Set("namespace", namespace)
	}
	err := c.get(ctx, "/v1/explain/"+url.PathEscape(job), q, &e)
	return e, err
}

func (c *Client) get(ctx context.Context, path string, q url.Values, out any, okCodes ...int) error {
	target := strings.TrimSuffix(c.base.String(), "/") + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return fmt.Errorf("building request: %w", err)
	}
	if c.token != "" {
		req.Header.Set("X-Nomad-Token", c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("reaching impact agent at %s (set %s or -address): %w", c.base, AddressEnv, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	ok := resp.StatusCode/100 == 2
	for _, code := range okCodes {
		ok = ok || resp.StatusCode == code
	}
	if !ok {
		var e Error
		msg := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return &StatusError{Code: resp.StatusCode, Msg: msg}
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	return nil
}
