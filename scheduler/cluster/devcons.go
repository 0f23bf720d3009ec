package cluster

// Device constraints: a device block's own constraints on the attributes
// of the device group it gets (resources { device "nvidia/gpu" {
// constraint { attribute = "${device.attr.island_size}" ... } } }), judged
// the way Nomad's scheduler judges them against each device group of a
// node (its device feasibility check): typed attributes, literals parsed
// into ints, floats, bools or strings with an optional unit, comparisons
// only between comparable values.

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// DeviceGroup is one of a node's Nomad device groups of GPUs
// (NodeResources.Devices): its vendor, type and name (${device.vendor},
// ${device.type}, ${device.model}) and its attributes
// (${device.attr.<name>}), which a device block's constraints test.
type DeviceGroup struct {
	Vendor, Type, Name string
	Attributes         map[string]Attribute
}

// DeviceGroup returns the node's device group of that name, or nil when
// the model has no facts of it (a simulated node, whose GPUs have no
// group, or a node read without them).
func (n *Node) DeviceGroup(name string) *DeviceGroup {
	for i := range n.DeviceGroups {
		if n.DeviceGroups[i].Name == name {
			return &n.DeviceGroups[i]
		}
	}
	return nil
}

// Verdict is what the model can tell of a device group against a device
// block's constraints.
type Verdict uint8

const (
	// Matches: Nomad would find the group meets them.
	Matches Verdict = iota
	// Fails: Nomad would refuse the group.
	Fails
	// MayMatch: the model cannot tell (no facts of the group, or an
	// operator or operand it does not evaluate); it counts as a match, so
	// the model never refuses what Nomad would place.
	MayMatch
)

// DeviceConstraint is one constraint of a device block, as written
// (LTarget Operand RTarget), with its literal sides parsed once. Build it
// with NewDeviceConstraint.
type DeviceConstraint struct {
	LTarget, Operand, RTarget string
	l, r                      devSide
	// re is the compiled regexp of a literal right side (nil when it does
	// not compile); ver the parsed version constraint of a literal right
	// side (verOK false: outside what the model evaluates).
	re    *regexp.Regexp
	reErr bool
	ver   []verCheck
	verOK bool
	// unknown: the model does not evaluate the constraint (MayMatch).
	unknown bool
	// compiled: built by NewDeviceConstraint.
	compiled bool
}

// devSide is one side of a device constraint: a literal, or a device fact.
type devSide struct {
	kind devTarget
	// lit is a literal's value; attr the attribute name of an attribute
	// target.
	lit  Attribute
	attr string
}

type devTarget uint8

const (
	devLiteral devTarget = iota
	devAttr
	devModel
	devVendor
	devType
	// devMissing: an interpolation Nomad does not resolve on a device
	// (found nowhere).
	devMissing
)

// NewDeviceConstraint parses a device block's constraint.
func NewDeviceConstraint(ltarget, operand, rtarget string) DeviceConstraint {
	c := DeviceConstraint{LTarget: ltarget, Operand: operand, RTarget: rtarget, compiled: true}
	c.l, c.r = parseDevSide(ltarget), parseDevSide(rtarget)
	for _, s := range []devSide{c.l, c.r} {
		if s.kind == devLiteral && s.lit.Kind == AttrFloat && math.IsNaN(s.lit.Float) {
			c.unknown = true // Nomad's comparison of NaN is not one to predict
		}
	}
	switch operand {
	case "regexp":
		if c.r.kind == devLiteral && c.r.lit.Kind == AttrString {
			re, err := regexp.Compile(c.r.lit.Str)
			c.re, c.reErr = re, err != nil
		} else if c.r.kind != devLiteral {
			c.unknown = true // a regexp read from the device: rare, left to Nomad
		}
	case "version", "semver":
		if c.r.kind == devLiteral && c.r.lit.Kind == AttrString {
			c.ver, c.verOK = parseVersionConstraint(c.r.lit.Str, operand == "semver")
		}
		if !c.verOK && (c.r.kind != devLiteral || c.r.lit.Kind == AttrString) {
			c.unknown = true
		}
	case "!=", "not", "<", "<=", ">", ">=", "=", "==", "is",
		"set_contains", "set_contains_all", "set_contains_any",
		"is_set", "is_not_set", "distinct_hosts", "distinct_property":
	default:
		c.unknown = true
	}
	return c
}

// String is the constraint as explanations write it.
func (c DeviceConstraint) String() string {
	switch c.Operand {
	case "is_set", "is_not_set":
		return c.LTarget + " " + c.Operand
	}
	return c.LTarget + " " + c.Operand + " " + c.RTarget
}

// Attribute is the device attribute the constraint tests (its
// ${device.attr.<name>} side), "" when it tests none.
func (c DeviceConstraint) Attribute() string {
	if c.l.kind == devAttr {
		return c.l.attr
	}
	if c.r.kind == devAttr {
		return c.r.attr
	}
	return ""
}

// parseDevSide reads a constraint side as Nomad resolves it on a device:
// a literal, ${device.model} (the group's name), ${device.vendor},
// ${device.type} or ${device.attr.<name>}; any other interpolation is
// found nowhere.
func parseDevSide(s string) devSide {
	if !strings.HasPrefix(s, "${") {
		return devSide{kind: devLiteral, lit: ParseAttribute(s)}
	}
	switch s {
	case "${device.model}":
		return devSide{kind: devModel}
	case "${device.vendor}":
		return devSide{kind: devVendor}
	case "${device.type}":
		return devSide{kind: devType}
	}
	if name, ok := strings.CutPrefix(s, "${device.attr."); ok {
		return devSide{kind: devAttr, attr: strings.TrimSuffix(name, "}")}
	}
	return devSide{kind: devMissing}
}

func (s *devSide) resolve(g *DeviceGroup) (Attribute, bool) {
	switch s.kind {
	case devLiteral:
		return s.lit, true
	case devAttr:
		a, ok := g.Attributes[s.attr]
		return a, ok && a.Kind != AttrNone
	case devModel:
		return Attribute{Kind: AttrString, Str: g.Name}, true
	case devVendor:
		return Attribute{Kind: AttrString, Str: g.Vendor}, true
	case devType:
		return Attribute{Kind: AttrString, Str: g.Type}, true
	}
	return Attribute{}, false
}

// Eval judges the device group against the constraint (nil: the model has
// no facts of the group: MayMatch).
func (c *DeviceConstraint) Eval(g *DeviceGroup) Verdict {
	if !c.compiled {
		cc := NewDeviceConstraint(c.LTarget, c.Operand, c.RTarget)
		return cc.Eval(g)
	}
	if c.unknown || g == nil {
		return MayMatch
	}
	lv, lok := c.l.resolve(g)
	rv, rok := c.r.resolve(g)
	if c.Operand == "version" || c.Operand == "semver" {
		return c.checkVersion(lv, rv, lok, rok)
	}
	if c.check(lv, rv, lok, rok) {
		return Matches
	}
	return Fails
}

// checkVersion is Nomad's version (semver) test: a string or int version
// on the left, a constraint string on the right. A version outside the
// plain ones the model reads is left to Nomad.
func (c *DeviceConstraint) checkVersion(l, r Attribute, lok, rok bool) Verdict {
	if !lok || !rok || r.Kind != AttrString {
		return Fails
	}
	var vs string
	switch l.Kind {
	case AttrString:
		vs = l.Str
	case AttrInt:
		vs = strconv.FormatInt(l.Int, 10)
	default:
		return Fails
	}
	v, ok := parseVersion(vs)
	if !ok {
		return MayMatch
	}
	for _, vc := range c.ver {
		if !vc.check(v) {
			return Fails
		}
	}
	return Matches
}

// check is Nomad's test of an attribute constraint (but version): what each operator
// needs present, and comparisons only between comparable values (a
// comparison that cannot be made fails, "!=" included).
func (c *DeviceConstraint) check(l, r Attribute, lok, rok bool) bool {
	switch c.Operand {
	case "distinct_hosts", "distinct_property":
		return true
	case "!=", "not":
		if !lok && !rok {
			return false
		}
		if lok != rok {
			return true
		}
		v, ok := compareAttrs(l, r)
		return ok && v != 0
	case "<", "<=", ">", ">=", "=", "==", "is":
		if !lok || !rok {
			return false
		}
		v, ok := compareAttrs(l, r)
		if !ok {
			return false
		}
		switch c.Operand {
		case "<":
			return v == -1
		case "<=":
			return v != 1
		case ">":
			return v == 1
		case ">=":
			return v != -1
		}
		return v == 0
	case "regexp":
		if !lok || !rok || l.Kind != AttrString || r.Kind != AttrString {
			return false
		}
		if c.reErr || c.re == nil {
			return false
		}
		return c.re.MatchString(l.Str)
	case "set_contains", "set_contains_all", "set_contains_any":
		if !lok || !rok || l.Kind != AttrString || r.Kind != AttrString {
			return false
		}
		have := map[string]bool{}
		for _, p := range strings.Split(l.Str, ",") {
			have[strings.TrimSpace(p)] = true
		}
		anyOf := c.Operand == "set_contains_any"
		for _, p := range strings.Split(r.Str, ",") {
			in := have[strings.TrimSpace(p)]
			if anyOf && in {
				return true
			}
			if !anyOf && !in {
				return false
			}
		}
		return !anyOf
	case "is_set":
		return lok
	case "is_not_set":
		return !lok
	}
	return false
}

// DeviceConstraints are a device block's constraints (all must hold).
type DeviceConstraints []DeviceConstraint

// Eval judges a device group against all of them: Fails when one fails,
// MayMatch when none fails but one cannot be told.
func (cs DeviceConstraints) Eval(g *DeviceGroup) Verdict {
	out := Matches
	for i := range cs {
		switch cs[i].Eval(g) {
		case Fails:
			return Fails
		case MayMatch:
			out = MayMatch
		}
	}
	return out
}

// ExplainValues lists the values the device groups hold of an attribute,
// for explanations ("island_size 2, 4"; "" when none holds it).
func ExplainValues(name string, groups []*DeviceGroup) string {
	seen := map[string]bool{}
	var vals []string
	for _, g := range groups {
		if a, ok := g.Attributes[name]; ok && a.Kind != AttrNone {
			s := a.String()
			if !seen[s] {
				seen[s] = true
				vals = append(vals, s)
			}
		}
	}
	if len(vals) == 0 {
		return ""
	}
	return fmt.Sprintf("%s %s", name, strings.Join(vals, ", "))
}
