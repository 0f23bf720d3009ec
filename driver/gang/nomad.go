package gang

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Rendezvous through Nomad's own service discovery, for clusters without an
// impact agent. Every member's group registers a Nomad-native service
//
//	service {
//	  provider = "nomad"
//	  name     = "train-rdzv"
//	  port     = "rdzv"
//	  tags     = ["alloc_index=${NOMAD_ALLOC_INDEX}"]
//	}
//
// and the members poll GET /v1/service/<name> (allowed for a task's default
// workload identity, through the task API socket) until all size members
// are listed. Ranks follow the alloc_index tag (then the alloc ID); rank 0's
// service address and port become MASTER_ADDR/MASTER_PORT. Nomad removes a
// member's registration when its allocation stops, which the others take
// as the gang stopping (Nomad cannot tell a failure from a clean exit here,
// so members that end at different times should set propagate_failure =
// false or use the impact rendezvous).

// ServiceRegistration is the part of Nomad's service registration used here.
type ServiceRegistration struct {
	ID          string
	ServiceName string
	Namespace   string
	NodeID      string
	JobID       string
	AllocID     string
	Address     string
	Port        int
	Tags        []string
}

// NomadClient reads service registrations from a Nomad agent's HTTP API or
// a task API socket.
type NomadClient struct {
	base  string
	token string
	http  *http.Client
}

// NewNomadClient accepts "unix:///path/to/api.sock" (the task API socket,
// NOMAD_UNIX_ADDR) or an http(s) address; token may be empty (ACLs off).
func NewNomadClient(addr, token string) (*NomadClient, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		if path == "" {
			return nil, fmt.Errorf("nomad address %q: empty socket path", addr)
		}
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}
		return &NomadClient{base: "http://localhost", token: token, http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}, nil
	}
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("nomad address %q: want http(s)://host:port or unix:///path", addr)
	}
	return &NomadClient{base: strings.TrimSuffix(addr, "/"), token: token, http: &http.Client{Timeout: 30 * time.Second}}, nil
}

// Services lists the registrations of a Nomad-native service.
func (n *NomadClient) Services(ctx context.Context, namespace, name string) ([]ServiceRegistration, error) {
	p := n.base + "/v1/service/" + url.PathEscape(name)
	if namespace != "" {
		p += "?namespace=" + url.QueryEscape(namespace)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p, nil)
	if err != nil {
		return nil, err
	}
	if n.token != "" {
		req.Header.Set("X-Nomad-Token", n.token)
	}
	resp, err := n.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("nomad services %s: %w", name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, &APIError{Code: resp.StatusCode, Message: strings.TrimSpace(string(body))}
	}
	var regs []ServiceRegistration
	if err := json.Unmarshal(body, &regs); err != nil {
		return nil, fmt.Errorf("nomad services %s: decoding: %w", name, err)
	}
	return regs, nil
}

// NomadBarrierConfig configures a member's wait through Nomad services.
type NomadBarrierConfig struct {
	Gang      string
	Namespace string
	Service   string
	AllocID   string
	Size      int
	Timeout   time.Duration
	Poll      time.Duration
	Progress  func(arrived, size int)
}

// NomadBarrier polls the service until size members (one per allocation)
// are registered, this one included, and returns this member's assignment.
func (n *NomadClient) NomadBarrier(ctx context.Context, cfg NomadBarrierConfig) (Assignment, []string, error) {
	if cfg.Size <= 0 {
		return Assignment{}, nil, fmt.Errorf("gang %s: nomad rendezvous needs an explicit gang size", cfg.Gang)
	}
	poll := cfg.Poll
	if poll <= 0 {
		poll = time.Second
	}
	bctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	arrived, reported := 0, -1
	for {
		regs, err := n.Services(bctx, cfg.Namespace, cfg.Service)
		if err == nil {
			members := byAlloc(regs)
			arrived = len(members)
			if arrived != reported && cfg.Progress != nil && arrived < cfg.Size {
				cfg.Progress(arrived, cfg.Size)
			}
			reported = arrived
			if _, self := members[cfg.AllocID]; self && arrived == cfg.Size {
				return assignFromServices(cfg.Gang, cfg.AllocID, members)
			}
		}
		select {
		case <-bctx.Done():
			if ctx.Err() != nil {
				return Assignment{}, nil, ctx.Err()
			}
			return Assignment{}, nil, &TimeoutError{Gang: cfg.Gang, Arrived: arrived, Size: cfg.Size, Timeout: cfg.Timeout}
		case <-time.After(poll):
		}
	}
}

// NomadWatch blocks until one of allocs is no longer registered (it
// returns a reason) or ctx ends (it returns "").
func (n *NomadClient) NomadWatch(ctx context.Context, namespace, service string, allocs []string, poll time.Duration) string {
	for {
		if regs, err := n.Services(ctx, namespace, service); err == nil {
			members := byAlloc(regs)
			for _, a := range allocs {
				if _, ok := members[a]; !ok {
					return fmt.Sprintf("member allocation %s left service %s", a, service)
				}
			}
		}
		select {
		case <-ctx.Done():
			return ""
		case <-time.After(poll):
		}
	}
}

// byAlloc keeps one registration per allocation (the first by ID).
func byAlloc(regs []ServiceRegistration) map[string]ServiceRegistration {
	out := map[string]ServiceRegistration{}
	sort.Slice(regs, func(i, j int) bool { return regs[i].ID < regs[j].ID })
	for _, r := range regs {
		if _, ok := out[r.AllocID]; !ok && r.AllocID != "" {
			out[r.AllocID] = r
		}
	}
	return out
}

func allocIndexTag(r ServiceRegistration) int {
	for _, t := range r.Tags {
		if v, ok := strings.CutPrefix(t, "alloc_index="); ok {
			if n, err := strconv.Atoi(v); err == nil {
				return n
			}
		}
	}
	return -1
}

// assignFromServices ranks the members and returns self's assignment and
// the allocation IDs in rank order.
func assignFromServices(gangID, self string, members map[string]ServiceRegistration) (Assignment, []string, error) {
	regs := make([]ServiceRegistration, 0, len(members))
	for _, r := range members {
		regs = append(regs, r)
	}
	sort.Slice(regs, func(i, j int) bool {
		a, b := allocIndexTag(regs[i]), allocIndexTag(regs[j])
		if a != b {
			return a < b
		}
		return regs[i].AllocID < regs[j].AllocID
	})
	nodeRank, local := map[string]int{}, map[string]int{}
	var me Assignment
	found := false
	allocs := make([]string, 0, len(regs))
	for i, r := range regs {
		if _, ok := nodeRank[r.NodeID]; !ok {
			nodeRank[r.NodeID] = len(nodeRank)
		}
		if r.AllocID == self {
			me = Assignment{Gang: gangID, Generation: 1, WorldSize: len(regs), Rank: i,
				NodeRank: nodeRank[r.NodeID], LocalRank: local[r.NodeID], MasterAddr: regs[0].Address, MasterPort: regs[0].Port}
			found = true
		}
		local[r.NodeID]++
		allocs = append(allocs, r.AllocID)
	}
	if !found {
		return Assignment{}, nil, fmt.Errorf("gang %s: allocation %s is not registered", gangID, self)
	}
	me.NNodes = len(nodeRank)
	me.LocalWorldSize = local[members[self].NodeID]
	return me, allocs, nil
}
