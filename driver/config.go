package driver

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/driver/executor"
	"github.com/impact-sched/nomad-impact/gang"
	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/plugin/hclspec"
)

// configSpec is the schema of the plugin block's config {}.
var configSpec = hclspec.Object(hclspec.Attrs{
	// Base URL of the rendezvous endpoint: the impact agent's HTTP API
	// (it serves /v1/gang/) or a standalone `impact-exec gang-server`.
	// Empty: tasks without a gang block run without a barrier, and a gang
	// block must name its own rendezvous_addr.
	"rendezvous_addr": hclspec.AttrDefault("rendezvous_addr", "string", hclspec.Quote("")),
	// Default barrier timeout for tasks that set none.
	"barrier_timeout": hclspec.AttrDefault("barrier_timeout", "string", hclspec.Quote("10m")),
	// Heartbeat period of gang members (their TTL on the server is 3x).
	"heartbeat_interval": hclspec.AttrDefault("heartbeat_interval", "string", hclspec.Quote("5s")),
	// Address other members use to reach this node's rank 0 when the task
	// names no port label; empty = the local address that routes to the
	// rendezvous server.
	"advertise_addr": hclspec.AttrDefault("advertise_addr", "string", hclspec.Quote("")),
	// Enforce each task's memory (hard limit, OOM reported) and cpu shares
	// with cgroups (v2, or v1 memory+cpu controllers).
	"enforce_resources": hclspec.AttrDefault("enforce_resources", "bool", "true"),
	// Nomad HTTP address for gangs with discovery = "nomad" when the task
	// has no task API socket (identity { env = true }).
	"nomad_addr": hclspec.AttrDefault("nomad_addr", "string", hclspec.Quote("")),
	// Without rendezvous_addr, find the impact agent in Consul: passing
	// instances of consul_service with consul_tag (the leader holds the
	// registry), at consul_addr (default: CONSUL_HTTP_ADDR or the local
	// agent). Empty consul_service: no Consul lookup.
	"consul_addr":    hclspec.AttrDefault("consul_addr", "string", hclspec.Quote("")),
	"consul_service": hclspec.AttrDefault("consul_service", "string", hclspec.Quote("")),
	"consul_tag":     hclspec.AttrDefault("consul_tag", "string", hclspec.Quote("leader")),
	// TLS to the rendezvous endpoint (an impact agent with http.tls_*):
	// the CA that signed its certificate, and a client certificate when it
	// asks for one (http.tls_client_ca).
	"rendezvous_ca_cert":     hclspec.AttrDefault("rendezvous_ca_cert", "string", hclspec.Quote("")),
	"rendezvous_client_cert": hclspec.AttrDefault("rendezvous_client_cert", "string", hclspec.Quote("")),
	"rendezvous_client_key":  hclspec.AttrDefault("rendezvous_client_key", "string", hclspec.Quote("")),
})

// Config is the decoded plugin config.
type Config struct {
	RendezvousAddr    string `cty:"rendezvous_addr"`
	BarrierTimeout    string `cty:"barrier_timeout"`
	HeartbeatInterval string `cty:"heartbeat_interval"`
	AdvertiseAddr     string `cty:"advertise_addr"`
	EnforceResources  bool   `cty:"enforce_resources"`
	NomadAddr         string `cty:"nomad_addr"`
	ConsulAddr        string `cty:"consul_addr"`
	ConsulService     string `cty:"consul_service"`
	ConsulTag         string `cty:"consul_tag"`
	CACert            string `cty:"rendezvous_ca_cert"`
	ClientCert        string `cty:"rendezvous_client_cert"`
	ClientKey         string `cty:"rendezvous_client_key"`

	barrierTimeout time.Duration
	heartbeat      time.Duration
}

// defaultConfig is what the driver uses before SetConfig.
func defaultConfig() Config {
	return Config{BarrierTimeout: "10m", HeartbeatInterval: "5s", EnforceResources: true,
		barrierTimeout: 10 * time.Minute, heartbeat: 5 * time.Second}
}

// validate parses the durations and checks the address; errors name the field.
func (c *Config) validate() error {
	var err error
	if c.barrierTimeout, err = positiveDuration("barrier_timeout", c.BarrierTimeout); err != nil {
		return err
	}
	if c.heartbeat, err = positiveDuration("heartbeat_interval", c.HeartbeatInterval); err != nil {
		return err
	}
	if c.RendezvousAddr != "" {
		if err := checkURL("rendezvous_addr", c.RendezvousAddr); err != nil {
			return err
		}
	}
	if c.NomadAddr != "" {
		if err := checkURL("nomad_addr", c.NomadAddr); err != nil {
			return err
		}
	}
	if (c.ClientCert == "") != (c.ClientKey == "") {
		return fmt.Errorf("rendezvous_client_cert and rendezvous_client_key must be set together")
	}
	if c.AdvertiseAddr != "" && net.ParseIP(c.AdvertiseAddr) == nil && strings.ContainsAny(c.AdvertiseAddr, " /:") {
		return fmt.Errorf("advertise_addr %q: want an IP address or host name", c.AdvertiseAddr)
	}
	return nil
}

// taskConfigSpec is the schema of a task's config {} block.
var taskConfigSpec = hclspec.Object(hclspec.Attrs{
	"command": hclspec.RequiredAttr("command", "string"),
	"args":    hclspec.AttrDefault("args", "list(string)", "[]"),
	// gang narrows, sizes or disables the gang; without the block every
	// task of the job joins one gang when the driver has a rendezvous_addr.
	"gang": hclspec.Block("gang", hclspec.Object(hclspec.Attrs{
		"enabled": hclspec.AttrDefault("enabled", "bool", "true"),
		// name narrows the gang to the tasks that share it (default: the
		// whole job).
		"name": hclspec.AttrDefault("name", "string", hclspec.Quote("")),
		// size of the gang; 0 = the job's whole allocation count, resolved
		// by the rendezvous server (discovery = "nomad": read from Nomad's
		// job API by each member).
		"size":    hclspec.AttrDefault("size", "number", "0"),
		"timeout": hclspec.AttrDefault("timeout", "string", hclspec.Quote("")),
		// port_label names a network port of the group; rank 0's address
		// and port for it become MASTER_ADDR/MASTER_PORT.
		"port_label":  hclspec.AttrDefault("port_label", "string", hclspec.Quote("")),
		"master_port": hclspec.AttrDefault("master_port", "number", "29500"),
		// checkpoint_signal and grace default to the job's
		// impact_checkpoint_signal / impact_grace meta and are read by
		// the same rules (jobspec.ParseSignal, jobspec.ParseDuration).
		"checkpoint_signal": hclspec.AttrDefault("checkpoint_signal", "string", hclspec.Quote("")),
		"grace":             hclspec.AttrDefault("grace", "string", hclspec.Quote("")),
		// checkpoint_signal_to: whom the checkpoint signal reaches,
		// "group" (the task's process group), "main" (its main process)
		// or "children" (the main process's children: a launcher's
		// workers). See the package documentation.
		"checkpoint_signal_to": hclspec.AttrDefault("checkpoint_signal_to", "string", hclspec.Quote("group")),
		// propagate_failure: stop this member when a peer fails or stops.
		"propagate_failure": hclspec.AttrDefault("propagate_failure", "bool", "true"),
		// kill_signal/kill_timeout: how this member is stopped on a peer's
		// failure after the grace period.
		"kill_signal":     hclspec.AttrDefault("kill_signal", "string", hclspec.Quote("SIGINT")),
		"kill_timeout":    hclspec.AttrDefault("kill_timeout", "string", hclspec.Quote("30s")),
		"rendezvous_addr": hclspec.AttrDefault("rendezvous_addr", "string", hclspec.Quote("")),
		// discovery: "impact" (the rendezvous endpoint) or "nomad" (Nomad's
		// native service discovery of service, see driver/internal/nomadbarrier).
		"discovery": hclspec.AttrDefault("discovery", "string", hclspec.Quote("impact")),
		"service":   hclspec.AttrDefault("service", "string", hclspec.Quote("")),
	})),
})

// TaskConfig is the decoded task config.
type TaskConfig struct {
	Command string      `cty:"command"`
	Args    []string    `cty:"args"`
	Gang    *GangConfig `cty:"gang"`
}

// GangConfig is the task config's gang block.
type GangConfig struct {
	Enabled          bool   `cty:"enabled"`
	Name             string `cty:"name"`
	Size             int    `cty:"size"`
	Timeout          string `cty:"timeout"`
	PortLabel        string `cty:"port_label"`
	MasterPort       int    `cty:"master_port"`
	CheckpointSignal string `cty:"checkpoint_signal"`
	Grace            string `cty:"grace"`
	CheckpointTo     string `cty:"checkpoint_signal_to"`
	PropagateFailure bool   `cty:"propagate_failure"`
	KillSignal       string `cty:"kill_signal"`
	KillTimeout      string `cty:"kill_timeout"`
	RendezvousAddr   string `cty:"rendezvous_addr"`
	Discovery        string `cty:"discovery"`
	Service          string `cty:"service"`
}

func defaultGangConfig() *GangConfig {
	return &GangConfig{Enabled: true, MasterPort: 29500, PropagateFailure: true, KillSignal: "SIGINT",
		KillTimeout: "30s", Discovery: "impact", CheckpointTo: executor.CheckpointToGroup}
}

// identityEnv holds the task's "impact" workload identity when its
// identity block sets env = true (Nomad names it NOMAD_TOKEN_<name>).
const identityEnv = "NOMAD_TOKEN_" + gang.IdentityName

// defaultGrace is the time between the checkpoint signal and the kill
// signal when a gang member is stopped for a peer's failure and neither
// the gang block's grace nor the meta impact_grace is given. (The
// scheduler, which reads the same impact_grace, waits none when it is not
// given: its stop then leaves the task its kill_timeout.)
const defaultGrace = 30 * time.Second

// requeueFileName is the task's requeue file (IMPACT_REQUEUE_FILE), in its
// local/ dir.
const requeueFileName = ".impact-requeue"

// contract is the jobspec contract of a task as the driver reads it.
type contract struct {
	// spec is the task's impact_* meta, parsed by jobspec.ParseMeta.
	spec jobspec.Spec
	// graceSet: the meta gives impact_grace (else defaultGrace applies).
	graceSet bool
}

// taskContract parses the impact_* meta in a task's environment (job,
// group and task meta merged by Nomad) with the scheduler's own parse,
// jobspec.ParseMeta: a value means the same to both, and one the
// scheduler would reject (an unknown impact_* key among them) refuses the
// task with the scheduler's error, naming each key at fault.
func taskContract(env map[string]string) (contract, error) {
	meta := jobspec.MetaFromTaskEnv(env)
	s, err := jobspec.ParseMeta(meta, nil)
	if err != nil {
		return contract{}, err
	}
	_, graceSet := meta[jobspec.MetaGrace]
	return contract{spec: s, graceSet: graceSet}, nil
}

func positiveDuration(field, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %w", field, v, err)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%s %q: must be positive", field, v)
	}
	return d, nil
}

func checkURL(field, v string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s %q: want http(s)://host:port", field, v)
	}
	return nil
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
