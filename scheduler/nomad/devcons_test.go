package nomad

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// realGPUNode is the node a real agent with impact-gpu's shipped defaults
// reported (group_by "model": one group of 8 A100s over two islands).
func realGPUNode(t *testing.T) *wireNode {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "internal", "nomadfake", "testdata", "node-gpus.json"))
	if err != nil {
		t.Fatal(err)
	}
	var wn wireNode
	if err := json.Unmarshal(b, &wn); err != nil {
		t.Fatal(err)
	}
	return &wn
}

// example/jobs/distributed-training.nomad.hcl as Nomad 2.0.5 parses it
// (`nomad job run -output`, recorded in testdata so that the test keeps
// the constraint the issue was about whatever the example becomes) reaches
// the model with its device block's constraint; the real node's device
// group reaches it with its typed attributes; and the engine parks the
// job on two such nodes, saying why, rather than admitting what Nomad
// would refuse ("missing devices").
func TestExampleDeviceConstraintFromRealJSON(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "distributed-training-job.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Job *wireJob }
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	cj := translateJob(doc.Job, "default/llm-pretrain", 0, false, translateConfig{parkingPool: parking})
	g := cj.Groups[0]
	if len(g.Devices) != 1 || len(g.Devices[0].Constraints) != 1 {
		t.Fatalf("device blocks %+v", g.Devices)
	}
	c := g.Devices[0].Constraints[0]
	if c.String() != "${device.attr.island_size} >= 4" || c.Attribute() != "island_size" || g.Devices[0].IDs != nil {
		t.Fatalf("constraint %q (attribute %q), IDs %v", c, c.Attribute(), g.Devices[0].IDs)
	}

	var nodes []*cluster.Node
	for _, id := range []string{"a", "b"} {
		wn := realGPUNode(t)
		wn.ID, wn.Name, wn.NodePool = wn.ID+id, wn.Name+id, "gpu"
		n, err := translateNode(wn)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	n := nodes[0]
	if len(n.DeviceGroups) != 1 {
		t.Fatalf("device groups %+v", n.DeviceGroups)
	}
	dg := &n.DeviceGroups[0]
	if dg.Name != n.GPUs[0].Group || dg.Vendor != "nvidia" || dg.Type != "gpu" {
		t.Fatalf("group %s/%s/%s, GPUs' group %q", dg.Vendor, dg.Type, dg.Name, n.GPUs[0].Group)
	}
	for k, want := range map[string]cluster.Attribute{
		"group_by":           {Kind: cluster.AttrString, Str: "model"},
		"memory":             {Kind: cluster.AttrInt, Int: 81920, Unit: "MiB"},
		"compute_capability": {Kind: cluster.AttrFloat, Float: 8},
		"nvlink":             {Kind: cluster.AttrBool},
		"node_gpus":          {Kind: cluster.AttrInt, Int: 8},
	} {
		if got := dg.Attributes[k]; got != want {
			t.Errorf("attribute %s = %+v, want %+v", k, got, want)
		}
	}
	if _, ok := dg.Attributes["island_size"]; ok {
		t.Fatal("island_size on a group spanning islands")
	}
	if v := c.Eval(dg); v != cluster.Fails {
		t.Fatalf("the example's constraint on the real group: %v, want Fails", v)
	}

	eng, err := engine.New(policy.Default(), engine.WithDefaultPool("gpu"))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := cluster.Build(nodes, []*cluster.Job{cj}, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan := eng.Decide(snap, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))
	for _, a := range plan.Admissions {
		t.Fatalf("admitted %s", a.JobID)
	}
	ex := plan.Explanations[cj.ID]
	want := `group "workers" task "trainer" device "nvidia/gpu": constraint ${device.attr.island_size} >= 4 matches no device group of pool "gpu" (island_size is set only where a group lies in one island: impact-gpu group_by = "island")`
	if ex.Status != engine.StatusParked || ex.Reason != want {
		t.Fatalf("%s %q, want parked: %q", ex.Status, ex.Reason, want)
	}
}

// Constraints on ${device.ids} are not the group's: the user's
// set_contains_any lists are the block's IDs, the admission's own pin is
// neither, and the rest are left to Nomad. Only NVIDIA GPU groups are
// kept on the node.
func TestTranslateDeviceConstraints(t *testing.T) {
	one := uint64(1)
	j := gpuJob("cons", nil, [2]int{1, 1})
	j.TaskGroups[0].Tasks[0].Resources.Devices = []*api.RequestedDevice{{Name: "nvidia/gpu", Count: &one, Constraints: []*api.Constraint{
		{LTarget: DeviceIDsTarget, Operand: "set_contains_any", RTarget: "a,b"},
		{LTarget: "a", Operand: "set_contains", RTarget: DeviceIDsTarget},
		ownDevicePin([]string{"x"}),
		{LTarget: "${device.model}", Operand: "regexp", RTarget: "A100"},
		{LTarget: "${device.attr.memory}", Operand: ">=", RTarget: "40 GiB"},
	}}}
	raw, _ := json.Marshal(j)
	var wj wireJob
	if err := json.Unmarshal(raw, &wj); err != nil {
		t.Fatal(err)
	}
	d := translateJob(&wj, "default/cons", 0, false, translateConfig{parkingPool: parking}).Groups[0].Devices[0]
	var got []string
	for _, c := range d.Constraints {
		got = append(got, c.String())
	}
	if strings.Join(got, "; ") != "${device.model} regexp A100; ${device.attr.memory} >= 40 GiB" || strings.Join(d.IDs, ",") != "a,b" {
		t.Fatalf("constraints %q, IDs %v", got, d.IDs)
	}

	wn := realGPUNode(t)
	fpga := wireDeviceGroup{Vendor: "xilinx", Type: "fpga", Name: "u250"}
	wn.NodeResources.Devices = append(wn.NodeResources.Devices, fpga)
	n, err := translateNode(wn)
	if err != nil {
		t.Fatal(err)
	}
	if len(n.DeviceGroups) != 1 || n.DeviceGroup("u250") != nil {
		t.Fatalf("device groups %+v", n.DeviceGroups)
	}
	if v := d.Constraints.Eval(n.DeviceGroup(n.GPUs[0].Group)); v != cluster.Matches {
		t.Fatalf("the block's constraints on the A100 group: %v", v)
	}
}

// deviceConstraintCases are device constraints on the attributes the
// fake two-island A100 topology reports, for TestRealNomadDeviceConstraints.
var deviceConstraintCases = [][3]string{
	{"${device.attr.island_size}", ">=", "4"},
	{"${device.attr.island_size}", "!=", "4"},
	{"${device.attr.island_size}", "!=", "four"},
	{"${device.attr.island_size}", "is_set", ""},
	{"${device.attr.island_size}", "is_not_set", ""},
	{"4", "<=", "${device.attr.island_size}"},
	{"${device.attr.island}", "=", "1"},
	{"${device.attr.numa}", "<", "1"},
	{"${device.attr.node_gpus}", ">", "4.5"},
	{"${device.attr.compute_capability}", "=", "8"},
	{"${device.attr.compute_capability}", ">=", "9"},
	{"${device.attr.memory}", ">=", "80 GiB"},
	{"${device.attr.memory}", ">=", "85 GB"},
	{"${device.attr.memory}", ">=", "81 GiB"},
	{"${device.attr.memory}", ">=", "40000"},
	{"${device.attr.memory}", ">=", "1 GB/s"},
	{"${device.attr.nvlink_bandwidth}", ">", "500 GB/s"},
	{"${device.attr.power_limit}", "=", "400000 mW"},
	{"${device.attr.power_limit}", ">", "0.5 kW"},
	{"${device.attr.nvlink}", "=", "true"},
	{"${device.attr.nvlink}", "!=", "true"},
	{"${device.attr.nvlink}", ">", "false"},
	{"${device.attr.group_by}", "=", "island"},
	{"${device.attr.group_by}", "<", "model"},
	{"${device.attr.group_by}", "set_contains_any", "island,numa"},
	{"${device.model}", "regexp", `\(island 1\)$`},
	{"${device.model}", "=", "NVIDIA A100-SXM4-80GB"},
	{"${device.vendor}", "=", "nvidia"},
	{"${device.type}", "!=", "gpu"},
	{"${device.attr.driver_version}", "version", ">= 535, < 560"},
	{"${device.attr.driver_version}", "version", "~> 550.54.16"},
	{"${device.attr.driver_version}", "version", "550"},
	{"${device.attr.cuda_version}", "version", "~> 12.0"},
	{"${device.attr.cuda_version}", "semver", "< 12.4"},
	{"${device.attr.cuda_driver_version}", "version", ">= 12000"},
	{"${device.attr.island_size}", "version", ">= 4"},
	{"${device.attr.compute_capability}", "version", ">= 8"},
	{"${node.class}", "is_not_set", ""},
	{"${node.class}", "=", "h100"},
}

// On real agents with impact-gpu's fake two-island topology, under
// group_by "model" and "island": for each constraint, Nomad's plan of a
// one-GPU block places exactly when the model's verdict on the node's
// device groups (read by the watcher from the agent) says some group
// meets it. Then the example's block (4 GPUs, island_size >= 4), parked
// and read back through the event stream: parked by the engine under
// "model", admitted under "island" and placed by Nomad on exactly the
// pinned GPUs. Skipped without a nomad binary on PATH.
func TestRealNomadDeviceConstraints(t *testing.T) {
	for _, groupBy := range []string{"model", "island"} {
		t.Run(groupBy, func(t *testing.T) {
			agent := startGPUAgentWith(t, `group_by = "`+groupBy+`"`)
			c, err := NewClient(Config{Address: agent.addr}, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			w := NewWatcher(c, WatcherConfig{ParkingPool: parking}, testLogger(t))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _ = w.Run(ctx) }()
			<-w.Ready()
			var node *cluster.Node
			for deadline := time.Now().Add(60 * time.Second); node == nil; time.Sleep(200 * time.Millisecond) {
				if ns := w.Snapshot().Nodes(); len(ns) == 1 && len(ns[0].GPUs) == 8 && ns[0].GroupBy == groupBy {
					node = ns[0]
				} else if time.Now().After(deadline) {
					t.Fatalf("node GPUs under group_by %s never appeared in the model", groupBy)
				}
			}
			if want := map[string]int{"model": 1, "island": 2}[groupBy]; len(node.DeviceGroups) != want {
				t.Fatalf("%d device groups, want %d", len(node.DeviceGroups), want)
			}
			one := uint64(1)
			checked, placedN := 0, 0
			for i, tc := range deviceConstraintCases {
				dc := cluster.NewDeviceConstraint(tc[0], tc[1], tc[2])
				verdict := cluster.Fails
				for gi := range node.DeviceGroups {
					switch dc.Eval(&node.DeviceGroups[gi]) {
					case cluster.Matches:
						verdict = cluster.Matches
					case cluster.MayMatch:
						if verdict == cluster.Fails {
							verdict = cluster.MayMatch
						}
					}
				}
				j := gpuJob("cons", nil, [2]int{1, 1})
				j.NodePool = nil
				j.TaskGroups[0].Tasks[0].Config = map[string]any{"command": "/bin/true"}
				j.TaskGroups[0].Tasks[0].Resources.Devices = []*api.RequestedDevice{{Name: "nvidia/gpu", Count: &one,
					Constraints: []*api.Constraint{{LTarget: tc[0], Operand: tc[1], RTarget: tc[2]}}}}
				resp, _, err := c.api.Jobs().Plan(j, false, nil)
				if err != nil {
					t.Fatalf("case %d (%s): plan: %v", i, dc, err)
				}
				placed := len(resp.FailedTGAllocs) == 0
				if placed {
					placedN++
				}
				switch {
				case verdict == cluster.MayMatch:
					t.Logf("%s: the model cannot tell; Nomad places: %v", dc, placed)
				case placed != (verdict == cluster.Matches):
					t.Errorf("%s: Nomad places %v, the model says %v", dc, placed, verdict == cluster.Matches)
				default:
					checked++
				}
			}
			t.Logf("group_by %s: %d constraints judged as Nomad does (Nomad placed %d of %d)", groupBy, checked, placedN, len(deviceConstraintCases))
			if placedN == 0 || placedN == len(deviceConstraintCases) {
				t.Fatal("Nomad placed all or none: the cases tell nothing")
			}

			// The example's block (4 GPUs, island_size >= 4), parked and
			// read back through the event stream: the engine parks it
			// under group_by "model", admits it under "island".
			if err := c.EnsureNodePool(ctx, parking, "parking"); err != nil {
				t.Fatal(err)
			}
			four := uint64(4)
			j := gpuJob("example", nil, [2]int{1, 4})
			cpu, mem := 50, 32
			j.TaskGroups[0].Tasks[0].Config = map[string]any{"command": "/bin/sh", "args": []string{"-c", "sleep 300"}}
			j.TaskGroups[0].Tasks[0].Resources.CPU, j.TaskGroups[0].Tasks[0].Resources.MemoryMB = &cpu, &mem
			j.TaskGroups[0].Tasks[0].Resources.Devices = []*api.RequestedDevice{{Name: "nvidia/gpu", Count: &four,
				Constraints: []*api.Constraint{{LTarget: "${device.attr.island_size}", Operand: ">=", RTarget: "4"}}}}
			if _, _, err := c.api.Jobs().Register(j, nil); err != nil {
				t.Fatal(err)
			}
			key := cluster.JobKey("default", "example")
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if cj, ok := w.Snapshot().Job(key); ok && cj.State == cluster.JobQueued {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("job not queued in the model")
				}
			}
			eng, err := engine.New(policy.Default(), engine.WithDefaultPool(node.Pool))
			if err != nil {
				t.Fatal(err)
			}
			plan := eng.Decide(w.Snapshot(), time.Now())
			ex := plan.Explanations[key]
			admitted := len(plan.Admissions) == 1
			if groupBy == "model" && (admitted || ex.Status != engine.StatusParked || !strings.Contains(ex.Reason, "constraint ${device.attr.island_size} >= 4 matches no device group")) {
				t.Fatalf("group_by model: admitted %v, %s %q; want parked naming the constraint", admitted, ex.Status, ex.Reason)
			}
			if groupBy == "island" && !admitted {
				t.Fatalf("group_by island: %s %q; want admitted", ex.Status, ex.Reason)
			}
			t.Logf("the example's block under group_by %s: %s %q", groupBy, ex.Status, ex.Reason)
			if !admitted {
				return
			}
			// Nomad places the admission: the pins and the block's own
			// constraint agree.
			x := NewExecutor(c, NewStateStore(c, StateConfig{}, nil), ExecutorConfig{ParkingPool: parking, Snapshot: w.Snapshot}, testLogger(t))
			if res := x.Apply(ctx, plan); len(res.Admitted) != 1 {
				t.Fatalf("apply: %+v", res)
			}
			want := slices.Sorted(slices.Values(plan.Admissions[0].Groups[0].Allocs[0].GPUs))
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				var got []string
				as, _, _ := c.api.Jobs().Allocations("example", true, nil)
				for _, a := range as {
					full, _, err := c.api.Allocations().Info(a.ID, nil)
					if err == nil && full.AllocatedResources != nil && a.DesiredStatus == "run" {
						for _, d := range full.AllocatedResources.Tasks["trainer"].Devices {
							got = append(got, d.DeviceIDs...)
						}
					}
				}
				if len(got) > 0 {
					if slices.Sort(got); !slices.Equal(got, want) {
						t.Fatalf("Nomad allocated %v, the admission pinned %v", got, want)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("Nomad placed no allocation of the admitted job")
				}
			}
		})
	}
}
