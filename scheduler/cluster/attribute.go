package cluster

import (
	"math"
	"math/big"
	"strconv"
	"strings"
)

// Device attributes, typed as device plugins report them, read and compared
// the way Nomad does: a literal parsed into an int, float, bool or string
// with an optional unit, and comparisons only between comparable values.

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
