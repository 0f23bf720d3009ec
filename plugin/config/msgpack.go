package config

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"

	"github.com/zclconf/go-cty/cty"
)

// maxDepth bounds nesting so hostile bytes cannot exhaust the stack.
const maxDepth = 100

// Unmarshal decodes MessagePack as the Nomad client produces it (go-cty's
// encoding of a value of its own concrete type) into a value of type ty.
//
// It accepts every integer width (signed or unsigned), float32/float64 and
// decimal strings for numbers (go-cty writes numbers that are not exact
// binary fractions, such as 0.1, as strings), nil for null, and infers the
// type of parts whose schema type is "any" (cty.DynamicPseudoType) from the
// bytes: maps become objects, arrays tuples. Object keys must match the type
// exactly: a missing or unexpected key is an error. Errors are *FieldError
// naming the path of the bad value. It never panics.
func Unmarshal(data []byte, ty cty.Type) (cty.Value, error) {
	if len(data) == 0 {
		return cty.NilVal, &FieldError{Err: fmt.Errorf("no bytes received, expected a MessagePack %s", ty.FriendlyName())}
	}
	d := &decoder{buf: data}
	v, err := d.value(ty, nil, 0)
	if err != nil {
		return cty.NilVal, err
	}
	if d.pos != len(d.buf) {
		return cty.NilVal, &FieldError{Err: fmt.Errorf("%d trailing bytes after the config value", len(d.buf)-d.pos)}
	}
	return v, nil
}

type decoder struct {
	buf []byte
	pos int
}

// kind is the family of a MessagePack value, for decoding and messages.
type kind int

const (
	kNil kind = iota
	kBool
	kInt
	kUint
	kFloat
	kStr
	kBin
	kArray
	kMap
	kExt
)

func (k kind) String() string {
	return [...]string{"nil", "bool", "int", "int", "float", "string", "binary", "array", "map", "extension"}[k]
}

// head is a decoded MessagePack header: its kind plus the scalar payload or
// the length of what follows.
type head struct {
	k   kind
	b   bool
	i   int64
	u   uint64
	f   float64
	n   int // length of str/bin/ext payload or number of array/map items
	ext int8
}

func (d *decoder) errAt(path cty.Path, format string, args ...any) error {
	return &FieldError{Path: path.Copy(), Err: fmt.Errorf(format, args...)}
}

func (d *decoder) take(n int, path cty.Path) ([]byte, error) {
	if n < 0 || n > len(d.buf)-d.pos {
		return nil, d.errAt(path, "truncated MessagePack at byte %d", d.pos)
	}
	b := d.buf[d.pos : d.pos+n]
	d.pos += n
	return b, nil
}

func (d *decoder) uintN(size int, path cty.Path) (uint64, error) {
	b, err := d.take(size, path)
	if err != nil {
		return 0, err
	}
	switch size {
	case 1:
		return uint64(b[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(b)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(b)), nil
	default:
		return binary.BigEndian.Uint64(b), nil
	}
}

// length reads a size-byte length and checks it is plausible given the
// bytes left (each item or byte needs at least one byte).
func (d *decoder) length(size int, path cty.Path) (int, error) {
	u, err := d.uintN(size, path)
	if err != nil {
		return 0, err
	}
	if u > uint64(len(d.buf)-d.pos) {
		return 0, d.errAt(path, "MessagePack length %d exceeds the %d bytes left", u, len(d.buf)-d.pos)
	}
	return int(u), nil
}

func (d *decoder) head(path cty.Path) (head, error) {
	cb, err := d.take(1, path)
	if err != nil {
		return head{}, err
	}
	c := cb[0]
	switch {
	case c <= 0x7f:
		return head{k: kInt, i: int64(c)}, nil
	case c >= 0xe0:
		return head{k: kInt, i: int64(int8(c))}, nil
	case c >= 0x80 && c <= 0x8f:
		return d.checkItems(head{k: kMap, n: int(c & 0x0f)}, path)
	case c >= 0x90 && c <= 0x9f:
		return d.checkItems(head{k: kArray, n: int(c & 0x0f)}, path)
	case c >= 0xa0 && c <= 0xbf:
		return d.checkItems(head{k: kStr, n: int(c & 0x1f)}, path)
	}
	switch c {
	case 0xc0:
		return head{k: kNil}, nil
	case 0xc2:
		return head{k: kBool, b: false}, nil
	case 0xc3:
		return head{k: kBool, b: true}, nil
	case 0xc4, 0xc5, 0xc6:
		n, err := d.length(1<<(c-0xc4), path)
		return head{k: kBin, n: n}, err
	case 0xc7, 0xc8, 0xc9:
		n, err := d.length(1<<(c-0xc7), path)
		if err != nil {
			return head{}, err
		}
		t, err := d.take(1, path)
		if err != nil {
			return head{}, err
		}
		return d.checkItems(head{k: kExt, n: n, ext: int8(t[0])}, path)
	case 0xca:
		u, err := d.uintN(4, path)
		return head{k: kFloat, f: float64(math.Float32frombits(uint32(u)))}, err
	case 0xcb:
		u, err := d.uintN(8, path)
		return head{k: kFloat, f: math.Float64frombits(u)}, err
	case 0xcc, 0xcd, 0xce, 0xcf:
		u, err := d.uintN(1<<(c-0xcc), path)
		return head{k: kUint, u: u}, err
	case 0xd0, 0xd1, 0xd2, 0xd3:
		size := 1 << (c - 0xd0)
		u, err := d.uintN(size, path)
		if err != nil {
			return head{}, err
		}
		var i int64
		switch size {
		case 1:
			i = int64(int8(u))
		case 2:
			i = int64(int16(u))
		case 4:
			i = int64(int32(u))
		default:
			i = int64(u)
		}
		return head{k: kInt, i: i}, nil
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		t, err := d.take(1, path)
		if err != nil {
			return head{}, err
		}
		return d.checkItems(head{k: kExt, n: 1 << (c - 0xd4), ext: int8(t[0])}, path)
	case 0xd9, 0xda, 0xdb:
		n, err := d.length(1<<(c-0xd9), path)
		return head{k: kStr, n: n}, err
	case 0xdc, 0xdd:
		n, err := d.length(2<<(c-0xdc), path)
		return head{k: kArray, n: n}, err
	case 0xde, 0xdf:
		n, err := d.length(2<<(c-0xde), path)
		return head{k: kMap, n: n}, err
	}
	return head{}, d.errAt(path, "invalid MessagePack byte 0x%02x at offset %d", c, d.pos-1)
}

func (d *decoder) checkItems(h head, path cty.Path) (head, error) {
	if h.n > len(d.buf)-d.pos {
		return head{}, d.errAt(path, "truncated MessagePack at byte %d", d.pos)
	}
	return h, nil
}

func (d *decoder) str(h head, path cty.Path) (string, error) {
	b, err := d.take(h.n, path)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func (d *decoder) value(ty cty.Type, path cty.Path, depth int) (cty.Value, error) {
	if depth > maxDepth {
		return cty.NilVal, d.errAt(path, "nested more than %d levels deep", maxDepth)
	}
	h, err := d.head(path)
	if err != nil {
		return cty.NilVal, err
	}
	if h.k == kNil {
		return cty.NullVal(ty), nil
	}
	if h.k == kExt {
		// go-cty writes unknown values as extensions; a config never
		// contains them.
		return cty.NilVal, d.errAt(path, "unexpected MessagePack extension (an unknown value?)")
	}
	switch {
	case ty == cty.DynamicPseudoType:
		return d.inferred(h, path, depth)
	case ty == cty.String:
		if h.k != kStr {
			return cty.NilVal, d.mismatch(h, ty, path)
		}
		s, err := d.str(h, path)
		if err != nil {
			return cty.NilVal, err
		}
		return cty.StringVal(s), nil
	case ty == cty.Number:
		return d.number(h, path)
	case ty == cty.Bool:
		if h.k != kBool {
			return cty.NilVal, d.mismatch(h, ty, path)
		}
		return cty.BoolVal(h.b), nil
	case ty.IsListType(), ty.IsSetType():
		if h.k != kArray {
			return cty.NilVal, d.mismatch(h, ty, path)
		}
		return d.collection(ty, h.n, path, depth)
	case ty.IsTupleType():
		if h.k != kArray {
			return cty.NilVal, d.mismatch(h, ty, path)
		}
		ets := ty.TupleElementTypes()
		if h.n != len(ets) {
			return cty.NilVal, d.errAt(path, "expected a tuple of %d elements, got %d", len(ets), h.n)
		}
		vals := make([]cty.Value, h.n)
		for i := range vals {
			v, err := d.value(ets[i], append(path, cty.IndexStep{Key: cty.NumberIntVal(int64(i))}), depth+1)
			if err != nil {
				return cty.NilVal, err
			}
			vals[i] = v
		}
		return cty.TupleVal(vals), nil
	case ty.IsMapType():
		if h.k != kMap {
			return cty.NilVal, d.mismatch(h, ty, path)
		}
		vals, err := d.mapItems(h.n, func(string) (cty.Type, bool) { return ty.ElementType(), true }, path, depth)
		if err != nil {
			return cty.NilVal, err
		}
		if len(vals) == 0 {
			return cty.MapValEmpty(ty.ElementType()), nil
		}
		if !sameTypes(mapValues(vals)) {
			if ty.ElementType().HasDynamicTypes() {
				return cty.ObjectVal(vals), nil
			}
			return cty.NilVal, d.errAt(path, "map elements have different types")
		}
		return cty.MapVal(vals), nil
	case ty.IsObjectType():
		if h.k != kMap {
			return cty.NilVal, d.mismatch(h, ty, path)
		}
		ats := ty.AttributeTypes()
		vals, err := d.mapItems(h.n, func(k string) (cty.Type, bool) { t, ok := ats[k]; return t, ok }, path, depth)
		if err != nil {
			return cty.NilVal, err
		}
		for _, k := range sortedKeys(ats) {
			if _, ok := vals[k]; !ok {
				return cty.NilVal, d.errAt(append(path, cty.GetAttrStep{Name: k}), "missing from the config")
			}
		}
		return cty.ObjectVal(vals), nil
	}
	return cty.NilVal, d.errAt(path, "cannot decode a value of type %s", ty.FriendlyName())
}

func (d *decoder) mismatch(h head, ty cty.Type, path cty.Path) error {
	return d.errAt(path, "expected %s, got %s", ty.FriendlyName(), h.k)
}

func (d *decoder) number(h head, path cty.Path) (cty.Value, error) {
	switch h.k {
	case kInt:
		return cty.NumberIntVal(h.i), nil
	case kUint:
		return cty.NumberUIntVal(h.u), nil
	case kFloat:
		if math.IsNaN(h.f) {
			return cty.NilVal, d.errAt(path, "number is NaN")
		}
		return cty.NumberVal(new(big.Float).SetFloat64(h.f)), nil
	case kStr:
		s, err := d.str(h, path)
		if err != nil {
			return cty.NilVal, err
		}
		v, err := cty.ParseNumberVal(s)
		if err != nil {
			return cty.NilVal, d.errAt(path, "expected number, got string %q", truncate(s))
		}
		return v, nil
	}
	return cty.NilVal, d.mismatch(h, cty.Number, path)
}

func (d *decoder) collection(ty cty.Type, n int, path cty.Path, depth int) (cty.Value, error) {
	et := ty.ElementType()
	vals := make([]cty.Value, n)
	for i := range vals {
		v, err := d.value(et, append(path, cty.IndexStep{Key: cty.NumberIntVal(int64(i))}), depth+1)
		if err != nil {
			return cty.NilVal, err
		}
		vals[i] = v
	}
	if n == 0 {
		if ty.IsSetType() {
			return cty.SetValEmpty(et), nil
		}
		return cty.ListValEmpty(et), nil
	}
	if !sameTypes(vals) {
		if et.HasDynamicTypes() {
			// hcldec makes a tuple of blocks whose types differ.
			return cty.TupleVal(vals), nil
		}
		return cty.NilVal, d.errAt(path, "elements have different types")
	}
	if ty.IsSetType() {
		return cty.SetVal(vals), nil
	}
	return cty.ListVal(vals), nil
}

// mapItems reads n key/value pairs with string keys; typeOf gives each
// key's value type, or false for a key that is not allowed.
func (d *decoder) mapItems(n int, typeOf func(string) (cty.Type, bool), path cty.Path, depth int) (map[string]cty.Value, error) {
	vals := make(map[string]cty.Value, n)
	for range n {
		kh, err := d.head(path)
		if err != nil {
			return nil, err
		}
		if kh.k != kStr {
			return nil, d.errAt(path, "map key is %s, expected string", kh.k)
		}
		k, err := d.str(kh, path)
		if err != nil {
			return nil, err
		}
		if _, dup := vals[k]; dup {
			return nil, d.errAt(path, "duplicate key %q", truncate(k))
		}
		et, ok := typeOf(k)
		if !ok {
			return nil, d.errAt(append(path, cty.GetAttrStep{Name: k}), "unexpected field, not in the schema")
		}
		v, err := d.value(et, append(path, cty.GetAttrStep{Name: k}), depth+1)
		if err != nil {
			return nil, err
		}
		vals[k] = v
	}
	return vals, nil
}

// inferred decodes a value whose schema type is "any".
func (d *decoder) inferred(h head, path cty.Path, depth int) (cty.Value, error) {
	switch h.k {
	case kBool:
		return cty.BoolVal(h.b), nil
	case kInt, kUint, kFloat:
		return d.number(h, path)
	case kStr:
		s, err := d.str(h, path)
		if err != nil {
			return cty.NilVal, err
		}
		return cty.StringVal(s), nil
	case kArray:
		vals := make([]cty.Value, h.n)
		for i := range vals {
			v, err := d.value(cty.DynamicPseudoType, append(path, cty.IndexStep{Key: cty.NumberIntVal(int64(i))}), depth+1)
			if err != nil {
				return cty.NilVal, err
			}
			vals[i] = v
		}
		if len(vals) == 0 {
			return cty.EmptyTupleVal, nil
		}
		return cty.TupleVal(vals), nil
	case kMap:
		vals, err := d.mapItems(h.n, func(string) (cty.Type, bool) { return cty.DynamicPseudoType, true }, path, depth)
		if err != nil {
			return cty.NilVal, err
		}
		if len(vals) == 0 {
			return cty.EmptyObjectVal, nil
		}
		return cty.ObjectVal(vals), nil
	}
	return cty.NilVal, d.errAt(path, "unsupported MessagePack %s", h.k)
}

func sameTypes(vals []cty.Value) bool {
	for _, v := range vals[1:] {
		if !v.Type().Equals(vals[0].Type()) {
			return false
		}
	}
	return true
}

func mapValues(m map[string]cty.Value) []cty.Value {
	out := make([]cty.Value, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, m[k])
	}
	return out
}

func truncate(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
