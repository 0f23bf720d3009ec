package executor

import (
	"bufio"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Events returns the complete event lines after byte offset off, and the
// offset to continue from.
func (p *Process) Events(off int64) ([]Event, int64, error) {
	f, err := os.Open(filepath.Join(p.state.Dir, EventsFile))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, off, nil
		}
		return nil, off, err
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, off, err
	}
	var out []Event
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			break // partial line: read it next time
		}
		off += int64(len(line))
		var ev Event
		if jerr := jsonUnmarshal(line, &ev); jerr != nil {
			p.logger.Warn("skipping malformed event line", "error", jerr)
			continue
		}
		out = append(out, ev)
	}
	return out, off, nil
}

// EventOffsetFile records how far the plugin has forwarded events, so a
// new plugin process does not send them again.
const EventOffsetFile = "events.offset"

// EventOffset returns the saved forwarding offset (0 if none).
func (p *Process) EventOffset() int64 {
	b, err := os.ReadFile(filepath.Join(p.state.Dir, EventOffsetFile))
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// SaveEventOffset records the forwarding offset.
func (p *Process) SaveEventOffset(off int64) error {
	return writeJSONAtomic(p.state.Dir, EventOffsetFile, off)
}
