package device

import (
	"fmt"
	"time"

	"github.com/impact-sched/nomad-impact/device/gpu"
)

// healthState is what is known to be wrong with one GPU or MIG instance.
type healthState struct {
	// lost is set while the GPU is missing from the backend's scans.
	lost     bool
	lostDesc string
	// fault is set by a critical XID or an uncorrectable ECC error and
	// cleared by a recovery (a reset GPU reappearing, or the backend
	// reporting it usable again).
	fault string
}

// health tracks per-device health from events and scans. It is pure: the
// caller passes the time and decides what to do with the changes.
type health struct {
	byID map[string]*healthState
	// seen is every ID ever present, so that a GPU that vanishes is
	// reported as lost instead of silently dropped.
	seen map[string]bool
}

func newHealth() *health {
	return &health{byID: map[string]*healthState{}, seen: map[string]bool{}}
}

func (h *health) state(id string) *healthState {
	s, ok := h.byID[id]
	if !ok {
		s = &healthState{}
		h.byID[id] = s
	}
	return s
}

// xidText gives a short meaning for common XIDs, for health descriptions.
var xidText = map[int]string{
	48:  "double-bit ECC error",
	61:  "internal micro-controller breakpoint",
	62:  "internal micro-controller halt",
	63:  "ECC page retirement or row remapping recorded",
	64:  "ECC page retirement or row remapper failure",
	74:  "NVLink error",
	79:  "GPU has fallen off the bus",
	92:  "high single-bit ECC error rate",
	94:  "contained ECC error",
	95:  "uncontained ECC error",
	119: "GSP RPC timeout",
	120: "GSP error",
}

// event applies a health event and returns a log message for it and
// whether the device's health changed.
func (h *health) event(ev gpu.HealthEvent) (msg string, changed bool) {
	s := h.state(ev.UUID)
	when := ev.Time.UTC().Format(time.RFC3339)
	switch ev.Kind {
	case gpu.EventXID:
		if !gpu.CriticalXID(ev.XID) {
			return fmt.Sprintf("application XID %d ignored for health", ev.XID), false
		}
		desc := fmt.Sprintf("XID %d at %s", ev.XID, when)
		if t, ok := xidText[ev.XID]; ok {
			desc = fmt.Sprintf("XID %d (%s) at %s", ev.XID, t, when)
		}
		changed = s.fault == ""
		if changed {
			s.fault = desc
		}
		return "critical " + desc, changed
	case gpu.EventECC:
		changed = s.fault == ""
		if changed {
			s.fault = "uncorrectable ECC error at " + when
		}
		return "uncorrectable ECC error", changed
	case gpu.EventLost:
		changed = !s.lost
		s.lost = true
		s.lostDesc = "GPU lost at " + when
		if ev.Detail != "" {
			s.lostDesc += " (" + ev.Detail + ")"
		}
		return "GPU lost", changed
	case gpu.EventRecovered:
		changed = s.lost || s.fault != ""
		s.lost, s.lostDesc, s.fault = false, "", ""
		return "GPU recovered", changed
	}
	return fmt.Sprintf("unknown event kind %v ignored", ev.Kind), false
}

// scan records the IDs present in a scan. An ID seen before and missing now
// becomes lost; a lost ID present again has recovered (a GPU that comes
// back after vanishing has been reset, so its fault is cleared too). It
// returns the IDs whose health changed.
func (h *health) scan(present map[string]bool, now time.Time) (lost, recovered []string) {
	for id := range present {
		h.seen[id] = true
		if s := h.byID[id]; s != nil && s.lost {
			s.lost, s.lostDesc, s.fault = false, "", ""
			recovered = append(recovered, id)
		}
	}
	for id := range h.seen {
		if present[id] {
			continue
		}
		s := h.state(id)
		if !s.lost {
			s.lost = true
			s.lostDesc = "GPU lost: not found by the backend since " + now.UTC().Format(time.RFC3339)
			lost = append(lost, id)
		}
	}
	return lost, recovered
}

// status says whether an instance is healthy, and why not. A MIG instance
// is also unhealthy when its parent is.
func (h *health) status(id, parent string) (bool, string) {
	for _, key := range []string{id, parent} {
		if key == "" {
			continue
		}
		s := h.byID[key]
		if s == nil {
			continue
		}
		prefix := ""
		if key != id {
			prefix = "parent GPU " + parent + ": "
		}
		if s.lost {
			return false, prefix + s.lostDesc
		}
		if s.fault != "" {
			return false, prefix + s.fault
		}
	}
	return true, ""
}
