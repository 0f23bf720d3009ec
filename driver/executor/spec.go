// Package executor runs one task of the impact-exec driver under a small
// supervisor process (`impact-exec supervise DIR`) that is detached from the
// plugin (its own session), so tasks outlive plugin and agent restarts.
//
// The plugin and the supervisor talk only through files in the task's
// state directory and through signals:
//
//	spec.json      written by the plugin: what to run, gang settings; the
//	               supervisor rewrites it without the env values once read
//	status.json    written by the supervisor: phase, child pid, the task's
//	               cgroups (atomic rename)
//	events.jsonl   appended by the supervisor: task events for Nomad
//	stop           created by the plugin before a stop (holding the signal
//	               number), so the exit counts as a stop
//	exit.json      written by the supervisor as its last act (atomic rename)
//	supervisor.log the supervisor's own log
//
// Signals sent to the supervisor are forwarded to the task's process
// group; a termination signal received while waiting at the gang barrier
// aborts the wait instead. Deciding (what to signal when) lives in the
// supervisor's loop; the plugin side only launches, attaches, signals and
// reads files, so a new plugin process can take over at any time.
package executor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/impact-sched/nomad-impact/gang"
)

// SpecVersion is the version of Spec and of the files in the state dir.
const SpecVersion = 1

// File names inside the state directory.
const (
	SpecFile   = "spec.json"
	StatusFile = "status.json"
	EventsFile = "events.jsonl"
	StopFile   = "stop"
	ExitFile   = "exit.json"
	LogFile    = "supervisor.log"
)

// Spec is everything the supervisor needs to run a task.
type Spec struct {
	Version    int               `json:"version"`
	TaskID     string            `json:"task_id"`
	Command    string            `json:"command"`
	Args       []string          `json:"args"`
	Dir        string            `json:"dir"`
	Env        map[string]string `json:"env"`
	User       string            `json:"user,omitempty"`
	StdoutPath string            `json:"stdout_path"`
	StderrPath string            `json:"stderr_path"`
	// KillSignal and KillTimeout are used when the supervisor itself stops
	// the task (gang failure propagation).
	KillSignal  string        `json:"kill_signal"`
	KillTimeout time.Duration `json:"kill_timeout"`
	Resources   Resources     `json:"resources"`
	Gang        *GangSpec     `json:"gang,omitempty"`
	// RequeueFile is the path the task finds in IMPACT_REQUEUE_FILE ("" =
	// none): a process of the task that has saved its checkpoint and
	// wants the job requeued writes it. The supervisor removes it before
	// the command starts; when the command ends with a non-zero status and
	// the file exists, the exit reports RequeueExitCode instead (a
	// launcher such as torchrun turns its workers' requeue code into 1).
	RequeueFile     string `json:"requeue_file,omitempty"`
	RequeueExitCode int    `json:"requeue_exit_code,omitempty"`
}

// RequeueFileEnv is the task env variable naming Spec.RequeueFile.
const RequeueFileEnv = "IMPACT_REQUEUE_FILE"

// Where the checkpoint signal goes (GangSpec.CheckpointTo).
const (
	// CheckpointToGroup: every process of the task's process group.
	CheckpointToGroup = "group"
	// CheckpointToMain: the task's main process only.
	CheckpointToMain = "main"
	// CheckpointToChildren: the main process's direct children, not the
	// main process; once they have exited, the main process gets the kill
	// signal if it has not ended on its own within LauncherExitWait.
	CheckpointToChildren = "children"
)

// ValidCheckpointTo reports whether v names a checkpoint target ("" is
// the default, CheckpointToGroup).
func ValidCheckpointTo(v string) bool {
	switch v {
	case "", CheckpointToGroup, CheckpointToMain, CheckpointToChildren:
		return true
	}
	return false
}

// GangSpec configures the barrier and failure propagation of one member.
type GangSpec struct {
	// Discovery is "impact" (the rendezvous HTTP endpoint at URL) or
	// "nomad" (Nomad's service discovery: Service, NomadAddr, NomadToken).
	Discovery  string `json:"discovery,omitempty"`
	Service    string `json:"service,omitempty"`
	NomadAddr  string `json:"nomad_addr,omitempty"`
	NomadToken string `json:"nomad_token,omitempty"`

	// URL is the rendezvous endpoint; when empty it is looked up in Consul
	// (ConsulService, with ConsulTag, at ConsulAddr).
	URL           string `json:"url"`
	ConsulAddr    string `json:"consul_addr,omitempty"`
	ConsulService string `json:"consul_service,omitempty"`
	ConsulTag     string `json:"consul_tag,omitempty"`

	// IdentityFile is the task's workload identity for the rendezvous
	// (secrets/nomad_impact.jwt), read on every request since Nomad renews
	// it; IdentityToken is the same from the task env, used when there is
	// no file. CACert, ClientCert and ClientKey configure TLS to URL.
	IdentityFile  string `json:"identity_file,omitempty"`
	IdentityToken string `json:"identity_token,omitempty"`
	CACert        string `json:"ca_cert,omitempty"`
	ClientCert    string `json:"client_cert,omitempty"`
	ClientKey     string `json:"client_key,omitempty"`

	ID        string           `json:"id"`
	Member    string           `json:"member"`
	Join      gang.JoinRequest `json:"join"`
	Timeout   time.Duration    `json:"timeout"`
	Heartbeat time.Duration    `json:"heartbeat"`
	// Propagate stops this member when a peer fails or is stopped.
	Propagate bool `json:"propagate"`
	// CheckpointSignal is sent first when a peer fails ("" = none), then
	// the task gets Grace before its kill signal.
	CheckpointSignal string        `json:"checkpoint_signal,omitempty"`
	Grace            time.Duration `json:"grace"`
	// CheckpointTo is whom the checkpoint signal reaches: one of the
	// CheckpointTo* constants ("" = CheckpointToGroup). It applies both to
	// the signal the supervisor sends when a peer fails and to the same
	// signal arriving from Nomad (the impact agent's preemption).
	CheckpointTo string `json:"checkpoint_to,omitempty"`
}

// Validate names the first missing field.
func (s *Spec) Validate() error {
	switch {
	case s.Version != SpecVersion:
		return fmt.Errorf("spec version %d, this binary understands %d", s.Version, SpecVersion)
	case s.Command == "":
		return fmt.Errorf("command is required")
	case s.Dir == "":
		return fmt.Errorf("dir is required")
	}
	if g := s.Gang; g != nil {
		switch {
		case g.Discovery == "nomad" && (g.Service == "" || g.NomadAddr == "" || (g.Join.Size <= 0 && g.Join.JobID == "")):
			return fmt.Errorf("gang: nomad discovery needs a service, a nomad address and a size or job ID")
		case g.Discovery != "nomad" && g.URL == "" && g.ConsulService == "":
			return fmt.Errorf("gang: a rendezvous url or a consul service is required")
		case g.ID == "" || g.Member == "":
			return fmt.Errorf("gang: id and member are required")
		case g.Timeout <= 0:
			return fmt.Errorf("gang: timeout must be positive")
		case !ValidCheckpointTo(g.CheckpointTo):
			return fmt.Errorf("gang: checkpoint_to %q: want %q, %q or %q", g.CheckpointTo, CheckpointToGroup, CheckpointToMain, CheckpointToChildren)
		}
	}
	return nil
}

// redacted is the spec as kept on disk once the supervisor has read it:
// the env's values (Vault and workload identity tokens among them) and the
// Nomad token are dropped, since the state dir lies in the task dir that
// `nomad alloc fs` can read. The keys stay, for debugging.
func (s Spec) redacted() Spec {
	env := make(map[string]string, len(s.Env))
	for k := range s.Env {
		env[k] = redactedValue
	}
	s.Env = env
	if s.Gang != nil {
		g := *s.Gang
		if g.NomadToken != "" {
			g.NomadToken = redactedValue
		}
		if g.IdentityToken != "" {
			g.IdentityToken = redactedValue
		}
		s.Gang = &g
	}
	return s
}

const redactedValue = "(redacted)"

// Phase is where the supervisor is in a task's life.
type Phase string

// Phases, in order.
const (
	PhaseStarting Phase = "starting"
	PhaseBarrier  Phase = "barrier"
	PhaseRunning  Phase = "running"
	PhaseExited   Phase = "exited"
)

// Status is the supervisor's status file.
type Status struct {
	Phase         Phase `json:"phase"`
	SupervisorPID int   `json:"supervisor_pid"`
	ChildPID      int   `json:"child_pid,omitempty"`
	// ChildStart is the child's start time in clock ticks since boot, so
	// an orphaned task can be told from a process that reused its PID.
	ChildStart uint64            `json:"child_start,omitempty"`
	StartedAt  time.Time         `json:"started_at,omitzero"`
	GangEnv    map[string]string `json:"gang_env,omitempty"`
	// Cgroups are the task's cgroups, written before its command starts:
	// the driver's exec commands join Cgroups.Dirs, and a destroy after
	// the supervisor died kills what is left in Cgroups.Own and removes
	// Cgroups.Created.
	Cgroups *CgroupSet `json:"cgroups,omitempty"`
}

// CgroupSet records the cgroups of a task.
type CgroupSet struct {
	V2      bool     `json:"v2,omitempty"`
	Dirs    []string `json:"dirs"`
	Own     []string `json:"own,omitempty"`
	Created []string `json:"created,omitempty"`
}

// Exit is the supervisor's exit file: how the task ended.
type Exit struct {
	ExitCode  int       `json:"exit_code"`
	Signal    int       `json:"signal"`
	OOMKilled bool      `json:"oom_killed"`
	Err       string    `json:"err,omitempty"`
	Stopped   bool      `json:"stopped"`
	ExitedAt  time.Time `json:"exited_at"`
	// Requeued: the task's requeue file was written and its command ended
	// non-zero, so ExitCode is the requeue exit code; MainExitCode is how
	// the command itself ended (128+signal for a signal).
	Requeued     bool `json:"requeued,omitempty"`
	MainExitCode int  `json:"main_exit_code,omitempty"`
}

// Event is one line of the events file.
type Event struct {
	Time        time.Time         `json:"time"`
	Message     string            `json:"message"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// writeJSONAtomic writes v to dir/name through a temporary file and a
// rename, so readers never see a partial file.
func writeJSONAtomic(dir, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", name, err)
	}
	tmp, err := os.CreateTemp(dir, "."+name+".tmp*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("syncing %s: %w", name, err)
	}
	tmp.Close()
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("renaming %s: %w", name, err)
	}
	return nil
}

func readJSON(dir, name string, v any) error {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decoding %s: %w", filepath.Join(dir, name), err)
	}
	return nil
}
