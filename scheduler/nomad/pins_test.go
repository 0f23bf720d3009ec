package nomad

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/hashicorp/nomad/api"
	"pgregory.net/rapid"

	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// Admitting and parking again must give back the user's constraints
// untouched: their own distinct_hosts (empty LTarget) stays, ours goes.
func TestWithoutPinsKeepsUserConstraints(t *testing.T) {
	user := []*api.Constraint{
		{Operand: "distinct_hosts", RTarget: "true"},
		{LTarget: "${attr.cpu.arch}", RTarget: "amd64", Operand: "="},
	}
	admitted := append(append([]*api.Constraint{}, user...),
		&api.Constraint{LTarget: PinTarget, RTarget: "n1,n2", Operand: "set_contains_any"},
		ownDistinctHosts(),
	)
	got := withoutPins(admitted)
	if len(got) != len(user) {
		t.Fatalf("withoutPins kept %d constraints, want the user's %d: %+v", len(got), len(user), got)
	}
	for i := range user {
		if *got[i] != *user[i] {
			t.Errorf("constraint %d = %+v, want the user's %+v", i, *got[i], *user[i])
		}
	}
}

// pinTestJob is a job of one group whose task has two GPU device blocks
// (the user's own ${device.ids} constraint and island affinity on the
// first) and a non-GPU block, plus a second task with one GPU block.
func pinTestJob() *api.Job {
	j := gpuJob("pins", nil, [2]int{2, 3})
	tg := j.TaskGroups[0]
	w := int8(50)
	two, one, fpga := uint64(2), uint64(1), uint64(1)
	tg.Tasks[0].Resources.Devices = []*api.RequestedDevice{
		{Name: "nvidia/gpu", Count: &two,
			Constraints: []*api.Constraint{{LTarget: DeviceIDsTarget, RTarget: "n1-g0,n1-g1,n1-g2,n2-g0,n2-g1", Operand: "set_contains_any"}},
			Affinities:  []*api.Affinity{{LTarget: "${device.attr.island}", RTarget: "0", Operand: "=", Weight: &w}}},
		{Name: "xilinx/fpga", Count: &fpga},
		{Name: "nvidia/gpu", Count: &one},
	}
	side := api.NewTask("side", "impact-exec")
	side.Resources = &api.Resources{Devices: []*api.RequestedDevice{{Name: "gpu", Count: &one}}}
	tg.AddTask(side)
	return j
}

func pinTestAdmission() engine.Admission {
	blocks := func(node string, a, b, c []int) []engine.BlockPlacement {
		ids := func(is []int) []string {
			var out []string
			for _, i := range is {
				out = append(out, fmt.Sprintf("%s-g%d", node, i))
			}
			return out
		}
		return []engine.BlockPlacement{{Task: "trainer", Index: 0, GPUs: ids(a)}, {Task: "trainer", Index: 2, GPUs: ids(b)}, {Task: "side", Index: 0, GPUs: ids(c)}}
	}
	return engine.Admission{JobID: "default/pins", Pool: "gpu", Groups: []engine.GroupPlacement{{Group: "g0", Allocs: []engine.AllocPlacement{
		{NodeID: "n1", GPUs: []string{"n1-g0", "n1-g1", "n1-g4", "n1-g5"}, Blocks: blocks("n1", []int{0, 1}, []int{4}, []int{5})},
		{NodeID: "n2", GPUs: []string{"n2-g0", "n2-g1", "n2-g6", "n2-g7"}, Blocks: blocks("n2", []int{0, 1}, []int{6}, []int{7})},
	}}}}
}

// Admission pins every GPU device block to the union of the plan's GPUs
// for it (and nothing else: the FPGA block is left alone); parking again
// removes exactly what it added, leaving the user's own device constraint
// and affinity as they were.
func TestPinDevicesAndUnpin(t *testing.T) {
	x := &Executor{cfg: ExecutorConfig{ParkingPool: parking}}
	orig := pinTestJob()
	job := pinTestJob()
	if err := x.pinJob(job, pinTestAdmission()); err != nil {
		t.Fatal(err)
	}
	devs := job.TaskGroups[0].Tasks[0].Resources.Devices
	side := job.TaskGroups[0].Tasks[1].Resources.Devices[0]
	want := map[*api.RequestedDevice]string{
		devs[0]: "n1-g0,n1-g1,n2-g0,n2-g1", devs[2]: "n1-g4,n2-g6", side: "n1-g5,n2-g7",
	}
	for d, ids := range want {
		var own []*api.Constraint
		for _, c := range d.Constraints {
			if isOwnDevicePin(c.LTarget, c.Operand, c.RTarget) {
				own = append(own, c)
			}
		}
		if len(own) != 1 || own[0].LTarget != ids || own[0].RTarget != DeviceIDsTarget {
			t.Fatalf("block %s: own pins %+v, want one of %s", d.Name, own, ids)
		}
	}
	if len(devs[1].Constraints) != 0 {
		t.Fatalf("the FPGA block was pinned: %+v", devs[1].Constraints)
	}
	if len(devs[0].Constraints) != 2 || devs[0].Constraints[0].LTarget != DeviceIDsTarget {
		t.Fatalf("the user's device constraint is gone: %+v", devs[0].Constraints)
	}
	// Admitting twice (a re-admission after a rollback) does not stack pins.
	if err := x.pinJob(job, pinTestAdmission()); err != nil {
		t.Fatal(err)
	}
	if n := len(job.TaskGroups[0].Tasks[0].Resources.Devices[0].Constraints); n != 2 {
		t.Fatalf("%d constraints after a second admission, want 2", n)
	}
	x.unpin(job)
	job.NodePool = orig.NodePool
	if !reflect.DeepEqual(normalise(job), normalise(orig)) {
		t.Fatalf("unpinned job differs from the submitted one:\n got %s\nwant %s", mustJSON(t, job), mustJSON(t, orig))
	}
}

// normalise makes empty and nil constraint lists equal (unpin may leave
// an empty list where the user had none; Nomad reads both alike).
func normalise(j *api.Job) *api.Job {
	for _, tg := range j.TaskGroups {
		if len(tg.Constraints) == 0 {
			tg.Constraints = nil
		}
		for _, t := range tg.Tasks {
			if t.Resources == nil {
				continue
			}
			for _, d := range t.Resources.Devices {
				if len(d.Constraints) == 0 {
					d.Constraints = nil
				}
			}
		}
	}
	return j
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Property: for any job (random user constraints of every kind on groups
// and device blocks, including ${device.ids} ones) and any admission,
// parking again gives back exactly the user's job; and the model never
// reads an admission's own device pin as the user's restriction.
func TestPropertyReparkRemovesExactlyOurPins(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		genCons := func(label string, device bool) []*api.Constraint {
			var out []*api.Constraint
			for i := range rapid.IntRange(0, 3).Draw(rt, label) {
				c := &api.Constraint{Operand: rapid.SampledFrom([]string{"=", "set_contains_any", "distinct_hosts", "regexp"}).Draw(rt, "op")}
				switch rapid.IntRange(0, 3).Draw(rt, "target") {
				case 0:
					c.LTarget = PinTarget
				case 1:
					c.LTarget = DeviceIDsTarget
				case 2:
					c.LTarget = "${attr.kernel.name}"
				default:
					c.LTarget = ""
				}
				c.RTarget = fmt.Sprintf("v%d,n1-g%d", i, i)
				if c.LTarget == PinTarget && (c.Operand == "set_contains_any" || c.Operand == "distinct_hosts") {
					c.LTarget = "${node.class}" // that form is ours by definition
				}
				if device && c.Operand == "distinct_hosts" {
					c.Operand = "="
				}
				out = append(out, c)
			}
			return out
		}
		orig := pinTestJob()
		orig.TaskGroups[0].Constraints = genCons("group", false)
		for _, task := range orig.TaskGroups[0].Tasks {
			for _, d := range task.Resources.Devices {
				d.Constraints = genCons("device", true)
			}
		}
		b, _ := json.Marshal(orig)
		var job api.Job
		_ = json.Unmarshal(b, &job)
		adm := pinTestAdmission()
		x := &Executor{cfg: ExecutorConfig{ParkingPool: parking}}
		if rapid.Bool().Draw(rt, "no-split") {
			// Which of the three GPU blocks gets which GPUs is the
			// plan's to say: without a split the admission is refused.
			for i := range adm.Groups[0].Allocs {
				adm.Groups[0].Allocs[i].Blocks = nil
			}
			if err := x.pinJob(&job, adm); err == nil {
				rt.Fatal("pinned a plan that does not split its GPUs among the group's device blocks")
			}
			return
		}
		if err := x.pinJob(&job, adm); err != nil {
			rt.Fatal(err)
		}
		var wj wireJob
		bj, _ := json.Marshal(&job)
		if err := json.Unmarshal(bj, &wj); err != nil {
			rt.Fatal(err)
		}
		var wo wireJob
		bo, _ := json.Marshal(orig)
		_ = json.Unmarshal(bo, &wo)
		pinnedModel := translateJob(&wj, "default/pins", 0, false, translateConfig{parkingPool: parking})
		origModel := translateJob(&wo, "default/pins", 0, false, translateConfig{parkingPool: parking})
		if !reflect.DeepEqual(pinnedModel.Groups[0].Devices, origModel.Groups[0].Devices) {
			rt.Fatalf("the model reads the admission's pins as the user's: %+v vs %+v", pinnedModel.Groups[0].Devices, origModel.Groups[0].Devices)
		}
		x.unpin(&job)
		job.NodePool = orig.NodePool
		if !reflect.DeepEqual(normalise(&job), normalise(orig)) {
			rt.Fatalf("unpinned job differs:\n got %s\nwant %s", mustJSONr(&job), mustJSONr(orig))
		}
	})
}

func mustJSONr(v any) string { b, _ := json.Marshal(v); return string(b) }

// Which device block gets which GPUs is the plan's decision: the executor
// takes an unsplit plan only for a group of exactly one GPU block, and
// refuses one that leaves a block without GPUs or several blocks unsplit,
// rather than letting Nomad choose.
func TestPinDevicesTakesTheSplitFromThePlan(t *testing.T) {
	oneBlock := func() *api.Job { return gpuJob("one", nil, [2]int{1, 2}) }
	for _, tc := range []struct {
		name   string
		job    func() *api.Job
		allocs []engine.AllocPlacement
		pin    string // the one block's own pin; "" when refused
	}{
		{"one block, plan without blocks", oneBlock,
			[]engine.AllocPlacement{{NodeID: "n1", GPUs: []string{"n1-g3", "n1-g1"}}}, "n1-g1,n1-g3"},
		{"one block, plan gives it no GPUs", oneBlock,
			[]engine.AllocPlacement{{NodeID: "n1"}}, ""},
		{"three blocks, plan without blocks", pinTestJob,
			[]engine.AllocPlacement{{NodeID: "n1", GPUs: []string{"n1-g0", "n1-g1", "n1-g4", "n1-g5"}}}, ""},
		{"three blocks, one left without GPUs", pinTestJob,
			[]engine.AllocPlacement{{NodeID: "n1", GPUs: []string{"n1-g0", "n1-g1", "n1-g4"}, Blocks: []engine.BlockPlacement{
				{Task: "trainer", Index: 0, GPUs: []string{"n1-g0", "n1-g1"}}, {Task: "trainer", Index: 2, GPUs: []string{"n1-g4"}}}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := tc.job()
			x := &Executor{cfg: ExecutorConfig{ParkingPool: parking}}
			err := x.pinJob(job, engine.Admission{JobID: "default/" + *job.ID, Pool: "gpu",
				Groups: []engine.GroupPlacement{{Group: "g0", Allocs: tc.allocs}}})
			if tc.pin == "" {
				if err == nil {
					t.Fatal("pinned a plan that does not say which block gets which GPUs")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cs := job.TaskGroups[0].Tasks[0].Resources.Devices[0].Constraints
			if len(cs) != 1 || !isOwnDevicePin(cs[0].LTarget, cs[0].Operand, cs[0].RTarget) || cs[0].LTarget != tc.pin {
				t.Fatalf("block constraints %+v, want our pin of %s", cs, tc.pin)
			}
		})
	}
}
