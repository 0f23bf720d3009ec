package fake

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// This file is the control file (see the package doc): the actions it can
// inject, its line format, and how a running backend follows it.

// ActionKind is what an Action does.
type ActionKind int

// Action kinds.
const (
	ActXID ActionKind = iota + 1
	ActLost
	ActRecover
	ActStats
)

// String names the kind for logs.
func (k ActionKind) String() string {
	switch k {
	case ActXID:
		return "xid"
	case ActLost:
		return "lost"
	case ActRecover:
		return "recover"
	case ActStats:
		return "stats"
	}
	return fmt.Sprintf("ActionKind(%d)", int(k))
}

// Action is one injected change.
type Action struct {
	Kind  ActionKind
	UUID  string
	XID   int
	Stats StatsUpdate
}

// StatsUpdate sets the given stats of a GPU; nil fields are left as they
// are.
type StatsUpdate struct {
	Utilization    *int
	MemoryUtil     *int
	MemoryUsedMiB  *int
	PowerW         *float64
	TemperatureC   *int
	ECCCorrected   *int
	ECCUncorrected *int
}

func (u StatsUpdate) validate() error {
	pct := func(name string, v *int) error {
		if v != nil && (*v < 0 || *v > 100) {
			return fmt.Errorf("%s must be 0..100, got %d", name, *v)
		}
		return nil
	}
	if err := pct("utilization", u.Utilization); err != nil {
		return err
	}
	if err := pct("memory_utilization", u.MemoryUtil); err != nil {
		return err
	}
	for name, v := range map[string]*int{"memory_used_mib": u.MemoryUsedMiB, "ecc_corrected": u.ECCCorrected, "ecc_uncorrected": u.ECCUncorrected} {
		if v != nil && *v < 0 {
			return fmt.Errorf("%s must not be negative, got %d", name, *v)
		}
	}
	if u.PowerW != nil && *u.PowerW < 0 {
		return fmt.Errorf("power_w must not be negative, got %g", *u.PowerW)
	}
	return nil
}

// ParseControlLine parses one control-file line. It returns ok=false for a
// blank or comment line.
func (t *Topology) ParseControlLine(line string) (Action, bool, error) {
	line = strings.TrimSpace(line)
	if line == "" || strings.HasPrefix(line, "#") {
		return Action{}, false, nil
	}
	f := strings.Fields(line)
	if len(f) < 2 {
		return Action{}, false, fmt.Errorf("%q: want <verb> <gpu> [args]", line)
	}
	uuid, err := t.Resolve(f[1])
	if err != nil {
		return Action{}, false, err
	}
	a := Action{UUID: uuid}
	switch f[0] {
	case "xid":
		if len(f) != 3 {
			return Action{}, false, fmt.Errorf("%q: want xid <gpu> <code>", line)
		}
		n, err := strconv.Atoi(f[2])
		if err != nil || n <= 0 {
			return Action{}, false, fmt.Errorf("%q: xid code %q is not a positive integer", line, f[2])
		}
		a.Kind, a.XID = ActXID, n
	case "lost", "recover":
		if len(f) != 2 {
			return Action{}, false, fmt.Errorf("%q: want %s <gpu>", line, f[0])
		}
		a.Kind = ActLost
		if f[0] == "recover" {
			a.Kind = ActRecover
		}
	case "stats":
		a.Kind = ActStats
		for _, kv := range f[2:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return Action{}, false, fmt.Errorf("%q: %q is not key=value", line, kv)
			}
			if k == "power_w" {
				p, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return Action{}, false, fmt.Errorf("%q: power_w %q is not a number", line, v)
				}
				a.Stats.PowerW = &p
				continue
			}
			n, err := strconv.Atoi(v)
			if err != nil {
				return Action{}, false, fmt.Errorf("%q: %s %q is not an integer", line, k, v)
			}
			switch k {
			case "utilization":
				a.Stats.Utilization = &n
			case "memory_utilization":
				a.Stats.MemoryUtil = &n
			case "memory_used_mib":
				a.Stats.MemoryUsedMiB = &n
			case "temperature_c":
				a.Stats.TemperatureC = &n
			case "ecc_corrected":
				a.Stats.ECCCorrected = &n
			case "ecc_uncorrected":
				a.Stats.ECCUncorrected = &n
			default:
				return Action{}, false, fmt.Errorf("%q: unknown stat %q", line, k)
			}
		}
		if err := a.Stats.validate(); err != nil {
			return Action{}, false, fmt.Errorf("%q: %w", line, err)
		}
	default:
		return Action{}, false, fmt.Errorf("%q: unknown verb %q (want xid, lost, recover or stats)", line, f[0])
	}
	return a, true, nil
}

// readControl applies the complete lines appended to the control file
// since the last call; b.mu is held.
func (b *Backend) readControl(now time.Time) {
	if b.topo.ControlFile == "" {
		return
	}
	f, err := os.Open(b.topo.ControlFile)
	if err != nil {
		if !os.IsNotExist(err) {
			b.logger.Warn("cannot read control file", "path", b.topo.ControlFile, "error", err)
		}
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return
	}
	if st.Size() < b.offset {
		b.offset, b.lineNo = 0, 0
	}
	if _, err := f.Seek(b.offset, 0); err != nil {
		return
	}
	data, err := io.ReadAll(f)
	if err != nil {
		b.logger.Warn("cannot read control file", "path", b.topo.ControlFile, "error", err)
		return
	}
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return
		}
		line := string(data[:i])
		data = data[i+1:]
		b.offset += int64(i + 1)
		b.lineNo++
		a, ok, err := b.topo.ParseControlLine(line)
		if err != nil {
			b.logger.Error("bad control line, skipped", "path", b.topo.ControlFile, "line", b.lineNo, "error", err)
			continue
		}
		if ok {
			b.apply(a, now)
		}
	}
}
