package nomad

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// A job's own distinct_hosts and simple node constraints reach the model
// from an event line (through slimBatch), at the level Nomad applies them:
// job-level distinct_hosts to the job, group-level to the group; job, group
// and task constraints to every node of the group. What the scheduler
// cannot check (regexp, version, interpolated right sides, its own pin) is
// left out.
func TestTranslateJobConstraints(t *testing.T) {
	line := []byte(`{"Index":7,"Events":[{"Topic":"Job","Type":"JobRegistered","Key":"train","Namespace":"default","Index":7,"Payload":{"Job":{
"ID":"train","Namespace":"default","Name":"train","Type":"batch","NodePool":"impact-queue","Status":"pending","Priority":50,
"Constraints":[{"LTarget":"","RTarget":"true","Operand":"distinct_hosts"},{"LTarget":"${attr.cpu.arch}","RTarget":"amd64","Operand":"="}],
"TaskGroups":[
 {"Name":"workers","Count":2,"Constraints":[
   {"LTarget":"","RTarget":"","Operand":"distinct_hosts"},
   {"LTarget":"${node.class}","RTarget":"h100","Operand":"=="},
   {"LTarget":"${meta.rack}","RTarget":"r9","Operand":"not"},
   {"LTarget":"${attr.kernel.version}","RTarget":"5.0","Operand":"version"},
   {"LTarget":"${meta.zone}","RTarget":"${node.datacenter}","Operand":"="},
   {"LTarget":"${node.unique.id}","RTarget":"a,b","Operand":"set_contains_any"}],
  "Tasks":[{"Name":"t","Constraints":[{"LTarget":"${meta.ib}","RTarget":"","Operand":"is_set"}],"Resources":{"Devices":[{"Name":"nvidia/gpu","Count":4}]}}]},
 {"Name":"ps","Count":1,"Constraints":[{"LTarget":"","RTarget":"false","Operand":"distinct_hosts"},{"LTarget":"${node.unique.id}","RTarget":"true","Operand":"distinct_hosts"}],
  "Tasks":[{"Name":"t","Resources":{"Devices":[{"Name":"nvidia/gpu","Count":1}]}}]}
]}}}]}`)
	var b wireBatch
	if err := decodeBatch(line, &b, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := slimBatch(nil, line); !ok {
		t.Fatal("slimBatch gave up on the line: the test would not cover it")
	}
	j := translateJob(b.Events[0].Payload.Job, "default/train", 0, false, translateConfig{parkingPool: "impact-queue"})
	if !j.DistinctHosts {
		t.Fatal("job-level distinct_hosts lost")
	}
	arch := cluster.Constraint{Target: "${attr.cpu.arch}", Operand: "=", Value: "amd64"}
	want := [][]cluster.Constraint{
		{arch,
			{Target: "${node.class}", Operand: "=", Value: "h100"},
			{Target: "${meta.rack}", Operand: "!=", Value: "r9"},
			{Target: "${meta.ib}", Operand: "is_set"}},
		{arch},
	}
	for i, g := range j.Groups {
		if !reflect.DeepEqual(g.Constraints, want[i]) {
			t.Fatalf("group %s constraints %+v, want %+v", g.Name, g.Constraints, want[i])
		}
	}
	if !j.Groups[0].DistinctHosts || j.Groups[1].DistinctHosts {
		t.Fatalf("group distinct_hosts: workers %v (want true), ps %v (want false: the user's says false, the other is an admission's own)", j.Groups[0].DistinctHosts, j.Groups[1].DistinctHosts)
	}
}

// The node facts constraints test reach the model from a node event.
func TestTranslateNodeFacts(t *testing.T) {
	line := []byte(`{"Index":3,"Events":[{"Topic":"Node","Type":"NodeRegistration","Key":"n1","Index":3,"Payload":{"Node":{
"ID":"n1","Name":"gpu-1","NodePool":"gpu","Datacenter":"dc2","Status":"ready","SchedulingEligibility":"eligible",
"NodeClass":"h100","Meta":{"rack":"r1"},"Attributes":{"cpu.arch":"amd64","kernel.name":"linux"},"Drivers":{"exec":{"Detected":true}}}}}]}`)
	var b wireBatch
	if err := decodeBatch(line, &b, nil); err != nil {
		t.Fatal(err)
	}
	n, err := translateNode(b.Events[0].Payload.Node)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []cluster.Constraint{
		{Target: "${node.class}", Operand: "=", Value: "h100"},
		{Target: "${node.datacenter}", Operand: "=", Value: "dc2"},
		{Target: "${attr.cpu.arch}", Operand: "=", Value: "amd64"},
		{Target: "${meta.rack}", Operand: "=", Value: "r1"},
		{Target: "${attr.gpu.count}", Operand: "is_not_set"},
		{Target: "${meta.zone}", Operand: "!=", Value: "z1"},
	} {
		if !n.Satisfies(c) {
			t.Errorf("node %+v does not satisfy %+v", n, c)
		}
	}
	if n.Satisfies(cluster.Constraint{Target: "${node.class}", Operand: "!=", Value: "h100"}) ||
		n.Satisfies(cluster.Constraint{Target: "${meta.zone}", Operand: "=", Value: ""}) {
		t.Error("node satisfies a constraint it fails")
	}
}

// On a node read from a real Nomad 2.0.6 agent (the recorded GET
// /v1/node/:id), and on the node events of its recorded stream, the facts
// constraints test arrive under the names the wire structs use.
func TestRealNodeFacts(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "internal", "nomadfake", "testdata", "node.json"))
	if err != nil {
		t.Fatal(err)
	}
	var wn wireNode
	if err := json.Unmarshal(b, &wn); err != nil {
		t.Fatal(err)
	}
	n, err := translateNode(&wn)
	if err != nil {
		t.Fatal(err)
	}
	if n.Attributes["cpu.arch"] == "" || n.Datacenter == "" {
		t.Fatalf("node %s: attributes %d, datacenter %q", n.ID, len(n.Attributes), n.Datacenter)
	}
	if !n.Satisfies(cluster.Constraint{Target: "${attr.cpu.arch}", Operand: "=", Value: n.Attributes["cpu.arch"]}) {
		t.Fatal("node fails a constraint on its own architecture")
	}
	f, err := os.Open(filepath.Join("..", "internal", "nomadfake", "testdata", "events.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	nodes := 0
	for sc.Scan() {
		var batch wireBatch
		if err := decodeBatch(sc.Bytes(), &batch, nil); err != nil {
			t.Fatal(err)
		}
		for _, ev := range batch.Events {
			if ev.Payload.Node != nil {
				nodes++
				if len(ev.Payload.Node.Attributes) == 0 {
					t.Fatalf("node event %d without attributes", ev.Index)
				}
			}
		}
	}
	if nodes == 0 {
		t.Fatal("no node event in the recording")
	}
}

// On a real Nomad agent: a parked job's distinct_hosts and node
// constraints, and the node facts they test, reach the watcher's model,
// and the real node satisfies the constraints it should.
func TestRealNomadJobConstraints(t *testing.T) {
	bin, err := exec.LookPath("nomad")
	if err != nil {
		t.Skip("no nomad binary on PATH")
	}
	addr := startDevAgent(t, bin)
	c, err := NewClient(Config{Address: addr}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.EnsureNodePool(ctx, parking, "parking"); err != nil {
		t.Fatal(err)
	}
	w := NewWatcher(c, WatcherConfig{ParkingPool: parking}, testLogger(t))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = w.Run(wctx) }()
	<-w.Ready()
	var node *cluster.Node
	for deadline := time.Now().Add(60 * time.Second); node == nil; {
		if ns := w.Snapshot().Nodes(); len(ns) == 1 && ns[0].Attributes["cpu.arch"] != "" {
			node = ns[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node with attributes never appeared in the model (stats %+v)", w.Stats())
		}
		time.Sleep(100 * time.Millisecond)
	}

	job := scenarioJob("constrained")
	job.Constraints = []*api.Constraint{api.NewConstraint("", "distinct_hosts", "true")}
	job.TaskGroups[0].Constraints = []*api.Constraint{
		api.NewConstraint("${attr.cpu.arch}", "=", node.Attributes["cpu.arch"]),
		api.NewConstraint("${node.datacenter}", "!=", "elsewhere"),
		api.NewConstraint("${attr.kernel.name}", "regexp", "^lin"),
	}
	if _, _, err := c.api.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	key := cluster.JobKey("default", "constrained")
	var j *cluster.Job
	for deadline := time.Now().Add(20 * time.Second); j == nil || j.State != cluster.JobQueued; {
		j, _ = w.Snapshot().Job(key)
		if time.Now().After(deadline) {
			t.Fatal("job not queued in the model")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !j.DistinctHosts {
		t.Error("job-level distinct_hosts lost")
	}
	want := []cluster.Constraint{
		{Target: "${attr.cpu.arch}", Operand: "=", Value: node.Attributes["cpu.arch"]},
		{Target: "${node.datacenter}", Operand: "!=", Value: "elsewhere"},
	}
	if !reflect.DeepEqual(j.Groups[0].Constraints, want) {
		t.Fatalf("group constraints in the model %+v, want %+v (regexp left to Nomad)", j.Groups[0].Constraints, want)
	}
	for _, cn := range want {
		if !node.Satisfies(cn) {
			t.Errorf("the real node (%s, dc %q) fails %+v", node.ID, node.Datacenter, cn)
		}
	}
}

// The node a real agent reported with impact-gpu's shipped defaults: every
// GPU carries its device group (one, by model), its island from the
// per-instance attributes, and the node its group_by.
func TestRealGPUNodeDeviceGroups(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "internal", "nomadfake", "testdata", "node-gpus.json"))
	if err != nil {
		t.Fatal(err)
	}
	var wn wireNode
	if err := json.Unmarshal(b, &wn); err != nil {
		t.Fatal(err)
	}
	n, err := translateNode(&wn)
	if err != nil {
		t.Fatal(err)
	}
	if n.GroupBy != "model" || len(n.GPUs) != 8 {
		t.Fatalf("group_by %q, %d GPUs", n.GroupBy, len(n.GPUs))
	}
	islands := map[int]int{}
	for _, g := range n.GPUs {
		if g.Group != "NVIDIA A100-SXM4-80GB" {
			t.Fatalf("GPU %s in group %q", g.ID, g.Group)
		}
		islands[g.Island]++
	}
	if islands[0] != 4 || islands[1] != 4 {
		t.Fatalf("islands %v, want 4 + 4", islands)
	}
}

// A task's device blocks reach the model with their counts, driver and
// the user's own ${device.ids} lists (either side, intersected); the
// admission's own pin is not the user's.
func TestTranslateDeviceBlocks(t *testing.T) {
	two, one := uint64(2), uint64(1)
	j := gpuJob("blocks", nil, [2]int{1, 1})
	j.TaskGroups[0].Tasks[0].Driver = "impact-exec"
	j.TaskGroups[0].Tasks[0].Resources.Devices = []*api.RequestedDevice{
		{Name: "nvidia/gpu", Count: &two, Constraints: []*api.Constraint{
			{LTarget: DeviceIDsTarget, Operand: "set_contains_any", RTarget: "a, b,c"},
			{LTarget: "${device.model}", Operand: "=", RTarget: "NVIDIA A100-SXM4-80GB"},
			ownDevicePin([]string{"x", "y"}),
		}},
		{Name: "xilinx/fpga", Count: &one},
		{Name: "nvidia/gpu/NVIDIA A100-SXM4-80GB", Count: &one},
	}
	b, _ := json.Marshal(j)
	var wj wireJob
	if err := json.Unmarshal(b, &wj); err != nil {
		t.Fatal(err)
	}
	cj := translateJob(&wj, "default/blocks", 0, false, translateConfig{parkingPool: parking})
	g := cj.Groups[0]
	if g.GPUs != 3 || len(g.Devices) != 2 {
		t.Fatalf("GPUs %d, devices %+v", g.GPUs, g.Devices)
	}
	d0, d1 := g.Devices[0], g.Devices[1]
	if d0.Task != "trainer" || d0.Index != 0 || d0.Count != 2 || d0.Driver != "impact-exec" || strings.Join(d0.IDs, ",") != "a,b,c" {
		t.Fatalf("block 0 %+v (want IDs a,b,c: the admission's own pin and the model constraint are not ID lists of the user's)", d0)
	}
	if d1.Index != 2 || d1.Name != "nvidia/gpu/NVIDIA A100-SXM4-80GB" || d1.IDs != nil {
		t.Fatalf("block 1 %+v", d1)
	}
	// Two lists of the user's intersect.
	if got := userDeviceIDs([]wireConstraint{
		{LTarget: DeviceIDsTarget, Operand: "set_contains_any", RTarget: "a,b,c"},
		{LTarget: DeviceIDsTarget, Operand: "set_contains_any", RTarget: "c,d"},
	}); strings.Join(got, ",") != "c" {
		t.Fatalf("intersection %v, want c", got)
	}
	if got := userDeviceIDs([]wireConstraint{
		{LTarget: DeviceIDsTarget, Operand: "set_contains_any", RTarget: "a"},
		{LTarget: DeviceIDsTarget, Operand: "set_contains_any", RTarget: "b"},
	}); got == nil || len(got) != 0 {
		t.Fatalf("disjoint lists give %#v, want an empty (not nil) list", got)
	}
}

// Issue 36: a job's meta problems are all in its SpecErr, the job's and
// every group's, each once (groups are parsed after a bad job meta too),
// and its Spec keeps the tier so that the policy can add an unknown one.
func TestTranslateJobReportsEveryMetaProblem(t *testing.T) {
	wj := wireJob{ID: "bad", Namespace: "default", NodePool: "impact-queue", Status: "pending",
		Meta: map[string]string{"impact_grace": "soon", "impact_tier": "urgnet"},
		TaskGroups: []wireGroup{
			{Name: "a", Count: 1, Meta: map[string]string{"impact_topology": "rack"}},
			{Name: "b", Count: -1, Meta: map[string]string{"impact_checkpoint_signal": "USR1"}},
		}}
	cj := translateJob(&wj, "default/bad", 0, false, translateConfig{parkingPool: "impact-queue"})
	if cj.SpecErr == nil {
		t.Fatal("want a SpecErr")
	}
	msg := cj.SpecErr.Error()
	for _, want := range []string{`job meta impact_grace = "soon"`, `group "a" meta impact_topology = "rack"`,
		`group "b" meta impact_checkpoint_signal = "USR1"`, `group "b": negative count -1`} {
		if strings.Count(msg, want) != 1 {
			t.Errorf("SpecErr %q should name %q once", msg, want)
		}
	}
	if cj.Spec.Tier != "urgnet" {
		t.Errorf("Spec.Tier = %q, want the tier as written, for the policy's check", cj.Spec.Tier)
	}
}

// A job parked after all its allocations ended reads dead until its
// registration's evaluation blocks: it is queued, not gone (before, it
// left the model for a cycle and lost its history). A dead job elsewhere
// whose run did not end badly leaves the model.
func TestTranslateDeadJobInParkingPoolIsQueued(t *testing.T) {
	tc := translateConfig{parkingPool: "impact-queue"}
	wj := wireJob{ID: "sweep", Namespace: "default", NodePool: "impact-queue", Status: "dead", SubmitTime: 7,
		TaskGroups: []wireGroup{{Name: "g", Count: 1}}}
	cj := translateJob(&wj, "default/sweep", 0, false, tc)
	if cj == nil || cj.State != cluster.JobQueued || cj.Dead || !cj.Submit.Equal(time.Unix(0, 7)) {
		t.Fatalf("parked dead job = %+v, want queued", cj)
	}
	wj.NodePool = "gpu"
	if cj := translateJob(&wj, "default/sweep", 0, false, tc); cj != nil {
		t.Errorf("dead job outside the parking pool = %+v, want it gone", cj)
	}
}

// The resync reads the jobs the mirror keeps: live ones, dead ones whose
// run ended badly, and dead ones in the parking pool (translateJob queues
// them), but no stopped job and no completed one elsewhere.
func TestReadOnResync(t *testing.T) {
	for _, tc := range []struct {
		name       string
		stop       bool
		status     string
		pool       string
		endedBadly bool
		want       bool
	}{
		{"running", false, "running", "gpu", false, true},
		{"pending in the parking pool", false, "pending", "impact-queue", false, true},
		{"dead in the parking pool", false, "dead", "impact-queue", false, true},
		{"dead after a failed allocation", false, "dead", "gpu", true, true},
		{"completed", false, "dead", "gpu", false, false},
		{"stopped in the parking pool", true, "dead", "impact-queue", false, false},
		{"stopped while running", true, "running", "gpu", false, false},
	} {
		if got := readOnResync(tc.stop, tc.status, tc.pool, "impact-queue", tc.endedBadly); got != tc.want {
			t.Errorf("%s: read = %v, want %v", tc.name, got, tc.want)
		}
	}
}
