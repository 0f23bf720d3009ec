package engine

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// t0 is the fixed instant scenarios start at.
var t0 = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

type nodeOpt func(*cluster.Node)

func inPool(p string) nodeOpt { return func(n *cluster.Node) { n.Pool = p } }

func label(k, v string) nodeOpt { return func(n *cluster.Node) { n.Labels[k] = v } }

func unhealthy(idx ...int) nodeOpt {
	return func(n *cluster.Node) {
		for _, i := range idx {
			n.GPUs[i].Healthy = false
		}
	}
}

func ineligible() nodeOpt { return func(n *cluster.Node) { n.Eligible = false } }

// mkNode builds a node with gpus GPUs split evenly into islands NVLink
// islands; GPU IDs are "<id>-g<i>".
func mkNode(id string, gpus, islands int, opts ...nodeOpt) *cluster.Node {
	n := &cluster.Node{ID: id, Name: id, Pool: "gpu", Labels: map[string]string{}, Eligible: true, Ready: true}
	per := max(1, gpus/max(1, islands))
	for i := range gpus {
		n.GPUs = append(n.GPUs, cluster.GPU{ID: fmt.Sprintf("%s-g%d", id, i), Index: i, Island: i / per, NUMA: i / per, Model: "H100", Healthy: true})
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

type jobOpt func(*jobDef)

type jobDef struct {
	job    *cluster.Job
	meta   map[string]string
	groups []groupDef
}

type groupDef struct {
	name        string
	count, gpus int
	meta        map[string]string
}

func meta(kv ...string) jobOpt {
	return func(d *jobDef) {
		for i := 0; i+1 < len(kv); i += 2 {
			d.meta[kv[i]] = kv[i+1]
		}
	}
}

func group(name string, count, gpus int, kv ...string) jobOpt {
	return func(d *jobDef) {
		g := groupDef{name: name, count: count, gpus: gpus}
		if len(kv) > 0 {
			g.meta = map[string]string{}
			for i := 0; i+1 < len(kv); i += 2 {
				g.meta[kv[i]] = kv[i+1]
			}
		}
		d.groups = append(d.groups, g)
	}
}

func submitted(at time.Time) jobOpt { return func(d *jobDef) { d.job.Submit = at } }

func running() jobOpt { return func(d *jobDef) { d.job.State = cluster.JobRunning } }

// mkJob builds a queued job the way the adapter does: meta parsed with
// jobspec.ParseMeta, errors kept in SpecErr. Without groups it gets one
// group "main" of 1 x 1 GPU.
func mkJob(id string, opts ...jobOpt) *cluster.Job {
	d := &jobDef{job: &cluster.Job{ID: id, Namespace: "default", Name: id, Priority: 50, Submit: t0.Add(-time.Hour)}, meta: map[string]string{}}
	for _, o := range opts {
		o(d)
	}
	if len(d.groups) == 0 {
		d.groups = []groupDef{{name: "main", count: 1, gpus: 1}}
	}
	spec, err := jobspec.ParseMeta(d.meta, nil)
	d.job.Spec, d.job.SpecErr = spec, err
	for _, g := range d.groups {
		gs, gerr := jobspec.ParseGroupMeta(d.meta, g.meta, g.name)
		if gerr != nil && d.job.SpecErr == nil {
			d.job.SpecErr = gerr
		}
		d.job.Groups = append(d.job.Groups, cluster.TaskGroup{Name: g.name, Count: g.count, GPUs: g.gpus, Spec: gs})
	}
	return d.job
}

// alloc builds a running allocation of job on node holding GPU indexes.
func alloc(id, jobID, nodeID string, start time.Time, gpuIdx ...int) *cluster.Alloc {
	a := &cluster.Alloc{ID: id, JobID: jobID, Group: "main", NodeID: nodeID, Start: start}
	for _, i := range gpuIdx {
		a.GPUs = append(a.GPUs, fmt.Sprintf("%s-g%d", nodeID, i))
	}
	return a
}

// tb is what helpers need of testing.TB and *rapid.T alike.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

// mustDo fails the test on a store error (setting up a world).
func mustDo(t tb, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%v", err)
	}
}

func mustSnap(t tb, nodes []*cluster.Node, jobs []*cluster.Job, allocs []*cluster.Alloc) *cluster.Snapshot {
	t.Helper()
	s, err := cluster.Build(nodes, jobs, allocs)
	if err != nil {
		t.Fatalf("build snapshot: %v", err)
	}
	return s
}

func mustEngine(t tb, pol *policy.Policy, opts ...Option) *Engine {
	t.Helper()
	if pol == nil {
		pol = policy.Default()
	}
	e, err := New(pol, opts...)
	if err != nil {
		t.Fatalf("new engine: %v", err)
	}
	return e
}

// headroomPolicy is the default policy with a headroom of gpus GPUs for
// the critical tier in pool "gpu", with durations: attribute name and
// value pairs, each written when its value is not empty.
func headroomPolicy(t tb, gpus int, durations ...string) *policy.Policy {
	t.Helper()
	src := fmt.Sprintf("headroom \"gpu\" {\n  tiers = [\"critical\"]\n  gpus  = %d\n", gpus)
	for i := 0; i+1 < len(durations); i += 2 {
		if durations[i+1] != "" {
			src += fmt.Sprintf("  %s = %q\n", durations[i], durations[i+1])
		}
	}
	return mustPolicy(t, src+"}\n")
}

func mustPolicy(t tb, src string) *policy.Policy {
	t.Helper()
	p, err := policy.LoadBytes([]byte(src), "test.hcl")
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	return p
}

func admission(p *Plan, jobID string) *Admission {
	for i := range p.Admissions {
		if p.Admissions[i].JobID == jobID {
			return &p.Admissions[i]
		}
	}
	return nil
}

func admittedIDs(p *Plan) []string {
	var out []string
	for _, a := range p.Admissions {
		out = append(out, a.JobID)
	}
	sort.Strings(out)
	return out
}

func preemptedIDs(p *Plan) []string {
	var out []string
	for _, v := range p.Preemptions {
		out = append(out, v.JobID)
	}
	sort.Strings(out)
	return out
}

// nodesOf lists the distinct nodes of an admission, sorted.
func nodesOf(a *Admission) []string {
	seen := map[string]bool{}
	var out []string
	for _, g := range a.Groups {
		for _, al := range g.Allocs {
			if !seen[al.NodeID] {
				seen[al.NodeID] = true
				out = append(out, al.NodeID)
			}
		}
	}
	sort.Strings(out)
	return out
}

func join(s []string) string { return strings.Join(s, ",") }

// decideValid runs one cycle of e on store's snapshot at at, failing the
// test on an invalid plan; it returns the plan and the snapshot it was
// decided on.
func decideValid(t tb, e *Engine, pol *policy.Policy, store *cluster.Store, at time.Time) (*Plan, *cluster.Snapshot) {
	t.Helper()
	snap := store.Snapshot()
	p := e.Decide(snap, at)
	if err := ValidatePlan(pol, snap, p); err != nil {
		t.Fatalf("invalid plan at %s: %v", at, err)
	}
	return p, snap
}
