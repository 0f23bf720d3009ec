package nomad

import (
	"bytes"
	"strings"
)

// Nomad's event payloads are whole objects: an allocation carries its
// entire job, a node every fingerprinted attribute and driver. The watcher
// reads about a third of those bytes (wire.go), but encoding/json scans
// every byte twice (validation, then decoding, skipping what it does not
// want). slimBatch first copies out, with a plain byte scanner, only the
// members the wire structs decode; json then works on that. Together this
// costs about half of decoding the line as it is, which matters at tens of
// thousands of events per second on a busy machine.
//
// The scanner finds where values end; it does not validate what it drops
// (json validates what is kept). Anything it does not expect makes it
// give up, and the caller decodes the line as it is.

// keep says which members of a JSON object to copy: a key mapped to nil
// is copied whole, a key mapped to a keep is filtered with it (each
// element when the value is an array), and the key "*" stands for every
// key (maps such as TaskStates). Keys not listed are dropped.
type keep map[string]keep

// batchKeep lists what wireBatch decodes; TestSlimKeepCoversWireStructs
// checks it against the structs.
var batchKeep = keep{
	"Index": nil,
	"Events": keep{
		"Topic": nil, "Type": nil, "Key": nil, "Namespace": nil, "Index": nil,
		"Payload": keep{
			"Deleted": nil,
			"Job": keep{
				"ID": nil, "Namespace": nil, "Name": nil, "Type": nil, "NodePool": nil, "Status": nil,
				"Priority": nil, "Stop": nil, "SubmitTime": nil, "Version": nil, "CreateIndex": nil,
				"ModifyIndex": nil, "JobModifyIndex": nil, "Meta": nil, "Constraints": nil,
				"TaskGroups": keep{
					"Name": nil, "Count": nil, "Meta": nil, "Constraints": nil,
					"Tasks": keep{"Name": nil, "Driver": nil, "Constraints": nil, "Resources": keep{"Devices": nil}},
				},
			},
			"Allocation": keep{
				"ID": nil, "Name": nil, "Namespace": nil, "JobID": nil, "TaskGroup": nil, "NodeID": nil,
				"DesiredStatus": nil, "ClientStatus": nil, "CreateIndex": nil, "ModifyIndex": nil,
				"CreateTime": nil, "ModifyTime": nil, "JobVersion": nil, "PreviousAllocation": nil, "NextAllocation": nil,
				"AllocatedResources": keep{"Tasks": keep{"*": keep{"Devices": nil}}},
				"TaskStates": keep{"*": keep{"State": nil, "Failed": nil, "StartedAt": nil, "FinishedAt": nil,
					"Events": keep{"Type": nil, "Details": nil}}},
			},
			"Node": keep{
				"ID": nil, "Name": nil, "NodePool": nil, "Datacenter": nil, "Status": nil,
				"SchedulingEligibility": nil, "Drain": nil, "NodeClass": nil, "Meta": nil, "Attributes": nil, "ModifyIndex": nil,
				"NodeResources": keep{"Devices": nil},
			},
		},
	},
}

// filter is a compiled keep: the members to copy (whole when the filter
// is nil), the filter for any other key ("*"), and the lower-cased member
// names, because encoding/json matches keys case-insensitively: slimBatch
// keeps keys by exact match, so a dropped key that folds to a kept one
// (never seen from Nomad) makes it give up rather than decode differently.
type filter struct {
	members map[string]*filter
	any     *filter
	hasAny  bool
	folded  map[string]bool
}

func compile(k keep) *filter {
	if k == nil {
		return nil
	}
	f := &filter{members: map[string]*filter{}, folded: map[string]bool{}}
	for name, sub := range k {
		if name == "*" {
			f.any, f.hasAny = compile(sub), true
			continue
		}
		f.members[name] = compile(sub)
		f.folded[strings.ToLower(name)] = true
	}
	return f
}

var batchFilter = compile(batchKeep)

// lookup says whether to keep the member named name (raw, as between its
// quotes) and with which filter; ok is false when the key cannot be
// judged safely (escapes, non-ASCII, or it folds to a kept name).
func (f *filter) lookup(name []byte) (sub *filter, want, ok bool) {
	if sub, want := f.members[string(name)]; want {
		return sub, true, true
	}
	if f.hasAny {
		return f.any, true, true
	}
	var buf [64]byte
	if len(name) > len(buf) {
		return nil, false, true // longer than any kept name
	}
	for i, c := range name {
		switch {
		case c == '\\' || c >= 0x80:
			return nil, false, false
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return nil, false, !f.folded[string(buf[:len(name)])]
}

// slimBatch appends to dst the line reduced to the members batchKeep
// lists. ok is false when the line is not a JSON object as expected.
func slimBatch(dst, line []byte) ([]byte, bool) {
	i := skipSpace(line, 0)
	if i >= len(line) || line[i] != '{' {
		return dst, false
	}
	dst, end, ok := slimValue(dst, line, i, batchFilter)
	if !ok || skipSpace(line, end) != len(line) {
		return dst, false
	}
	return dst, true
}

// slimValue copies the value at b[i] filtered by k (whole when k is nil)
// and returns the index after it.
func slimValue(dst, b []byte, i int, k *filter) ([]byte, int, bool) {
	if i >= len(b) {
		return dst, i, false
	}
	if k == nil {
		end, ok := skipValue(b, i)
		return append(dst, b[i:end]...), end, ok
	}
	switch b[i] {
	case '{':
		return slimObject(dst, b, i, k)
	case '[':
		return slimArray(dst, b, i, k)
	}
	end, ok := skipValue(b, i) // null, or a scalar where an object was expected
	return append(dst, b[i:end]...), end, ok
}

func slimObject(dst, b []byte, i int, k *filter) ([]byte, int, bool) {
	dst = append(dst, '{')
	first := true
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return append(dst, '}'), i + 1, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return dst, i, false
		}
		keyEnd, ok := skipString(b, i)
		if !ok {
			return dst, i, false
		}
		key := b[i:keyEnd]
		j := skipSpace(b, keyEnd)
		if j >= len(b) || b[j] != ':' {
			return dst, j, false
		}
		j = skipSpace(b, j+1)
		sub, want, safe := k.lookup(key[1 : len(key)-1])
		if !safe {
			return dst, j, false
		}
		var end int
		if want {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(append(dst, key...), ':')
			dst, end, ok = slimValue(dst, b, j, sub)
		} else {
			end, ok = skipValue(b, j)
		}
		if !ok {
			return dst, end, false
		}
		i = skipSpace(b, end)
		if i >= len(b) {
			return dst, i, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return append(dst, '}'), i + 1, true
		default:
			return dst, i, false
		}
	}
}

func slimArray(dst, b []byte, i int, k *filter) ([]byte, int, bool) {
	dst = append(dst, '[')
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return append(dst, ']'), i + 1, true
	}
	for n := 0; ; n++ {
		if n > 0 {
			dst = append(dst, ',')
		}
		var end int
		var ok bool
		dst, end, ok = slimValue(dst, b, i, k)
		if !ok {
			return dst, end, false
		}
		i = skipSpace(b, end)
		if i >= len(b) {
			return dst, i, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			return append(dst, ']'), i + 1, true
		default:
			return dst, i, false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
// It jumps from quote to quote (bytes.IndexByte is vectorised); a quote
// preceded by an odd number of backslashes is escaped.
func skipString(b []byte, i int) (int, bool) {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return len(b), false
		}
		q := j + k
		n := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1, true
		}
		j = q + 1
	}
}

// skipValue returns the index after the value starting at b[i]: a string,
// an object or array (strings inside are skipped whole, so brackets in
// them do not count), or a literal (up to the next delimiter).
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, ok := skipString(b, j)
				if !ok {
					return end, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return len(b), false
	case ',', ':', '}', ']':
		return i, false
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j, j > i
		}
		j++
	}
	return j, j > i
}
