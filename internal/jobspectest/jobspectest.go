// Package jobspectest holds the table of the jobspec contract's inputs
// (contract.jsonl, beside this file) that the scheduler's
// and the driver's tests each run through their own entry point, so that
// both are held to one answer per input: the same meaning or the same
// error. Only tests import it.
package jobspectest

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
)

// Case is one input of the table: a single meta key and its value, and
// what it must mean (Want, in Meaning's spelling) or the error it must be
// (Err, the whole message of the job's parse).
type Case struct {
	Key   string `json:"key"`
	Value string `json:"value"`
	Want  string `json:"want,omitempty"`
	Err   string `json:"err,omitempty"`
}

// Valid reports whether the input must parse.
func (c Case) Valid() bool { return c.Err == "" }

// Cases reads the table; each row is checked to say exactly one of Want
// and Err (Want may be empty only for a key whose meaning is empty).
func Cases(t testing.TB) []Case {
	t.Helper()
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("jobspectest: cannot locate the table")
	}
	path := filepath.Join(filepath.Dir(self), "contract.jsonl")
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("jobspectest: %v", err)
	}
	defer f.Close()
	var out []Case
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		var c Case
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("%s:%d: %v", path, line, err)
		}
		if c.Err != "" && c.Want != "" {
			t.Fatalf("%s:%d: a row says a meaning or an error, not both", path, line)
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("jobspectest: reading %s: %v", path, err)
	}
	if len(out) == 0 {
		t.Fatalf("jobspectest: %s is empty", path)
	}
	return out
}

// Meta is the job meta of a case: its one key.
func (c Case) Meta() map[string]string { return map[string]string{c.Key: c.Value} }

// TaskEnv is the case as Nomad puts it in a task's environment.
func (c Case) TaskEnv() map[string]string { return map[string]string{"NOMAD_META_" + c.Key: c.Value} }

// Meaning spells what a parsed spec says for key, in the table's terms:
// names as stored, durations in time.Duration's String, the deadline in
// RFC 3339 UTC, numbers in decimal, impact_on_failure as "fail" or
// "requeue", impact_idle as "ignore" or "".
func Meaning(s jobspec.Spec, key string) string {
	switch key {
	case jobspec.MetaTier:
		return s.Tier
	case jobspec.MetaProject:
		return s.Project
	case jobspec.MetaDeadline:
		return s.Deadline.UTC().Format(time.RFC3339)
	case jobspec.MetaPreemptible:
		if !s.PreemptibleSet {
			return "unset"
		}
		return strconv.FormatBool(s.Preemptible)
	case jobspec.MetaGrace:
		return s.Grace.String()
	case jobspec.MetaCheckpointSignal:
		return s.CheckpointSignal
	case jobspec.MetaMinRuntime:
		return s.MinRuntime.String()
	case jobspec.MetaWalltime:
		return s.Walltime.String()
	case jobspec.MetaTopology:
		return string(s.Topology)
	case jobspec.MetaPool:
		return s.Pool
	case jobspec.MetaCheckpointInterval:
		return s.CheckpointInterval.String()
	case jobspec.MetaProgress:
		return s.Progress.String()
	case jobspec.MetaRequeueExitCode:
		return strconv.Itoa(s.RequeueCode())
	case jobspec.MetaOnFailure:
		if s.FailOnLoss {
			return "fail"
		}
		return "requeue"
	case jobspec.MetaMaxFailures:
		return strconv.Itoa(s.MaxFailedRuns())
	case jobspec.MetaIdle:
		if s.IdleIgnore {
			return "ignore"
		}
		return ""
	}
	return "?" + key
}
