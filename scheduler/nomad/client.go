package nomad

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// Config names the Nomad cluster and how to reach it. Empty fields mean
// "not set" (NewClient applies Nomad's defaults). The agent builds it from
// its config's nomad block (scheduler/agent/config.Nomad: the file,
// NOMAD_* and flags merged).
type Config struct {
	// Address of a Nomad agent's HTTP API, e.g. https://nomad.service:4646.
	Address string
	// Token is the ACL token (secret ID).
	Token string
	// Region and Namespace the scheduler works in ("" = the agent's
	// region, namespace "default").
	Region    string
	Namespace string
	// TLS: CA certificate file, client certificate and key files (mTLS),
	// the server name to verify, and Insecure to skip verification (for
	// tests only).
	CACert        string
	ClientCert    string
	ClientKey     string
	TLSServerName string
	Insecure      bool
}

// Validate checks the configuration without contacting Nomad.
func (c Config) Validate() error {
	if c.Address != "" {
		u, err := url.Parse(c.Address)
		if err != nil || u.Host == "" && u.Scheme != "unix" {
			return fmt.Errorf("nomad address %q: not a URL like http://127.0.0.1:4646", c.Address)
		}
		if u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "unix" {
			return fmt.Errorf("nomad address %q: scheme must be http, https or unix", c.Address)
		}
	}
	if (c.ClientCert == "") != (c.ClientKey == "") {
		return fmt.Errorf("nomad TLS: client_cert and client_key must be given together")
	}
	return nil
}

// Client is a connection to Nomad's HTTP API.
type Client struct {
	api *api.Client
	cfg Config
	ns  string
	log hclog.Logger
}

// NewClient builds a client (it does not contact Nomad).
func NewClient(cfg Config, logger hclog.Logger) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	ac := &api.Config{
		Address:   cfg.Address,
		Region:    cfg.Region,
		Namespace: cfg.Namespace,
		SecretID:  cfg.Token,
		TLSConfig: &api.TLSConfig{
			CACert: cfg.CACert, ClientCert: cfg.ClientCert, ClientKey: cfg.ClientKey,
			TLSServerName: cfg.TLSServerName, Insecure: cfg.Insecure,
		},
	}
	if ac.Address == "" {
		ac.Address = "http://127.0.0.1:4646"
	}
	a, err := api.NewClient(ac)
	if err != nil {
		return nil, fmt.Errorf("nomad client for %s: %w", ac.Address, err)
	}
	ns := cfg.Namespace
	if ns == "" {
		ns = "default"
	}
	return &Client{api: a, cfg: cfg, ns: ns, log: logger.Named("nomad")}, nil
}

// Namespace is the namespace the client works in.
func (c *Client) Namespace() string { return c.ns }

// Address is the Nomad address in use.
func (c *Client) Address() string { return c.api.Address() }

func (c *Client) q(ctx context.Context) *api.QueryOptions {
	return (&api.QueryOptions{Namespace: c.ns}).WithContext(ctx)
}

func (c *Client) w(ctx context.Context) *api.WriteOptions {
	return (&api.WriteOptions{Namespace: c.ns}).WithContext(ctx)
}

func (c *Client) qns(ctx context.Context, ns string) *api.QueryOptions {
	return (&api.QueryOptions{Namespace: ns}).WithContext(ctx)
}

func (c *Client) wns(ctx context.Context, ns string) *api.WriteOptions {
	return (&api.WriteOptions{Namespace: ns}).WithContext(ctx)
}

// EnsureNodePool creates the node pool if it does not exist (the parking
// pool, which must contain no nodes). An existing pool is left as it is.
func (c *Client) EnsureNodePool(ctx context.Context, name, description string) error {
	_, _, err := c.api.NodePools().Info(name, c.q(ctx))
	if err == nil {
		return nil
	}
	if !isNotFound(err) {
		return fmt.Errorf("read node pool %q: %w", name, err)
	}
	if _, err := c.api.NodePools().Register(&api.NodePool{Name: name, Description: description}, c.w(ctx)); err != nil {
		return fmt.Errorf("create node pool %q: %w", name, err)
	}
	c.log.Info("created node pool", "pool", name)
	return nil
}

// NodePoolExists reports whether Nomad has the node pool (one read).
func (c *Client) NodePoolExists(ctx context.Context, name string) (bool, error) {
	_, _, err := c.api.NodePools().Info(name, c.q(ctx))
	switch {
	case err == nil:
		return true, nil
	case isNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("read node pool %q: %w", name, err)
}

// statusCode extracts the HTTP status of an api error (0 if none).
func statusCode(err error) int {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) {
		return ue.StatusCode()
	}
	// Older error paths only carry the code in the text.
	msg := err.Error()
	if i := strings.Index(msg, "Unexpected response code: "); i >= 0 {
		rest := msg[i+len("Unexpected response code: "):]
		if j := strings.IndexAny(rest, " ("); j > 0 {
			rest = rest[:j]
		}
		if n, err := strconv.Atoi(rest); err == nil {
			return n
		}
	}
	return 0
}

func isNotFound(err error) bool { return err != nil && statusCode(err) == http.StatusNotFound }

// isEnforceConflict reports Nomad's answer to a register whose EnforceIndex
// did not match: HTTP 500 "Enforcing job modify index N: job exists with
// conflicting job modify index: M" (not a 409; see the recorded fixture).
func isEnforceConflict(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Enforcing job modify index")
}

// backoff returns the delay before retry n (0-based): doubling from min,
// capped at max.
func backoff(n int, min, max time.Duration) time.Duration {
	d := min
	for i := 0; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
