package nomadbarrier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/gang"
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
// are listed. Without an explicit size, size is the job's total allocation
// count from GET /v1/job/<id> (which needs read-job on the namespace: a
// token or a workload identity policy; a 403 fails the member at once).
// Ranks follow the alloc_index tag (then the alloc ID); rank 0's service
// address and port become MASTER_ADDR/MASTER_PORT. Nomad removes a
// member's registration when its allocation stops, which the others take
// as the gang stopping (Nomad cannot tell a failure from a clean exit here,
// so members that end at different times should set propagate_failure =
// false or use the impact rendezvous).
//
// The registrations are the only record of the gang that every member can
// read (a workload identity can only read variables, not write them), so a
// member that passed keeps its registration for NomadHold after passing,
// whatever its command does: every member still polling then sees the
// gang complete. A member that has seen all size members register at some
// time, but not together, and some of them leave without a replacement
// (same alloc_index) for longer than that hold and a few polls, gives up
// with a *LostError instead of waiting out its barrier timeout.

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
	body, err := n.get(ctx, p, "services "+name)
	if err != nil {
		return nil, err
	}
	var regs []ServiceRegistration
	if err := json.Unmarshal(body, &regs); err != nil {
		return nil, fmt.Errorf("nomad services %s: decoding: %w", name, err)
	}
	return regs, nil
}

// get GETs a Nomad API URL with the token; a non-200 answer wraps an
// *gang.APIError.
func (n *NomadClient) get(ctx context.Context, u, what string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if n.token != "" {
		req.Header.Set("X-Nomad-Token", n.token)
	}
	resp, err := n.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("nomad %s: %w", what, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("nomad %s: %w", what, &gang.APIError{Code: resp.StatusCode, Message: strings.TrimSpace(string(body))})
	}
	return body, nil
}

// NomadBarrierConfig configures a member's wait through Nomad services.
type NomadBarrierConfig struct {
	Gang      string
	Namespace string
	Service   string
	AllocID   string
	// Size is the number of members; 0 = the job's total allocation count
	// (the sum of its groups' counts), read from Nomad's job API.
	Size     int
	JobID    string
	Timeout  time.Duration
	Poll     time.Duration
	Progress func(arrived, size int)
}

// NomadHold is how long a member that passed a Nomad barrier keeps its
// service registration (it does not end, whatever its command does)
// before it may end: long enough for every member still polling every
// poll to see the complete gang once. A member that passed and ended at
// once would otherwise take its registration with it before a slower
// member looked, stranding that member at the barrier. It assumes the
// members of a gang poll at the same interval (one plugin config).
func NomadHold(poll time.Duration) time.Duration {
	if poll <= 0 {
		poll = time.Second
	}
	return 2*poll + 2*time.Second
}

// nomadLostGrace is how long a member waits, once all size members have
// registered at some time but some have left and not been replaced, before
// it gives up (a *LostError): more than a departed member's NomadHold,
// plus time for a member that was merely restarted to register again.
func nomadLostGrace(poll time.Duration) time.Duration { return NomadHold(poll) + 6*poll }

// LostError is returned by NomadBarrier when the gang can no longer
// complete for this member: every member has registered at some point,
// but some have since left the service without a replacement (they may
// have passed the barrier and ended before this member saw them).
type LostError struct {
	Gang     string
	Service  string
	Departed []string // allocation IDs
	Arrived  int
	Size     int
	Waited   time.Duration
}

func (e *LostError) Error() string {
	return fmt.Sprintf("gang %s cannot complete: all %d members registered in service %s at some time, but %s then left without a replacement for %s (%d of %d registered now); giving up instead of waiting out the barrier timeout",
		e.Gang, e.Size, e.Service, strings.Join(e.Departed, ", "), e.Waited.Round(time.Second), e.Arrived, e.Size)
}

// NomadBarrier polls the service until size members (one per allocation)
// are registered, this one included, and returns this member's assignment
// and the members' allocation IDs in rank order. A member that passes
// must keep its registration for NomadHold (the caller does not end
// sooner), so that every member sees the gang complete; a member that
// sees it can no longer complete returns a *LostError.
func (n *NomadClient) NomadBarrier(ctx context.Context, cfg NomadBarrierConfig) (gang.Assignment, []string, error) {
	poll := cfg.Poll
	if poll <= 0 {
		poll = time.Second
	}
	bctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	size := cfg.Size
	arrived, reported := 0, -1
	seen := map[string]int{} // every allocation seen registered -> its alloc_index (-1: none)
	var lostSince time.Time
	for {
		var err error
		if size <= 0 {
			size, err = n.JobAllocCount(bctx, cfg.Namespace, cfg.JobID)
			var apiErr *gang.APIError
			if err != nil && errors.As(err, &apiErr) && apiErr.Code/100 == 4 {
				return gang.Assignment{}, nil, fmt.Errorf("gang %s: gang.size is not set and the job's allocation count cannot be read from Nomad (set gang.size, or let the task read its job): %w", cfg.Gang, err)
			}
		}
		var regs []ServiceRegistration
		if err == nil {
			regs, err = n.Services(bctx, cfg.Namespace, cfg.Service)
		}
		if err == nil {
			members := byAlloc(regs)
			arrived = len(members)
			if arrived != reported && cfg.Progress != nil && arrived < size {
				cfg.Progress(arrived, size)
			}
			reported = arrived
			if _, self := members[cfg.AllocID]; self && arrived == size {
				return assignFromServices(cfg.Gang, cfg.AllocID, members)
			}
			for id, r := range members {
				seen[id] = allocIndexTag(r)
			}
			if departed := departedMembers(seen, members, cfg.AllocID, size); len(departed) > 0 {
				if lostSince.IsZero() {
					lostSince = time.Now()
				} else if waited := time.Since(lostSince); waited >= nomadLostGrace(poll) {
					return gang.Assignment{}, nil, &LostError{Gang: cfg.Gang, Service: cfg.Service, Departed: departed,
						Arrived: arrived, Size: size, Waited: waited}
				}
			} else {
				lostSince = time.Time{}
			}
		}
		select {
		case <-bctx.Done():
			if ctx.Err() != nil {
				return gang.Assignment{}, nil, ctx.Err()
			}
			return gang.Assignment{}, nil, &gang.TimeoutError{Gang: cfg.Gang, Arrived: arrived, Size: size, Timeout: cfg.Timeout}
		case <-time.After(poll):
		}
	}
}

// departedMembers returns (sorted) the allocations seen registered that
// have left without a replacement (no current registration with their
// alloc_index), when size members, self included, have been seen in all;
// otherwise nil: the gang may still be forming.
func departedMembers(seen map[string]int, current map[string]ServiceRegistration, self string, size int) []string {
	everyone := len(seen)
	if _, ok := seen[self]; !ok {
		everyone++
	}
	if everyone < size {
		return nil
	}
	indexes := map[int]bool{}
	for _, r := range current {
		if i := allocIndexTag(r); i >= 0 {
			indexes[i] = true
		}
	}
	var out []string
	for id, idx := range seen {
		if _, ok := current[id]; ok || (idx >= 0 && indexes[idx]) {
			continue
		}
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// job is the part of Nomad's job used here.
type job struct {
	TaskGroups []struct {
		Name  string
		Count *int
	}
}

// JobAllocCount returns a job's total allocation count: the sum of its
// task groups' counts (GET /v1/job/<id>, which needs read-job on the
// namespace).
func (n *NomadClient) JobAllocCount(ctx context.Context, namespace, jobID string) (int, error) {
	if jobID == "" {
		return 0, fmt.Errorf("nomad job: no job ID")
	}
	p := n.base + "/v1/job/" + url.PathEscape(jobID)
	if namespace != "" {
		p += "?namespace=" + url.QueryEscape(namespace)
	}
	body, err := n.get(ctx, p, "job "+jobID)
	if err != nil {
		return 0, err
	}
	var j job
	if err := json.Unmarshal(body, &j); err != nil {
		return 0, fmt.Errorf("nomad job %s: decoding: %w", jobID, err)
	}
	total := 0
	for _, g := range j.TaskGroups {
		c := 1 // Nomad's default count
		if g.Count != nil {
			c = *g.Count
		}
		total += c
	}
	if total <= 0 {
		return 0, fmt.Errorf("nomad job %s: no allocations (task group counts sum to %d)", jobID, total)
	}
	return total, nil
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
func assignFromServices(gangID, self string, members map[string]ServiceRegistration) (gang.Assignment, []string, error) {
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
	var me gang.Assignment
	found := false
	allocs := make([]string, 0, len(regs))
	for i, r := range regs {
		if _, ok := nodeRank[r.NodeID]; !ok {
			nodeRank[r.NodeID] = len(nodeRank)
		}
		if r.AllocID == self {
			me = gang.Assignment{Gang: gangID, Generation: 1, WorldSize: len(regs), Rank: i,
				NodeRank: nodeRank[r.NodeID], LocalRank: local[r.NodeID], MasterAddr: regs[0].Address, MasterPort: regs[0].Port}
			found = true
		}
		local[r.NodeID]++
		allocs = append(allocs, r.AllocID)
	}
	if !found {
		return gang.Assignment{}, nil, fmt.Errorf("gang %s: allocation %s is not registered", gangID, self)
	}
	me.NNodes = len(nodeRank)
	me.LocalWorldSize = local[members[self].NodeID]
	return me, allocs, nil
}
