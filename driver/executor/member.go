package executor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/auth"
	"github.com/impact-sched/nomad-impact/driver/internal/nomadbarrier"
	"github.com/impact-sched/nomad-impact/gang"
)

// member is a task's part in its gang: the barrier before its command
// starts, watching the gang while it runs, and reporting its end. A
// rendezvousMember goes through the impact rendezvous endpoint, a
// nomadMember through Nomad's service discovery (discovery = "nomad").
type member interface {
	// join waits at the barrier until every member has joined.
	join(ctx context.Context, progress func(arrived, size int)) (gang.Assignment, error)
	// watch blocks until the gang fails or is stopped (its status, true)
	// or done is closed (the task ended: false).
	watch(done <-chan struct{}) (gang.Status, bool)
	// report tells the gang how this member ended.
	report(req gang.ExitRequest)
	// linger runs after the task's own end (not a stop), before the
	// supervisor writes its exit.
	linger()
}

// memberEnv is what a member needs of its supervisor: the gang's
// settings, the state dir (for the stop file), the task events and the clock.
type memberEnv struct {
	g     *GangSpec
	dir   string
	event func(msg string, ann map[string]string)
	warn  func(msg string, args ...any)
	now   func() time.Time
}

// newMember picks the member's way to the gang from its discovery.
func newMember(e memberEnv) (member, error) {
	if e.g.Discovery == "nomad" {
		c, err := nomadbarrier.NewNomadClient(e.g.NomadAddr, e.g.NomadToken)
		if err != nil {
			return nil, err
		}
		return &nomadMember{memberEnv: e, client: c}, nil
	}
	c, err := rendezvousClient(e.g)
	if err != nil {
		return nil, err
	}
	return &rendezvousMember{memberEnv: e, client: c}, nil
}

// rendezvousMember joins, heartbeats and reports through the impact
// rendezvous endpoint (an impact agent or `impact-exec gang-server`).
type rendezvousMember struct {
	memberEnv
	client *gang.Client
	assign gang.Assignment // set once the barrier passed
}

func (m *rendezvousMember) join(ctx context.Context, progress func(arrived, size int)) (gang.Assignment, error) {
	g := m.g
	a, err := m.client.Barrier(ctx, gang.BarrierConfig{
		Gang: g.ID, Member: g.Member, Join: g.Join, Timeout: g.Timeout, Heartbeat: g.Heartbeat,
		Progress: func(gs gang.Status) { progress(gs.Arrived, gs.Size) },
	})
	m.assign = a
	return a, err
}

// watch heartbeats while the task runs, blocking on the gang's status
// between heartbeats, and returns when the gang fails or is stopped. A
// server that lost the gang gets it back (Resume); an unreachable server
// or a refused identity is not a verdict on the gang: the task keeps
// running and the member retries at the next heartbeat.
func (m *rendezvousMember) watch(done <-chan struct{}) (gang.Status, bool) {
	g := m.g
	hb := g.Heartbeat
	if hb <= 0 {
		hb = 5 * time.Second
	}
	ticker := time.NewTicker(hb)
	defer ticker.Stop()
	var index uint64
	warned := false
	for {
		st, err := m.poll(index, hb)
		var apiErr *gang.APIError
		if errors.As(err, &apiErr) && apiErr.Code == http.StatusNotFound {
			if err = m.resume(); err == nil {
				index = 0
				continue
			}
		}
		switch {
		case err != nil && errors.As(err, &apiErr) && apiErr.Code/100 == 4 && apiErr.Code != http.StatusUnauthorized:
			st = gang.Status{State: gang.StateFailed, Reason: apiErr.Message}
		case err != nil:
			if !warned {
				warned = true
				if errors.As(err, &apiErr) && apiErr.Code == http.StatusUnauthorized {
					// Expired while the Nomad client could not renew it, say;
					// the renewed identity file is read on the next try.
					m.event(fmt.Sprintf("Rendezvous server refused this member's workload identity, task keeps running: %v", err), nil)
				} else {
					m.event(fmt.Sprintf("Rendezvous server unreachable, task keeps running: %v", err), nil)
				}
			}
			select {
			case <-done:
				return gang.Status{}, false
			case <-ticker.C:
			}
			index = 0
			continue
		default:
			warned = false
			index = st.Index
		}
		if st.State == gang.StateFailed || st.State == gang.StateStopping {
			return st, true
		}
		select {
		case <-done:
			return gang.Status{}, false
		case <-ticker.C:
			index = 0 // heartbeat next
		default:
		}
	}
}

// poll heartbeats (index 0) or blocks on the gang's status until it
// changes past index or hb passes.
func (m *rendezvousMember) poll(index uint64, hb time.Duration) (gang.Status, error) {
	g := m.g
	ctx, cancel := context.WithTimeout(context.Background(), hb+10*time.Second)
	defer cancel()
	if index == 0 {
		return m.client.Heartbeat(ctx, g.ID, g.Member)
	}
	return m.client.GetMember(ctx, g.ID, g.Member, index, hb)
}

// resume re-registers the member with the ranks already in use when the
// rendezvous server no longer knows its gang (a restart, a failover).
func (m *rendezvousMember) resume() error {
	g := m.g
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := m.client.Resume(ctx, g.ID, g.Member, g.Join, m.assign); err != nil {
		return err
	}
	m.event(fmt.Sprintf("Rendezvous server had lost gang %s: re-registered as rank %d", g.ID, m.assign.Rank), nil)
	return nil
}

// report tells the rendezvous server how the member ended (so the next run
// of the job rendezvouses as a new generation), retrying an unreachable
// server for up to 10s.
func (m *rendezvousMember) report(req gang.ExitRequest) {
	g := m.g
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		_, err := m.client.Exit(ctx, g.ID, g.Member, req)
		var apiErr *gang.APIError
		if err == nil || errors.As(err, &apiErr) {
			if err != nil {
				m.warn("reporting exit to the gang", "error", err)
			}
			return
		}
		select {
		case <-ctx.Done():
			m.warn("could not report exit to the gang", "error", err)
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (m *rendezvousMember) linger() {}

// rendezvousClient is the member's client of the rendezvous endpoint: at
// URL or found through Consul, over TLS when a CA or client certificate is
// configured, presenting the task's workload identity on every request.
func rendezvousClient(g *GangSpec) (*gang.Client, error) {
	hc := &http.Client{}
	tlsOn := g.CACert != "" || g.ClientCert != ""
	if tlsOn {
		cfg, err := auth.ClientTLS(g.CACert, g.ClientCert, g.ClientKey, "", false)
		if err != nil {
			return nil, fmt.Errorf("rendezvous TLS: %w", err)
		}
		hc.Transport = &http.Transport{TLSClientConfig: cfg}
	}
	var client *gang.Client
	if g.URL != "" {
		c, err := gang.NewClient(g.URL, hc)
		if err != nil {
			return nil, err
		}
		client = c
	} else {
		resolve, err := gang.ConsulResolver(g.ConsulAddr, "", g.ConsulService, g.ConsulTag)
		if err != nil {
			return nil, err
		}
		if tlsOn {
			plain := resolve
			resolve = func(ctx context.Context) (string, error) {
				u, err := plain(ctx)
				return "https://" + strings.TrimPrefix(u, "http://"), err
			}
		}
		client = gang.NewResolvingClient(resolve, hc)
	}
	return client.WithCredential(gang.IdentityCredential{File: g.IdentityFile, Env: g.IdentityToken, Label: "NOMAD_TOKEN_" + gang.IdentityName}), nil
}

// nomadMember forms the gang from the members' registrations of the
// group's Nomad service (discovery = "nomad"); it has no server to report to.
type nomadMember struct {
	memberEnv
	client   *nomadbarrier.NomadClient
	allocs   []string  // members in rank order
	passedAt time.Time // when the barrier returned
}

func (m *nomadMember) join(ctx context.Context, progress func(arrived, size int)) (gang.Assignment, error) {
	g := m.g
	a, allocs, err := m.client.NomadBarrier(ctx, nomadbarrier.NomadBarrierConfig{
		Gang: g.ID, Namespace: g.Join.Namespace, Service: g.Service, AllocID: g.Join.AllocID,
		Size: g.Join.Size, JobID: g.Join.JobID, Timeout: g.Timeout, Poll: g.Heartbeat, Progress: progress})
	m.allocs, m.passedAt = allocs, m.now()
	return a, err
}

// watch returns when a member's registration disappears: that member has
// stopped, so this one is stopped too.
func (m *nomadMember) watch(done <-chan struct{}) (gang.Status, bool) {
	g := m.g
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	reason := m.client.NomadWatch(ctx, g.Join.Namespace, g.Service, m.allocs, max(g.Heartbeat, 100*time.Millisecond))
	if reason == "" {
		return gang.Status{}, false
	}
	return gang.Status{State: gang.StateStopping, Reason: reason}, true
}

func (m *nomadMember) report(gang.ExitRequest) {}

// linger keeps a member that passed a Nomad barrier from ending before
// nomadbarrier.NomadHold has passed since, so its service registration
// (which Nomad removes when the task ends) is seen by every member still
// polling: without it, a member whose command ends at once can strand a
// slower one at the barrier. A stop ends the wait.
func (m *nomadMember) linger() {
	left := nomadbarrier.NomadHold(m.g.Heartbeat) - m.now().Sub(m.passedAt)
	if left <= 0 {
		return
	}
	m.event(fmt.Sprintf("Task ended %s after gang %s formed: keeping its Nomad service registration %s longer so every member sees the gang complete",
		m.now().Sub(m.passedAt).Round(time.Millisecond), m.g.ID, left.Round(time.Millisecond)), nil)
	deadline := time.NewTimer(left)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-deadline.C:
			return
		case <-tick.C:
			if fileExists(filepath.Join(m.dir, StopFile)) {
				return
			}
		}
	}
}

// barrierEvent is the task event saying why the barrier failed.
func barrierEvent(err error) (string, map[string]string) {
	var te *gang.TimeoutError
	var se *gang.StoppedError
	var le *nomadbarrier.LostError
	switch {
	case errors.As(err, &te):
		why := ""
		if te.JoinErr != nil {
			why = fmt.Sprintf(" (this member could not join: %v)", te.JoinErr)
		}
		return fmt.Sprintf("Gang barrier timed out after %s: %s%s", te.Timeout, te.Progress(), why),
			map[string]string{"gang_arrived": strconv.Itoa(te.Arrived), "gang_size": strconv.Itoa(te.Size)}
	case errors.As(err, &se):
		return fmt.Sprintf("Gang %s was %s while waiting: %s", se.Gang, se.State, se.Reason), nil
	case errors.As(err, &le):
		return fmt.Sprintf("Gang barrier failed: %v", le),
			map[string]string{"gang_arrived": strconv.Itoa(le.Arrived), "gang_size": strconv.Itoa(le.Size), "gang_departed": strings.Join(le.Departed, ",")}
	default:
		return fmt.Sprintf("Gang barrier failed: %v", err), nil
	}
}
