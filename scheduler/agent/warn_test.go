package agent

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// Issue 36: Nomad accepts a job with bad impact meta ("Job registration
// successful"), so the agent logs it: one warning per job version, naming
// every problem, not one per cycle, and again for a new version that is
// still bad.
func TestWarnInvalidOncePerJobVersion(t *testing.T) {
	var logs bytes.Buffer
	c := &cycler{log: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn}), warned: map[string]uint64{}}
	pol := testPolicy(t)
	store := cluster.NewStore()
	put := func(name string, meta map[string]string, index uint64) {
		spec, err := jobspec.ParseMeta(meta, nil)
		j := &cluster.Job{ID: cluster.JobKey("default", name), Namespace: "default", Name: name, Priority: 50,
			State: cluster.JobQueued, Spec: spec, SpecErr: err, ModifyIndex: index,
			Groups: []cluster.TaskGroup{{Name: "g", Count: 1, GPUs: 1, Spec: spec}}}
		if err := store.UpsertJob(j); err != nil {
			t.Fatal(err)
		}
	}
	cycle := func() string {
		logs.Reset()
		snap := store.Snapshot()
		c.warnInvalid(snap, buildView(snap, nil, nil, time.Now(), true, pol))
		return logs.String()
	}
	put("bad", map[string]string{"impact_grace": "soon", "impact_tier": "urgnet"}, 10)
	put("tier", map[string]string{"impact_tier": "gold"}, 11)
	put("good", map[string]string{"impact_tier": "high"}, 12)

	out := cycle()
	if n := strings.Count(out, "job cannot be scheduled as written"); n != 2 {
		t.Fatalf("first cycle logged %d warnings, want 2 (bad, tier):\n%s", n, out)
	}
	for _, want := range []string{`job=default/bad`, `impact_grace = \"soon\"`, `impact_tier = \"urgnet\": unknown tier`,
		`job=default/tier`, `impact_tier = \"gold\"`, `job_modify_index=10`} {
		if !strings.Contains(out, want) {
			t.Errorf("warnings do not contain %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "default/good") {
		t.Errorf("a valid job was warned about:\n%s", out)
	}
	if out := cycle(); out != "" {
		t.Fatalf("the same versions were warned about again:\n%s", out)
	}
	// A new version, still bad: warned once more; the other is not.
	put("bad", map[string]string{"impact_grace": "later", "impact_tier": "urgnet"}, 20)
	out = cycle()
	if strings.Count(out, "job cannot be scheduled") != 1 || !strings.Contains(out, "job_modify_index=20") || !strings.Contains(out, `\"later\"`) {
		t.Fatalf("new version: want one warning for default/bad at index 20:\n%s", out)
	}
	// Fixed, or gone: forgotten.
	put("bad", map[string]string{"impact_tier": "high"}, 30)
	store.DeleteJob(cluster.JobKey("default", "tier"))
	if out := cycle(); out != "" || len(c.warned) != 0 {
		t.Fatalf("fixed and deleted jobs: logged %q, still remembered %v", out, c.warned)
	}
}
