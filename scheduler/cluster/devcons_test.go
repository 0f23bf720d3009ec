package cluster

import (
	"math"
	"testing"
)

// Device groups as impact-gpu reports them on the two-island A100 node
// (scheduler/internal/nomadfake/testdata/node-gpus.json): under group_by
// "model" one group spanning both islands (no island, island_size,
// numa), under group_by "island" one group per island.
func testGroups() (model, island *DeviceGroup) {
	i := func(v int64, unit string) Attribute { return Attribute{Kind: AttrInt, Int: v, Unit: unit} }
	s := func(v string) Attribute { return Attribute{Kind: AttrString, Str: v} }
	common := map[string]Attribute{
		"model":               s("NVIDIA A100-SXM4-80GB"),
		"memory":              i(81920, "MiB"),
		"compute_capability":  {Kind: AttrFloat, Float: 8},
		"cuda_version":        s("12.4"),
		"cuda_driver_version": i(12040, ""),
		"driver_version":      s("550.54.15"),
		"power_limit":         i(400, "W"),
		"nvlink_bandwidth":    i(600, "GB/s"),
		"pci_bandwidth":       i(31504, "MB/s"),
		"node_gpus":           i(8, ""),
		"features":            s("fp16, bf16,tf32"),
		"firmware":            s("1.2.3-rc1"),
	}
	model = &DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: "NVIDIA A100-SXM4-80GB", Attributes: map[string]Attribute{
		"group_by": s("model"), "nvlink": {Kind: AttrBool, Bool: false},
	}}
	island = &DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: "NVIDIA A100-SXM4-80GB (island 0)", Attributes: map[string]Attribute{
		"group_by": s("island"), "nvlink": {Kind: AttrBool, Bool: true},
		"island": i(0, ""), "island_size": i(4, ""), "numa": i(0, ""),
	}}
	for k, v := range common {
		model.Attributes[k], island.Attributes[k] = v, v
	}
	return model, island
}

// Each operator as Nomad's device feasibility check judges it: typed
// comparisons (an int attribute against an int, float or unit literal; a
// string only against a string), what "!=" and the orderings make of a
// missing attribute, units converted to their base, bools only
// (in)equal, versions, regexps, sets; and what the model leaves to
// Nomad (MayMatch).
func TestDeviceConstraintEval(t *testing.T) {
	model, island := testGroups()
	const (
		M = Matches
		F = Fails
		U = MayMatch
	)
	for _, tc := range []struct {
		l, op, r          string
		onModel, onIsland Verdict
	}{
		// The example's constraint: island_size exists only on a group in
		// one island.
		{"${device.attr.island_size}", ">=", "4", F, M},
		{"${device.attr.island_size}", ">", "4", F, F},
		{"${device.attr.island_size}", ">=", "4.0", F, M}, // int against float
		{"${device.attr.island_size}", "<", "inf", F, M},
		{"${device.attr.island_size}", "=", "4", F, M},
		{"${device.attr.island_size}", "==", "4", F, M},
		{"${device.attr.island_size}", "is", "4", F, M},
		{"${device.attr.island_size}", "=", "four", F, F},  // int against string: not comparable
		{"${device.attr.island_size}", "!=", "4", M, F},    // missing on the left: "!=" holds
		{"${device.attr.island_size}", "!=", "8", M, M},    //
		{"${device.attr.island_size}", "!=", "four", M, F}, // not comparable: "!=" fails too
		{"${device.attr.island_size}", "is_set", "", F, M},
		{"${device.attr.island_size}", "is_not_set", "", M, F},
		{"4", "<=", "${device.attr.island_size}", F, M}, // literal on the left
		{"${device.attr.numa}", "=", "0", F, M},
		// Numbers.
		{"${device.attr.node_gpus}", ">", "4", M, M},
		{"${device.attr.node_gpus}", "<", "8", F, F},
		{"${device.attr.node_gpus}", "<=", "8", M, M},
		{"${device.attr.compute_capability}", ">=", "8.0", M, M},
		{"${device.attr.compute_capability}", "=", "8", M, M}, // float against int
		{"${device.attr.compute_capability}", ">=", "9", F, F},
		{"${device.attr.compute_capability}", "<", "8.5", M, M},
		// Units: converted to the base unit; one side without a unit, or
		// units of different bases, do not compare.
		{"${device.attr.memory}", ">=", "80 GiB", M, M},
		{"${device.attr.memory}", ">=", "80GiB", M, M},
		{"${device.attr.memory}", "=", "81920 MiB", M, M},
		{"${device.attr.memory}", ">=", "81 GiB", F, F},
		{"${device.attr.memory}", ">=", "85 GB", M, M}, // 80 GiB > 85 * 10^9 bytes
		{"${device.attr.memory}", ">=", "86 GB", F, F},
		{"${device.attr.memory}", ">=", "40000", F, F},  // no unit on the right
		{"${device.attr.memory}", ">=", "1 GB/s", F, F}, // bytes against a rate
		{"${device.attr.memory}", ">=", "2.5 GiB", M, M},
		{"${device.attr.nvlink_bandwidth}", ">", "500 GB/s", M, M},
		{"${device.attr.nvlink_bandwidth}", ">", "600000 MB/s", F, F},
		{"${device.attr.pci_bandwidth}", "<", "32 GB/s", M, M},
		{"${device.attr.power_limit}", "=", "400000 mW", M, M},
		{"${device.attr.power_limit}", ">", "0.5 kW", F, F},
		{"${device.attr.power_limit}", "<=", "0.4 kW", M, M},
		// Bools: equal or not; "ordered" only as unequal.
		{"${device.attr.nvlink}", "=", "true", F, M},
		{"${device.attr.nvlink}", "=", "false", M, F},
		{"${device.attr.nvlink}", "!=", "true", M, F},
		{"${device.attr.nvlink}", ">", "false", F, M},
		{"${device.attr.nvlink}", "=", "yes", F, F}, // string against bool
		// Strings, and the group's own facts.
		{"${device.attr.group_by}", "=", "island", F, M},
		{"${device.attr.group_by}", "!=", "model", F, M},
		{"${device.attr.group_by}", "<", "model", F, M}, // strings in byte order: "island" < "model"
		{"${device.attr.group_by}", "=", "", F, F},
		{"${device.model}", "=", "NVIDIA A100-SXM4-80GB", M, F}, // the group's name
		{"${device.model}", "regexp", "A100", M, M},
		{"${device.model}", "regexp", `\(island \d+\)$`, F, M},
		{"${device.model}", "regexp", "^H100", F, F},
		{"${device.model}", "regexp", "[", F, F}, // does not compile: Nomad fails it too
		{"${device.attr.node_gpus}", "regexp", "8", F, F},
		{"${device.vendor}", "=", "nvidia", M, M},
		{"${device.type}", "=", "gpu", M, M},
		{"${device.type}", "!=", "gpu", F, F},
		// Sets (elements trimmed).
		{"${device.attr.features}", "set_contains", "bf16, tf32", M, M},
		{"${device.attr.features}", "set_contains_all", "bf16,fp8", F, F},
		{"${device.attr.features}", "set_contains_any", "fp8,fp16", M, M},
		{"${device.attr.features}", "set_contains_any", "fp8", F, F},
		{"${device.attr.group_by}", "set_contains_any", "island,numa", F, M},
		{"${device.attr.island_size}", "set_contains", "4", F, F}, // not strings
		// Versions: plain numeric ones are judged, with segments padded.
		{"${device.attr.driver_version}", "version", ">= 550.0", M, M},
		{"${device.attr.driver_version}", "version", ">= 535, < 560", M, M},
		{"${device.attr.driver_version}", "version", "< 550", F, F},
		{"${device.attr.driver_version}", "version", "= 550.54.15", M, M},
		{"${device.attr.driver_version}", "version", "550.54.15", M, M},
		{"${device.attr.driver_version}", "version", "!= 550.54.15", F, F},
		{"${device.attr.driver_version}", "version", "~> 550.54", M, M},
		{"${device.attr.driver_version}", "version", "~> 550.54.16", F, F},
		{"${device.attr.driver_version}", "version", "~> 549.1", F, F},
		{"${device.attr.driver_version}", "version", "550", F, F}, // an int literal: not a constraint string
		{"${device.attr.cuda_version}", "version", "> 12.2", M, M},
		{"${device.attr.cuda_version}", "version", "~> 12.0", M, M},
		{"${device.attr.cuda_version}", "version", "~> 11.0", F, F},
		{"${device.attr.cuda_version}", "semver", ">= 12.4.0", M, M},
		{"${device.attr.cuda_version}", "semver", "< 12.4", F, F},
		{"${device.attr.cuda_driver_version}", "version", ">= 12000", M, M}, // an int attribute
		{"${device.attr.island_size}", "version", ">= 4", F, M},
		{"${device.attr.compute_capability}", "version", ">= 8", F, F}, // a float is no version
		{"${device.attr.missing}", "version", ">= 1", F, F},
		// What the model leaves to Nomad.
		{"${device.attr.firmware}", "version", ">= 1.0", U, U}, // a pre-release
		{"${device.attr.driver_version}", "version", ">= 1.0-beta", U, U},
		{"${device.attr.cuda_version}", "semver", "~> 12.0", U, U},
		{"${device.attr.island_size}", ">", "NaN", U, U},
		{"${device.attr.island_size}", "near", "4", U, U},
		{"${device.model}", "regexp", "${device.attr.model}", U, U},
		// Interpolations Nomad does not resolve on a device are found
		// nowhere.
		{"${node.class}", "is_not_set", "", M, M},
		{"${node.class}", "=", "h100", F, F},
		{"${device.name}", "!=", "x", M, M},
		{"${device.attr.island_size}", "distinct_hosts", "", M, M},
	} {
		c := NewDeviceConstraint(tc.l, tc.op, tc.r)
		if got := c.Eval(model); got != tc.onModel {
			t.Errorf("%s on the model group: %v, want %v", c, got, tc.onModel)
		}
		if got := c.Eval(island); got != tc.onIsland {
			t.Errorf("%s on the island group: %v, want %v", c, got, tc.onIsland)
		}
		// A constraint built as a literal is judged alike.
		lit := DeviceConstraint{LTarget: tc.l, Operand: tc.op, RTarget: tc.r}
		if got := lit.Eval(island); got != tc.onIsland {
			t.Errorf("%s (not built by NewDeviceConstraint) on the island group: %v, want %v", c, got, tc.onIsland)
		}
		if got := c.Eval(nil); got != MayMatch {
			t.Errorf("%s on a group without facts: %v, want MayMatch", c, got)
		}
	}
}

func (v Verdict) String() string {
	return [...]string{"Matches", "Fails", "MayMatch"}[v]
}

// A block's constraints together: one failing fails the group; one the
// model cannot tell makes the others' match a MayMatch.
func TestDeviceConstraintsEval(t *testing.T) {
	model, island := testGroups()
	size := NewDeviceConstraint("${device.attr.island_size}", ">=", "4")
	vendor := NewDeviceConstraint("${device.vendor}", "=", "nvidia")
	odd := NewDeviceConstraint("${device.attr.firmware}", "version", ">= 1")
	for _, tc := range []struct {
		cs    DeviceConstraints
		g     *DeviceGroup
		want  Verdict
		label string
	}{
		{nil, model, Matches, "none"},
		{DeviceConstraints{vendor, size}, model, Fails, "one fails"},
		{DeviceConstraints{vendor, size}, island, Matches, "all hold"},
		{DeviceConstraints{odd, vendor}, island, MayMatch, "one untold"},
		{DeviceConstraints{odd, size}, model, Fails, "one untold, one fails"},
	} {
		if got := tc.cs.Eval(tc.g); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.label, got, tc.want)
		}
	}
}

// Literals parse as Nomad's do: int, float (units optional, spaces
// allowed before one), bool, else string.
func TestParseAttribute(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Attribute
	}{
		{"4", Attribute{Kind: AttrInt, Int: 4}},
		{"-2", Attribute{Kind: AttrInt, Int: -2}},
		{"4.5", Attribute{Kind: AttrFloat, Float: 4.5}},
		{"80 GiB", Attribute{Kind: AttrInt, Int: 80, Unit: "GiB"}},
		{"600GB/s", Attribute{Kind: AttrInt, Int: 600, Unit: "GB/s"}},
		{"1.5 kW", Attribute{Kind: AttrFloat, Float: 1.5, Unit: "kW"}},
		{"2 MHz", Attribute{Kind: AttrInt, Int: 2, Unit: "MHz"}},
		{"3 KB", Attribute{Kind: AttrInt, Int: 3, Unit: "KB"}},
		{"true", Attribute{Kind: AttrBool, Bool: true}},
		{"F", Attribute{Kind: AttrBool}},
		{"", Attribute{Kind: AttrString}},
		{"four GiB", Attribute{Kind: AttrString, Str: "four GiB"}},
		{"NVIDIA A100-SXM4-80GB", Attribute{Kind: AttrString, Str: "NVIDIA A100-SXM4-80GB"}},
		{"550.54.15", Attribute{Kind: AttrString, Str: "550.54.15"}},
	} {
		if got := ParseAttribute(tc.in); got != tc.want {
			t.Errorf("ParseAttribute(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	if a := ParseAttribute("inf"); a.Kind != AttrFloat || !math.IsInf(a.Float, 1) {
		t.Errorf("inf: %+v", a)
	}
}

// The constraint and attribute names explanations use.
func TestDeviceConstraintStrings(t *testing.T) {
	c := NewDeviceConstraint("${device.attr.island_size}", ">=", "4")
	if c.String() != "${device.attr.island_size} >= 4" || c.Attribute() != "island_size" {
		t.Fatalf("%q, %q", c.String(), c.Attribute())
	}
	if c := NewDeviceConstraint("${device.attr.numa}", "is_set", ""); c.String() != "${device.attr.numa} is_set" {
		t.Fatalf("%q", c.String())
	}
	if c := NewDeviceConstraint("${device.model}", "=", "x"); c.Attribute() != "" {
		t.Fatalf("%q", c.Attribute())
	}
	model, island := testGroups()
	if got := ExplainValues("island_size", []*DeviceGroup{model, island, island}); got != "island_size 4" {
		t.Fatalf("%q", got)
	}
	if got := ExplainValues("memory", []*DeviceGroup{model}); got != "memory 81920 MiB" {
		t.Fatalf("%q", got)
	}
	n := &Node{DeviceGroups: []DeviceGroup{*model, *island}}
	if g := n.DeviceGroup(island.Name); g == nil || g.Name != island.Name {
		t.Fatal("DeviceGroup by name")
	}
	if n.DeviceGroup("") != nil {
		t.Fatal("a group without a name")
	}
}
