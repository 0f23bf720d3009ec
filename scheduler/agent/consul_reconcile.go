package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	consul "github.com/hashicorp/consul/api"
)

// Reconciling the Consul registration: registering once is not enough.
// Consul may restart empty (a dev agent), a tag change may fail while
// Consul is down, or an operator may deregister the service. At every
// check interval the agent compares what Consul's local agent holds with
// what it wants (service, address, tag, check) and registers again when
// they differ; failures are retried with back-off. Health and the metrics
// report a registration that is out of date until it is repaired.

// drift is one difference between Consul's copy and the wanted
// registration: reason labels the repair metric, detail says it in words.
type drift struct{ reason, detail string }

// status is the last outcome (for health and tests).
func (r *Registrar) status() consulState {
	r.smu.Lock()
	defer r.smu.Unlock()
	return r.state
}

// problem is what health reports about the registration ("" when Consul
// holds what the agent wants, or the agent does not want to be
// registered).
func (r *Registrar) problem() string {
	st := r.status()
	switch {
	case !r.active.Load() || st.inSync:
		return ""
	case st.err != nil && st.drift != "":
		return "consul registration out of date (" + st.drift + "), retrying: " + st.err.Error()
	case st.err != nil:
		return "consul registration (retrying): " + st.err.Error()
	default:
		return "consul registration out of date: " + st.drift
	}
}

// Reconcile compares Consul's copy of the registration with the wanted
// one and registers again when they differ. It returns what differed
// (repaired unless err is set) and the error of a read or repair that
// failed. A leader also removes other agents' critical entries that still
// carry the leader tag (a leader killed without deregistering), when they
// are registered with the same Consul agent.
func (r *Registrar) Reconcile() ([]drift, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.active.Load() {
		return nil, nil
	}
	found, err := r.diffLocked()
	if err != nil {
		r.record(err, "")
		return nil, err
	}
	if len(found) == 0 {
		r.record(nil, "")
	} else {
		details := make([]string, len(found))
		for i, d := range found {
			details[i] = d.detail
		}
		if err := r.registerLocked("repairing the registration of"); err != nil {
			r.record(err, strings.Join(details, "; "))
			return found, err
		}
		r.log.Warn("consul registration was out of date; registered again", "id", r.cfg.ServiceID,
			"found", strings.Join(details, "; "), "tag", tagFor(r.leader))
	}
	if r.leader {
		r.removeStaleLeadersLocked()
	}
	return found, nil
}

// diffLocked lists what Consul's local agent holds differently.
func (r *Registrar) diffLocked() ([]drift, error) {
	svc, _, err := r.client.Agent().Service(r.cfg.ServiceID, nil)
	if err != nil {
		if isNotFound(err) {
			return []drift{{"missing", "service not registered"}}, nil
		}
		return nil, fmt.Errorf("consul: reading service %s: %w", r.cfg.ServiceID, err)
	}
	var out []drift
	want := tagFor(r.leader)
	if !sameTags(svc.Tags, want) {
		out = append(out, drift{"tag", fmt.Sprintf("tags %v, want [%s]", svc.Tags, want)})
	}
	if svc.Service != r.cfg.ServiceName || svc.Address != r.host || svc.Port != r.port {
		out = append(out, drift{"service", fmt.Sprintf("service %s at %s:%d, want %s at %s:%d",
			svc.Service, svc.Address, svc.Port, r.cfg.ServiceName, r.host, r.port)})
	}
	checks, err := r.client.Agent().ChecksWithFilter(fmt.Sprintf("ServiceID == %q", r.cfg.ServiceID))
	if err != nil {
		return nil, fmt.Errorf("consul: reading checks of %s: %w", r.cfg.ServiceID, err)
	}
	switch c := checks[r.checkID()]; {
	case c == nil:
		out = append(out, drift{"check", "health check missing"})
	case c.Definition.HTTP != "" && c.Definition.HTTP != r.healthURL():
		out = append(out, drift{"check", fmt.Sprintf("health check probes %s, want %s", c.Definition.HTTP, r.healthURL())})
	}
	return out, nil
}

// removeStaleLeadersLocked deregisters other instances of the service
// tagged leader whose checks are critical and that the same Consul agent
// holds (only the agent that registered a service can remove it for
// good). A live agent removed by mistake registers itself again at its
// next reconciliation; entries on other Consul agents go after
// deregisterCriticalAfter.
func (r *Registrar) removeStaleLeadersLocked() {
	entries, _, err := r.client.Health().Service(r.cfg.ServiceName, "leader", false, nil)
	if err != nil {
		r.log.Debug("listing leader entries", "error", err)
		return
	}
	local, err := r.client.Agent().NodeName()
	if err != nil {
		r.log.Debug("reading consul node name", "error", err)
		return
	}
	for _, e := range entries {
		if e.Service == nil || e.Node == nil || e.Service.ID == r.cfg.ServiceID || e.Node.Node != local ||
			e.Checks.AggregatedStatus() != consul.HealthCritical {
			continue
		}
		if err := r.client.Agent().ServiceDeregister(e.Service.ID); err != nil && !isNotFound(err) {
			r.log.Warn("removing a dead leader's consul entry", "id", e.Service.ID, "error", err)
			continue
		}
		r.log.Info("removed a dead leader's consul entry", "id", e.Service.ID)
	}
}

func isNotFound(err error) bool {
	var se consul.StatusError
	return errors.As(err, &se) && se.Code == 404
}

// interval is how often the registration is reconciled while in sync:
// the check interval (10s when it does not parse).
func (r *Registrar) interval() time.Duration {
	d, err := time.ParseDuration(r.cfg.CheckInterval)
	if err != nil || d <= 0 {
		return 10 * time.Second
	}
	return d
}

// reconcileConsul registers the agent and keeps the registration as
// wanted until ctx ends: a pass every check interval while Consul agrees,
// one at once when the wanted tag changed, and on failure again after a
// back-off (1s doubling up to the check interval). A Consul down at
// start-up or restarted empty, or a tag change refused, heals at the next
// pass; scheduling never waits on Consul.
func (a *Agent) reconcileConsul(ctx context.Context, r *Registrar) {
	log := r.log
	every := r.interval()
	backoff := time.Second
	err := r.Register()
	for {
		a.opts.Metrics.RecordConsulInSync(err == nil)
		wait := every
		if err != nil {
			wait = backoff
			backoff = min(backoff*2, max(every, time.Second))
			log.Warn("consul registration failed, retrying", "error", err, "backoff", wait)
		} else {
			backoff = time.Second
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-r.kick:
			t.Stop()
		}
		var found []drift
		found, err = r.Reconcile()
		for _, d := range found {
			a.opts.Metrics.RecordConsulRepair(d.reason)
		}
	}
}
