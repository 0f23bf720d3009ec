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
	"math/big"
	"regexp"
	"strconv"
	"strings"
)

// AttrKind is which value an Attribute holds.
type AttrKind uint8

const (
	// AttrNone: no value (a zero Attribute).
	AttrNone AttrKind = iota
	AttrInt
	AttrFloat
	AttrString
	AttrBool
)

// Attribute is a typed device attribute as a device plugin reports it
// (or a constraint's literal, parsed as Nomad parses it): one of Int,
// Float, Str or Bool, as Kind says; numbers may carry a Unit ("MiB",
// "GB/s", "W", ...).
type Attribute struct {
	Kind  AttrKind
	Int   int64
	Float float64
	Str   string
	Bool  bool
	Unit  string
}

// String is the attribute as written in a constraint: the value with its
// unit.
func (a Attribute) String() string {
	var s string
	switch a.Kind {
	case AttrInt:
		s = strconv.FormatInt(a.Int, 10)
	case AttrFloat:
		s = strconv.FormatFloat(a.Float, 'g', -1, 64)
	case AttrString:
		return a.Str
	case AttrBool:
		return strconv.FormatBool(a.Bool)
	}
	if a.Unit != "" {
		s += " " + a.Unit
	}
	return s
}

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

// ParseAttribute reads a constraint literal as Nomad does: an int or a
// float with an optional known unit suffix ("80 GiB", "600GB/s"), else a
// bool (as strconv.ParseBool reads one), else the string itself.
func ParseAttribute(s string) Attribute {
	if s == "" {
		return Attribute{Kind: AttrString}
	}
	num, unit := s, ""
	for _, u := range unitsByLength {
		if strings.HasSuffix(s, u) {
			unit = u
			num = strings.TrimSpace(strings.TrimSuffix(s, u))
			break
		}
	}
	if i, err := strconv.ParseInt(num, 10, 64); err == nil {
		return Attribute{Kind: AttrInt, Int: i, Unit: unit}
	}
	if f, err := strconv.ParseFloat(num, 64); err == nil {
		return Attribute{Kind: AttrFloat, Float: f, Unit: unit}
	}
	if b, err := strconv.ParseBool(s); err == nil {
		return Attribute{Kind: AttrBool, Bool: b}
	}
	return Attribute{Kind: AttrString, Str: s}
}

// attrUnit is a unit Nomad knows: its base (bytes, byte rate, hertz,
// watts) and its multiplier over the base (divisor when inverse).
type attrUnit struct {
	base    uint8
	mult    int64
	inverse bool
}

const (
	baseByte uint8 = iota + 1
	baseByteRate
	baseHertz
	baseWatt
)

// attrUnits are the units Nomad's device attributes may carry.
var attrUnits = func() map[string]attrUnit {
	m := map[string]attrUnit{
		"MHz": {baseHertz, 1e6, false}, "GHz": {baseHertz, 1e9, false},
		"mW": {baseWatt, 1e3, true}, "W": {baseWatt, 1, false}, "kW": {baseWatt, 1e3, false},
		"MW": {baseWatt, 1e6, false}, "GW": {baseWatt, 1e9, false},
	}
	bin := []string{"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}
	dec := []string{"k", "M", "G", "T", "P", "E"}
	p := int64(1)
	for i := range bin {
		p *= 1000
		m[bin[i]+"B"] = attrUnit{baseByte, 1 << (10 * (i + 1)), false}
		m[bin[i]+"B/s"] = attrUnit{baseByteRate, 1 << (10 * (i + 1)), false}
		m[dec[i]+"B"] = attrUnit{baseByte, p, false}
		m[dec[i]+"B/s"] = attrUnit{baseByteRate, p, false}
	}
	m["KB"], m["KB/s"] = m["kB"], m["kB/s"]
	return m
}()

// unitsByLength are attrUnits' names, longest first (a suffix is matched
// by the longest unit it ends with).
var unitsByLength = func() []string {
	var out []string
	for u := range attrUnits {
		out = append(out, u)
	}
	// Longest first; among equal lengths no two can both be a suffix.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && len(out[j]) > len(out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}()

// compareAttrs orders a against b as Nomad does: -1, 0 or 1, and false
// when they cannot be compared (different kinds, units of different
// bases, a unit on one side only, or no value). Bools compare only for
// (in)equality: 0 when equal, 1 when not.
func compareAttrs(a, b Attribute) (int, bool) {
	ua, aok := attrUnits[a.Unit]
	ub, bok := attrUnits[b.Unit]
	if aok != bok || (aok && ua.base != ub.base) {
		return 0, false
	}
	switch a.Kind {
	case AttrString:
		if b.Kind != AttrString {
			return 0, false
		}
		return strings.Compare(a.Str, b.Str), true
	case AttrBool:
		if b.Kind != AttrBool {
			return 0, false
		}
		if a.Bool == b.Bool {
			return 0, true
		}
		return 1, true
	case AttrInt, AttrFloat:
		if a.Kind == AttrInt && b.Kind == AttrInt {
			x, y := scaledInt(a, ua, aok), scaledInt(b, ub, bok)
			switch {
			case x < y:
				return -1, true
			case x > y:
				return 1, true
			}
			return 0, true
		}
		x, y := bigOf(a, ua, aok), bigOf(b, ub, bok)
		if x == nil || y == nil {
			return 0, false
		}
		return x.Cmp(y), true
	}
	return 0, false
}

func scaledInt(a Attribute, u attrUnit, ok bool) int64 {
	if !ok {
		return a.Int
	}
	if u.inverse {
		return a.Int / u.mult
	}
	return a.Int * u.mult
}

// bigPrec is the precision numbers of mixed kinds are compared at (as
// Nomad's).
const bigPrec = 256

func bigOf(a Attribute, u attrUnit, ok bool) *big.Float {
	f := new(big.Float).SetPrec(bigPrec)
	switch a.Kind {
	case AttrInt:
		f.SetInt64(a.Int)
	case AttrFloat:
		if math.IsNaN(a.Float) {
			return nil
		}
		f.SetFloat64(a.Float)
	default:
		return nil
	}
	if !ok {
		return f
	}
	m := new(big.Float).SetPrec(bigPrec).SetInt64(u.mult)
	if u.inverse {
		m.Quo(new(big.Float).SetPrec(bigPrec).SetInt64(1), m)
	}
	return f.Mul(f, m)
}

// A version constraint the model evaluates: comma-separated checks of
// plain numeric versions ("v"? digits and dots, no pre-release or build
// part). Anything else is left to Nomad (MayMatch).
type verCheck struct {
	op  string
	v   []int64
	set int // segments written (before padding)
}

func parseVersion(s string) ([]int64, bool) {
	s = strings.TrimPrefix(s, "v")
	if s == "" {
		return nil, false
	}
	parts := strings.Split(s, ".")
	v := make([]int64, 0, max(3, len(parts)))
	for _, p := range parts {
		if p == "" || strings.TrimLeft(p, "0123456789") != "" {
			return nil, false
		}
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil {
			return nil, false
		}
		v = append(v, n)
	}
	for len(v) < 3 {
		v = append(v, 0)
	}
	return v, true
}

func parseVersionConstraint(s string, semver bool) ([]verCheck, bool) {
	var out []verCheck
	for _, one := range strings.Split(s, ",") {
		one = strings.TrimSpace(one)
		op := ""
		for _, o := range []string{"<=", ">=", "!=", "~>", "<", ">", "="} {
			if strings.HasPrefix(one, o) {
				op = o
				break
			}
		}
		if op == "~>" && semver {
			return nil, false
		}
		rest := strings.TrimSpace(one[len(op):])
		v, ok := parseVersion(rest)
		if !ok {
			return nil, false
		}
		out = append(out, verCheck{op: op, v: v, set: len(strings.Split(strings.TrimPrefix(rest, "v"), "."))})
	}
	return out, true
}

func compareVersions(a, b []int64) int {
	for i := range max(len(a), len(b)) {
		var x, y int64
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
	}
	return 0
}

func (vc verCheck) check(v []int64) bool {
	c := compareVersions(v, vc.v)
	switch vc.op {
	case "", "=":
		return c == 0
	case "!=":
		return c != 0
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	case ">=":
		return c >= 0
	case "~>":
		// At least the version, and the same in every segment written
		// but the last ("~> 1.2": 1.x from 1.2; "~> 1.2.3": 1.2.x from
		// 1.2.3).
		if c < 0 || len(vc.v) > len(v) {
			return false
		}
		for i := 0; i < vc.set-1; i++ {
			if v[i] != vc.v[i] {
				return false
			}
		}
		return vc.v[len(vc.v)-1] <= v[len(vc.v)-1]
	}
	return false
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
