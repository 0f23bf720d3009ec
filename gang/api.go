package gang

import (
	"fmt"
	"time"
)

// State is the lifecycle state of a gang.
type State string

// Gang states; see README.md ("Lifecycle of a gang") for the transitions.
const (
	StateForming  State = "forming"
	StateReady    State = "ready"
	StateFailed   State = "failed"
	StateStopping State = "stopping"
	StateDone     State = "done"
)

// Terminal reports whether members of a gang in this state must stop (or
// have stopped) rather than start or keep running.
func (s State) Terminal() bool {
	return s == StateFailed || s == StateStopping || s == StateDone
}

// MemberState is the state of one member of a gang.
type MemberState string

// Member states.
const (
	MemberWaiting MemberState = "waiting" // joined, gang not ready yet
	MemberRunning MemberState = "running" // gang ready, process running
	MemberDone    MemberState = "done"    // exited 0
	MemberFailed  MemberState = "failed"  // exited non-zero or killed by a signal
	MemberStopped MemberState = "stopped" // stopped on request
	MemberLost    MemberState = "lost"    // missed its heartbeats
)

// Terminal reports whether the member's process has ended (or is gone).
func (s MemberState) Terminal() bool {
	return s == MemberDone || s == MemberFailed || s == MemberStopped || s == MemberLost
}

// JoinRequest is the body of PUT /v1/gang/{gang}/members/{member}.
type JoinRequest struct {
	// Size is the number of members the gang needs; 0 lets the server
	// resolve it (the whole job's allocation count).
	Size      int    `json:"size"`
	Namespace string `json:"namespace"`
	JobID     string `json:"job_id"`
	AllocID   string `json:"alloc_id"`
	AllocName string `json:"alloc_name,omitempty"`
	// AllocIndex orders members for rank assignment (NOMAD_ALLOC_INDEX).
	AllocIndex int    `json:"alloc_index"`
	Group      string `json:"group,omitempty"`
	Task       string `json:"task"`
	NodeID     string `json:"node_id"`
	NodeName   string `json:"node_name,omitempty"`
	// Addr and Port are where this member would serve as master (rank 0).
	Addr string `json:"addr"`
	Port int    `json:"port"`
	// TTL is how long the member stays registered without a heartbeat, as a
	// Go duration ("30s"); empty means the server default.
	TTL string `json:"ttl,omitempty"`
	// Resume is set when a running member re-registers after the
	// rendezvous server lost its state (a restart or failover): the gang is
	// recreated as ready with the ranks its members already use.
	Resume *Resume `json:"resume,omitempty"`
}

// Resume carries a running member's assignment.
type Resume struct {
	Generation     int `json:"generation"`
	Rank           int `json:"rank"`
	NodeRank       int `json:"node_rank"`
	LocalRank      int `json:"local_rank"`
	LocalWorldSize int `json:"local_world_size"`
}

// Validate names the first missing or malformed field.
func (r JoinRequest) Validate() error {
	switch {
	case r.Size < 0:
		return fmt.Errorf("size must be >= 0, got %d", r.Size)
	case r.JobID == "":
		return fmt.Errorf("job_id is required")
	case r.AllocID == "":
		return fmt.Errorf("alloc_id is required")
	case r.Task == "":
		return fmt.Errorf("task is required")
	case r.NodeID == "":
		return fmt.Errorf("node_id is required")
	case r.Addr == "":
		return fmt.Errorf("addr is required")
	case r.Port <= 0 || r.Port > 65535:
		return fmt.Errorf("port must be in 1..65535, got %d", r.Port)
	case r.AllocIndex < 0:
		return fmt.Errorf("alloc_index must be >= 0, got %d", r.AllocIndex)
	}
	if res := r.Resume; res != nil {
		switch {
		case r.Size <= 0:
			return fmt.Errorf("resume: size is required")
		case res.Rank < 0 || res.Rank >= r.Size:
			return fmt.Errorf("resume: rank %d outside 0..%d", res.Rank, r.Size-1)
		case res.Generation <= 0:
			return fmt.Errorf("resume: generation must be positive")
		}
	}
	if r.TTL != "" {
		d, err := time.ParseDuration(r.TTL)
		if err != nil {
			return fmt.Errorf("ttl %q: %w", r.TTL, err)
		}
		if d <= 0 {
			return fmt.Errorf("ttl must be positive, got %q", r.TTL)
		}
	}
	return nil
}

// ExitRequest is the body of PUT /v1/gang/{gang}/members/{member}/exit.
type ExitRequest struct {
	ExitCode int `json:"exit_code"`
	Signal   int `json:"signal"`
	// Stopped is true when the process was stopped on request (Nomad stop,
	// preemption) rather than ending by itself.
	Stopped bool   `json:"stopped"`
	Reason  string `json:"reason,omitempty"`
}

// StopRequest is the body of PUT /v1/gang/{gang}/stop.
type StopRequest struct {
	Reason string `json:"reason"`
}

// Member is one member as the registry sees it. Ranks are -1 until the gang
// is ready.
type Member struct {
	ID             string      `json:"member"`
	State          MemberState `json:"state"`
	AllocID        string      `json:"alloc_id"`
	AllocName      string      `json:"alloc_name,omitempty"`
	AllocIndex     int         `json:"alloc_index"`
	Group          string      `json:"group,omitempty"`
	Task           string      `json:"task"`
	NodeID         string      `json:"node_id"`
	NodeName       string      `json:"node_name,omitempty"`
	Addr           string      `json:"addr"`
	Port           int         `json:"port"`
	Rank           int         `json:"rank"`
	NodeRank       int         `json:"node_rank"`
	LocalRank      int         `json:"local_rank"`
	LocalWorldSize int         `json:"local_world_size"`
	JoinedAt       time.Time   `json:"joined_at"`
	LastSeen       time.Time   `json:"last_seen"`
	ExitCode       int         `json:"exit_code,omitempty"`
	Signal         int         `json:"signal,omitempty"`
}

// Status is the view of one gang returned by every endpoint.
type Status struct {
	ID         string `json:"gang"`
	State      State  `json:"state"`
	Size       int    `json:"size"`
	Arrived    int    `json:"arrived"`
	Generation int    `json:"generation"`
	// Index increases on every change; pass it back as ?index= to block.
	Index      uint64   `json:"index"`
	Reason     string   `json:"reason,omitempty"`
	NNodes     int      `json:"nnodes,omitempty"`
	MasterAddr string   `json:"master_addr,omitempty"`
	MasterPort int      `json:"master_port,omitempty"`
	Members    []Member `json:"members"`
}

// Member returns the member with the given ID.
func (s Status) Member(id string) (Member, bool) {
	for _, m := range s.Members {
		if m.ID == id {
			return m, true
		}
	}
	return Member{}, false
}

// ErrorResponse is the body of every non-2xx response.
type ErrorResponse struct {
	Error string `json:"error"`
}

// MemberID is the member name the driver uses for one task of one allocation.
func MemberID(allocID, task string) string { return allocID + "." + task }
