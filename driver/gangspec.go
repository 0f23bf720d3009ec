package driver

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/driver/executor"
	"github.com/impact-sched/nomad-impact/gang"
	"github.com/impact-sched/nomad-impact/jobspec"
)

// gangSpec turns the task's gang settings into the supervisor's GangSpec;
// nil when the task runs without a barrier. Errors name the field.
func gangSpec(cfg Config, tc TaskConfig, t taskInfo) (*executor.GangSpec, string, time.Duration, error) {
	g := tc.Gang
	if g == nil {
		if cfg.RendezvousAddr == "" && cfg.ConsulService == "" {
			return nil, "", 0, nil
		}
		g = defaultGangConfig()
	}
	if !g.Enabled {
		return nil, "", 0, nil
	}
	addr, nomadAddr, err := gangDiscovery(cfg, g, t)
	if err != nil {
		return nil, "", 0, err
	}
	if g.Size < 0 {
		return nil, "", 0, fmt.Errorf("gang.size must be >= 0, got %d", g.Size)
	}
	stop, err := gangStopping(cfg, g, t)
	if err != nil {
		return nil, "", 0, err
	}
	host, port, err := gangMaster(cfg, g, t, addr)
	if err != nil {
		return nil, "", 0, err
	}
	ns, job, allocIndex, err := gangIdentity(t)
	if err != nil {
		return nil, "", 0, err
	}
	id := ns + ":" + job
	if g.Name != "" {
		id += ":" + g.Name
	}
	nodeID := firstNonEmpty(t.nodeID, t.nodeName, host)
	hb := cfg.heartbeat
	return &executor.GangSpec{
		URL: addr, ID: id, Member: t.allocID + "." + t.name,
		Join:    gangJoin(g.Size, ns, job, t, allocIndex, nodeID, host, port, 3*hb),
		Timeout: stop.timeout, Heartbeat: hb, Propagate: g.PropagateFailure,
		CheckpointSignal: stop.checkpointSignal, Grace: stop.grace, CheckpointTo: g.CheckpointTo,
		Discovery: g.Discovery, Service: g.Service, NomadAddr: nomadAddr, NomadToken: t.env["NOMAD_TOKEN"],
		ConsulAddr: cfg.ConsulAddr, ConsulService: cfg.ConsulService, ConsulTag: cfg.ConsulTag,
		IdentityToken: t.env[identityEnv], CACert: cfg.CACert, ClientCert: cfg.ClientCert, ClientKey: cfg.ClientKey,
	}, stop.killSignal, stop.killTimeout, nil
}

// gangDiscovery reads how the member finds its gang: the rendezvous
// address (the task's gang block wins over the plugin's), or Nomad's
// address with discovery = "nomad".
func gangDiscovery(cfg Config, g *GangConfig, t taskInfo) (addr, nomadAddr string, err error) {
	addr = firstNonEmpty(g.RendezvousAddr, cfg.RendezvousAddr)
	switch g.Discovery {
	case "", "impact":
		if addr == "" && cfg.ConsulService == "" {
			return "", "", fmt.Errorf("gang: no rendezvous address: set rendezvous_addr (or consul_service) in the plugin config, or rendezvous_addr in the task's gang block (or use discovery = \"nomad\")")
		}
		if addr != "" {
			if err := checkURL("gang.rendezvous_addr", addr); err != nil {
				return "", "", err
			}
		}
	case "nomad":
		if g.Service == "" {
			return "", "", fmt.Errorf("gang.service is required with discovery = \"nomad\" (the group's Nomad-native service)")
		}
		nomadAddr = nomadAddress(cfg, t.env)
	default:
		return "", "", fmt.Errorf("gang.discovery %q: want \"impact\" or \"nomad\"", g.Discovery)
	}
	return addr, nomadAddr, nil
}

// gangStop is how a member waits for its gang and how it is stopped.
type gangStop struct {
	timeout          time.Duration
	checkpointSignal string
	grace            time.Duration
	killSignal       string
	killTimeout      time.Duration
}

// gangStopping reads the barrier timeout and the stop settings. The gang
// block's checkpoint_signal and grace override the meta's (already
// parsed: taskContract) and are read by the same rules.
func gangStopping(cfg Config, g *GangConfig, t taskInfo) (gangStop, error) {
	st := gangStop{timeout: cfg.barrierTimeout, checkpointSignal: t.meta.spec.CheckpointSignal, grace: defaultGrace}
	if g.Timeout != "" {
		d, err := positiveDuration("gang.timeout", g.Timeout)
		if err != nil {
			return st, err
		}
		st.timeout = d
	}
	if g.CheckpointSignal != "" {
		sig, err := jobspec.ParseSignal(g.CheckpointSignal)
		if err != nil {
			return st, fmt.Errorf("gang.checkpoint_signal %q: %w", g.CheckpointSignal, err)
		}
		st.checkpointSignal = sig
	}
	if !executor.ValidCheckpointTo(g.CheckpointTo) {
		return st, fmt.Errorf("gang.checkpoint_signal_to %q: want %q, %q or %q", g.CheckpointTo,
			executor.CheckpointToGroup, executor.CheckpointToMain, executor.CheckpointToChildren)
	}
	if t.meta.graceSet {
		st.grace = t.meta.spec.Grace
	}
	if g.Grace != "" {
		d, err := jobspec.ParseDuration(g.Grace)
		if err != nil {
			return st, fmt.Errorf("gang.grace %q: %w", g.Grace, err)
		}
		st.grace = d
	}
	var err error
	if st.killSignal, err = jobspec.ParseSignal(g.KillSignal); err != nil {
		return st, fmt.Errorf("gang.kill_signal %q: %w", g.KillSignal, err)
	}
	if st.killTimeout, err = positiveDuration("gang.kill_timeout", g.KillTimeout); err != nil {
		return st, err
	}
	return st, nil
}

// gangMaster says where this member would serve as the gang's master: the
// group's port_label, else master_port on the first address known (the
// plugin's advertise_addr, the local address towards the rendezvous
// server or Consul, else loopback).
func gangMaster(cfg Config, g *GangConfig, t taskInfo, addr string) (string, int, error) {
	host, port := "", g.MasterPort
	if g.PortLabel != "" {
		host = t.env["NOMAD_IP_"+g.PortLabel]
		p := t.env["NOMAD_HOST_PORT_"+g.PortLabel]
		if host == "" || p == "" {
			return "", 0, fmt.Errorf("gang.port_label %q: the group has no such port (no NOMAD_IP_%s / NOMAD_HOST_PORT_%s in the task env)", g.PortLabel, g.PortLabel, g.PortLabel)
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return "", 0, fmt.Errorf("gang.port_label %q: port %q: %w", g.PortLabel, p, err)
		}
		port = n
	}
	if port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("gang.master_port must be in 1..65535, got %d", port)
	}
	if host == "" {
		host = cfg.AdvertiseAddr
	}
	if host == "" && addr != "" {
		host = localAddrFor(addr)
	}
	if host == "" && cfg.ConsulService != "" {
		host = localAddrFor("http://" + firstNonEmpty(cfg.ConsulAddr, "127.0.0.1:8500"))
	}
	return firstNonEmpty(host, "127.0.0.1"), port, nil
}

// gangIdentity names the member's job (namespace and ID, from the task's
// config or its Nomad environment) and its allocation index.
func gangIdentity(t taskInfo) (ns, job string, allocIndex int, err error) {
	ns = firstNonEmpty(t.namespace, t.env["NOMAD_NAMESPACE"], "default")
	job = firstNonEmpty(t.jobID, t.env["NOMAD_JOB_ID"], t.jobName)
	if job == "" {
		return "", "", 0, fmt.Errorf("gang: the task has no job id")
	}
	if v := t.env["NOMAD_ALLOC_INDEX"]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return "", "", 0, fmt.Errorf("gang: NOMAD_ALLOC_INDEX %q is not an index", v)
		}
		allocIndex = n
	}
	return ns, job, allocIndex, nil
}

// localAddrFor returns the local IP that routes to the rendezvous server
// (no packet is sent: a UDP "connect" only picks the route).
func localAddrFor(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "127.0.0.1"
	}
	host := u.Hostname()
	port := u.Port()
	if port == "" {
		port = "80"
	}
	c, err := net.Dial("udp", net.JoinHostPort(host, port))
	if err != nil {
		return "127.0.0.1"
	}
	defer c.Close()
	if a, ok := c.LocalAddr().(*net.UDPAddr); ok {
		return a.IP.String()
	}
	return "127.0.0.1"
}

// taskInfo is what gangSpec needs from Nomad's TaskConfig.
type taskInfo struct {
	name, allocID, group, namespace, jobID, jobName, nodeID, nodeName string
	env                                                               map[string]string
	// meta is the task's jobspec contract (taskContract of env).
	meta contract
}

func gangJoin(size int, ns, job string, t taskInfo, allocIndex int, nodeID, host string, port int, ttl time.Duration) gang.JoinRequest {
	return gang.JoinRequest{
		Size: size, Namespace: ns, JobID: job, AllocID: t.allocID, AllocName: t.env["NOMAD_ALLOC_NAME"],
		AllocIndex: allocIndex, Group: t.group, Task: t.name, NodeID: nodeID, NodeName: t.nodeName,
		Addr: host, Port: port, TTL: ttl.String(),
	}
}

// nomadAddress is where a task reads Nomad services: its task API socket
// (identity { env = true }), else the plugin's nomad_addr, else NOMAD_ADDR.
func nomadAddress(cfg Config, env map[string]string) string {
	if a := env["NOMAD_UNIX_ADDR"]; a != "" {
		if strings.HasPrefix(a, "unix://") {
			return a
		}
		return "unix://" + a
	}
	return firstNonEmpty(cfg.NomadAddr, env["NOMAD_ADDR"], "http://127.0.0.1:4646")
}
