// Package config decodes the configuration a Nomad client sends to a plugin
// (SetConfigRequest.msgpack_config, TaskConfig.msgpack_driver_config) into
// typed Go values, and encodes configuration the way the client does.
//
// The client decodes the operator's HCL against the plugin's hclspec schema
// into a go-cty value and sends go-cty's MessagePack of it. Decoding here
// goes the other way in two steps: Unmarshal reads the bytes against the cty
// type the schema implies (see hclspec.ImpliedType), and FromValue maps the
// cty value onto a Go struct whose fields carry `cty:"name"` tags (go-cty's
// gocty conventions: pointers, slices and maps for nullable values, nested
// structs for objects and blocks, cty.Value for "any"). The struct must name
// every schema attribute and nothing else, which catches schema/struct drift
// in the first test that decodes a config.
//
// Every error is a *FieldError naming the path of the bad value, such as
// `config field "mounts[1].source": expected string, got int`. Malformed
// input never panics (a fuzz target checks this).
package config

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/gocty"
	ctymsgpack "github.com/zclconf/go-cty/cty/msgpack"

	"github.com/impact-sched/nomad-impact/plugin/hclspec"
	"github.com/impact-sched/nomad-impact/plugin/proto/hclspecpb"
)

// FieldError is a config error at a path inside the config value.
type FieldError struct {
	// Path is the location of the bad value; empty for the whole config.
	Path cty.Path
	Err  error
}

func (e *FieldError) Error() string {
	if len(e.Path) == 0 {
		return "config: " + e.Err.Error()
	}
	return fmt.Sprintf("config field %q: %s", FormatPath(e.Path), e.Err)
}

func (e *FieldError) Unwrap() error { return e.Err }

// Field is the dotted path of the bad value ("mounts[1].source").
func (e *FieldError) Field() string { return FormatPath(e.Path) }

// FormatPath renders a cty path as a.b[0]["key"].
func FormatPath(p cty.Path) string {
	var b strings.Builder
	for _, step := range p {
		switch s := step.(type) {
		case cty.GetAttrStep:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.Name)
		case cty.IndexStep:
			switch {
			case s.Key.IsNull() || !s.Key.IsKnown():
				b.WriteString("[?]")
			case s.Key.Type() == cty.String:
				b.WriteString("[" + strconv.Quote(s.Key.AsString()) + "]")
			case s.Key.Type() == cty.Number:
				b.WriteString("[" + s.Key.AsBigFloat().Text('f', -1) + "]")
			default:
				b.WriteString("[?]")
			}
		}
	}
	return b.String()
}

// FromValue stores a decoded config value into target, a pointer to a Go
// value with `cty` struct tags. Errors name the bad field.
func FromValue(v cty.Value, target any) error {
	if v == cty.NilVal {
		return &FieldError{Err: errors.New("no config value")}
	}
	if err := safeFromCty(v, target); err != nil {
		var pe cty.PathError
		if errors.As(err, &pe) {
			return &FieldError{Path: pe.Path, Err: errors.New(pe.Error())}
		}
		return &FieldError{Err: err}
	}
	return nil
}

func safeFromCty(v cty.Value, target any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cannot store config in %T: %v", target, r)
		}
	}()
	return gocty.FromCtyValue(v, target)
}

// Marshal encodes v exactly as the Nomad client encodes plugin and task
// configs: go-cty MessagePack against the value's own type.
func Marshal(v cty.Value) ([]byte, error) {
	if v == cty.NilVal {
		return nil, errors.New("marshal config: no value")
	}
	b, err := ctymsgpack.Marshal(v, v.Type())
	if err != nil {
		return nil, fmt.Errorf("marshal config: %w", err)
	}
	return b, nil
}

// Decoder decodes configs of one schema. It is immutable and safe for
// concurrent use.
type Decoder struct {
	spec *hclspecpb.Spec
	ty   cty.Type
}

// NewDecoder prepares decoding against spec; it fails if the schema is not
// one the Nomad client would accept.
func NewDecoder(spec *hclspecpb.Spec) (*Decoder, error) {
	ty, err := hclspec.ImpliedType(spec)
	if err != nil {
		return nil, fmt.Errorf("config schema: %w", err)
	}
	return &Decoder{spec: spec, ty: ty}, nil
}

// Type is the cty type configs of this schema have.
func (d *Decoder) Type() cty.Type { return d.ty }

// Value decodes data into a cty value and checks the schema's constraints
// that the type alone does not carry (required attributes and blocks,
// min/max block counts), since bytes may not come from a real agent.
func (d *Decoder) Value(data []byte) (cty.Value, error) {
	v, err := Unmarshal(data, d.ty)
	if err != nil {
		return cty.NilVal, err
	}
	if err := checkSpec(d.spec, v, nil); err != nil {
		return cty.NilVal, err
	}
	return v, nil
}

// Decode decodes data into target (see FromValue).
func (d *Decoder) Decode(data []byte, target any) error {
	v, err := d.Value(data)
	if err != nil {
		return err
	}
	return FromValue(v, target)
}

// checkSpec walks the value alongside the schema. Only the structure that
// the type implies is walked; Default and Literal carry no constraint.
func checkSpec(spec *hclspecpb.Spec, v cty.Value, path cty.Path) error {
	if spec == nil || v == cty.NilVal {
		return nil
	}
	switch b := spec.GetBlock().(type) {
	case *hclspecpb.Spec_Object:
		if v.IsNull() || !v.Type().IsObjectType() {
			return nil
		}
		for _, k := range sortedKeys(b.Object.GetAttributes()) {
			if !v.Type().HasAttribute(k) {
				continue
			}
			if err := checkSpec(b.Object.GetAttributes()[k], v.GetAttr(k), append(path, cty.GetAttrStep{Name: k})); err != nil {
				return err
			}
		}
	case *hclspecpb.Spec_Array:
		if v.IsNull() || !v.Type().IsTupleType() || v.LengthInt() != len(b.Array.GetValues()) {
			return nil
		}
		for i, s := range b.Array.GetValues() {
			idx := cty.NumberIntVal(int64(i))
			if err := checkSpec(s, v.Index(idx), append(path, cty.IndexStep{Key: idx})); err != nil {
				return err
			}
		}
	case *hclspecpb.Spec_Attr:
		if b.Attr.GetRequired() && v.IsNull() {
			return &FieldError{Path: path.Copy(), Err: errors.New("required attribute is missing")}
		}
	case *hclspecpb.Spec_BlockAttrs:
		if b.BlockAttrs.GetRequired() && v.IsNull() {
			return &FieldError{Path: path.Copy(), Err: errors.New("required block is missing")}
		}
	case *hclspecpb.Spec_BlockValue:
		if v.IsNull() {
			if b.BlockValue.GetRequired() {
				return &FieldError{Path: path.Copy(), Err: errors.New("required block is missing")}
			}
			return nil
		}
		return checkSpec(b.BlockValue.GetNested(), v, path)
	case *hclspecpb.Spec_BlockList:
		return checkBlocks(b.BlockList.GetNested(), b.BlockList.GetMinItems(), b.BlockList.GetMaxItems(), v, path)
	case *hclspecpb.Spec_BlockSet:
		return checkBlocks(b.BlockSet.GetNested(), b.BlockSet.GetMinItems(), b.BlockSet.GetMaxItems(), v, path)
	}
	return nil
}

func checkBlocks(nested *hclspecpb.Spec, lo, hi uint64, v cty.Value, path cty.Path) error {
	if v.IsNull() {
		return &FieldError{Path: path.Copy(), Err: errors.New("block list is null, expected a list of blocks")}
	}
	if !v.CanIterateElements() {
		return nil
	}
	n := uint64(v.LengthInt())
	if n < lo {
		return &FieldError{Path: path.Copy(), Err: fmt.Errorf("at least %d blocks required, got %d", lo, n)}
	}
	if hi > 0 && n > hi {
		return &FieldError{Path: path.Copy(), Err: fmt.Errorf("at most %d blocks allowed, got %d", hi, n)}
	}
	if v.Type().IsSetType() {
		// Set elements have no stable index to name; check them unnamed.
		for it := v.ElementIterator(); it.Next(); {
			_, ev := it.Element()
			if err := checkSpec(nested, ev, append(path, cty.IndexStep{Key: cty.UnknownVal(cty.Number)})); err != nil {
				return err
			}
		}
		return nil
	}
	for it := v.ElementIterator(); it.Next(); {
		k, ev := it.Element()
		if err := checkSpec(nested, ev, append(path, cty.IndexStep{Key: k})); err != nil {
			return err
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
