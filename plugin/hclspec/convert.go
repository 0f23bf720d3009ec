package hclspec

import (
	"errors"
	"fmt"
	"sort"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/json"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"

	"github.com/impact-sched/nomad-impact/plugin/proto/hclspecpb"
)

// literalFunctions are the functions Nomad makes available to Literal
// expressions; a schema that calls anything else fails in the agent, so it
// fails here too.
func literalFunctions() map[string]function.Function {
	return map[string]function.Function{
		"abs":        stdlib.AbsoluteFunc,
		"coalesce":   stdlib.CoalesceFunc,
		"concat":     stdlib.ConcatFunc,
		"hasindex":   stdlib.HasIndexFunc,
		"int":        stdlib.IntFunc,
		"jsondecode": stdlib.JSONDecodeFunc,
		"jsonencode": stdlib.JSONEncodeFunc,
		"length":     stdlib.LengthFunc,
		"lower":      stdlib.LowerFunc,
		"max":        stdlib.MaxFunc,
		"min":        stdlib.MinFunc,
		"reverse":    stdlib.ReverseFunc,
		"strlen":     stdlib.StrlenFunc,
		"substr":     stdlib.SubstrFunc,
		"upper":      stdlib.UpperFunc,
	}
}

// Convert turns a schema into the hcldec spec the Nomad client builds from
// it, applying the same rules: an Object key names a direct Attr/Block child
// whose name is empty, children of Default and Array get no implied name,
// type strings are HCL type expressions and Literals are HCL expressions.
// Errors name the offending node by its path in the schema.
func Convert(spec *Spec) (hcldec.Spec, error) {
	return convert(spec, "", "spec")
}

// ImpliedType is the cty type of the values the schema decodes to, which is
// the type Nomad's MessagePack config is decoded against.
func ImpliedType(spec *Spec) (cty.Type, error) {
	s, err := Convert(spec)
	if err != nil {
		return cty.NilType, err
	}
	return hcldec.ImpliedType(s), nil
}

// Validate reports whether the schema is one the Nomad client accepts.
func Validate(spec *Spec) error {
	_, err := Convert(spec)
	return err
}

// DecodeHCL decodes HCL native syntax (the body of a config block) against
// the schema as the agent does: no variables, defaults applied.
func DecodeHCL(spec *Spec, src []byte, filename string) (cty.Value, error) {
	file, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return cty.NilVal, fmt.Errorf("parsing %s: %w", filename, diags)
	}
	return DecodeBody(spec, file.Body)
}

// DecodeJSON decodes HCL JSON syntax against the schema. The agent reaches
// plugin config this way: it JSON-encodes the plugin block's config map and
// parses that as HCL JSON.
func DecodeJSON(spec *Spec, src []byte, filename string) (cty.Value, error) {
	file, diags := json.Parse(src, filename)
	if diags.HasErrors() {
		return cty.NilVal, fmt.Errorf("parsing %s: %w", filename, diags)
	}
	return DecodeBody(spec, file.Body)
}

// DecodeBody decodes an HCL body against the schema with no variables.
func DecodeBody(spec *Spec, body hcl.Body) (val cty.Value, err error) {
	s, err := Convert(spec)
	if err != nil {
		return cty.NilVal, err
	}
	defer func() {
		// hcldec panics on some inconsistent values; report, don't crash.
		if r := recover(); r != nil {
			val, err = cty.NilVal, fmt.Errorf("decoding config: %v", r)
		}
	}()
	val, diags := hcldec.Decode(body, s, nil)
	if diags.HasErrors() {
		return cty.NilVal, fmt.Errorf("decoding config: %w", diags)
	}
	return val, nil
}

func convert(spec *Spec, implied, path string) (hcldec.Spec, error) {
	if spec == nil {
		return nil, fmt.Errorf("%s: spec is missing", path)
	}
	name := func(n string) (string, error) {
		if n != "" {
			return n, nil
		}
		if implied != "" {
			return implied, nil
		}
		return "", fmt.Errorf("%s: name is empty and not implied by an object key", path)
	}
	switch b := spec.GetBlock().(type) {
	case *hclspecpb.Spec_Object:
		obj := hcldec.ObjectSpec{}
		keys := make([]string, 0, len(b.Object.GetAttributes()))
		for k := range b.Object.GetAttributes() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			child, err := convert(b.Object.GetAttributes()[k], k, fmt.Sprintf("%s.object[%q]", path, k))
			if err != nil {
				return nil, err
			}
			obj[k] = child
		}
		return obj, nil
	case *hclspecpb.Spec_Array:
		tup := hcldec.TupleSpec{}
		for i, v := range b.Array.GetValues() {
			child, err := convert(v, "", fmt.Sprintf("%s.array[%d]", path, i))
			if err != nil {
				return nil, err
			}
			tup = append(tup, child)
		}
		return tup, nil
	case *hclspecpb.Spec_Attr:
		n, err := name(b.Attr.GetName())
		if err != nil {
			return nil, err
		}
		ty, err := parseType(b.Attr.GetType(), path)
		if err != nil {
			return nil, err
		}
		return &hcldec.AttrSpec{Name: n, Type: ty, Required: b.Attr.GetRequired()}, nil
	case *hclspecpb.Spec_BlockValue:
		n, err := name(b.BlockValue.GetName())
		if err != nil {
			return nil, err
		}
		nested, err := convertNested(b.BlockValue.GetNested(), path+".block")
		if err != nil {
			return nil, err
		}
		return &hcldec.BlockSpec{TypeName: n, Nested: nested, Required: b.BlockValue.GetRequired()}, nil
	case *hclspecpb.Spec_BlockAttrs:
		n, err := name(b.BlockAttrs.GetName())
		if err != nil {
			return nil, err
		}
		ty, err := parseType(b.BlockAttrs.GetType(), path)
		if err != nil {
			return nil, err
		}
		return &hcldec.BlockAttrsSpec{TypeName: n, ElementType: ty, Required: b.BlockAttrs.GetRequired()}, nil
	case *hclspecpb.Spec_BlockList:
		r, err := repeated(b.BlockList, name, path+".block_list")
		if err != nil {
			return nil, err
		}
		return &hcldec.BlockListSpec{TypeName: r.name, Nested: r.nested, MinItems: r.lo, MaxItems: r.hi}, nil
	case *hclspecpb.Spec_BlockSet:
		r, err := repeated(b.BlockSet, name, path+".block_set")
		if err != nil {
			return nil, err
		}
		return &hcldec.BlockSetSpec{TypeName: r.name, Nested: r.nested, MinItems: r.lo, MaxItems: r.hi}, nil
	case *hclspecpb.Spec_BlockMap:
		n, err := name(b.BlockMap.GetName())
		if err != nil {
			return nil, err
		}
		if len(b.BlockMap.GetLabels()) == 0 {
			return nil, fmt.Errorf("%s: block_map %q needs at least one label", path, n)
		}
		nested, err := convertNested(b.BlockMap.GetNested(), path+".block_map")
		if err != nil {
			return nil, err
		}
		if hcldec.ImpliedType(nested).HasDynamicTypes() {
			// hcldec panics on such a spec, in Nomad's agent as here.
			return nil, fmt.Errorf("%s: block_map %q: \"any\"-typed attributes are not allowed inside a block_map", path, n)
		}
		return &hcldec.BlockMapSpec{TypeName: n, LabelNames: append([]string(nil), b.BlockMap.GetLabels()...), Nested: nested}, nil
	case *hclspecpb.Spec_Literal:
		v, err := evalLiteral(b.Literal.GetValue(), path)
		if err != nil {
			return nil, err
		}
		return &hcldec.LiteralSpec{Value: v}, nil
	case *hclspecpb.Spec_Default:
		primary, err := convert(b.Default.GetPrimary(), "", path+".default.primary")
		if err != nil {
			return nil, err
		}
		def, err := convert(b.Default.GetDefault(), "", path+".default.default")
		if err != nil {
			return nil, err
		}
		return &hcldec.DefaultSpec{Primary: primary, Default: def}, nil
	default:
		return nil, fmt.Errorf("%s: invalid spec block: none of its members is set", path)
	}
}

func convertNested(spec *Spec, path string) (hcldec.Spec, error) {
	if spec == nil {
		return nil, fmt.Errorf("%s: nested spec is missing", path)
	}
	return convert(spec, "", path+".nested")
}

// repeatedBlock is what BlockList and BlockSet have in common.
type repeatedBlock interface {
	GetName() string
	GetNested() *Spec
	GetMinItems() uint64
	GetMaxItems() uint64
}

// repeatedSpec is a converted BlockList or BlockSet, before it is wrapped
// in the hcldec type of its kind.
type repeatedSpec struct {
	name   string
	nested hcldec.Spec
	lo, hi int
}

func repeated(b repeatedBlock, name func(string) (string, error), path string) (repeatedSpec, error) {
	n, err := name(b.GetName())
	if err != nil {
		return repeatedSpec{}, err
	}
	nested, err := convertNested(b.GetNested(), path)
	if err != nil {
		return repeatedSpec{}, err
	}
	lo, hi, err := itemLimits(b.GetMinItems(), b.GetMaxItems(), path)
	if err != nil {
		return repeatedSpec{}, err
	}
	return repeatedSpec{name: n, nested: nested, lo: lo, hi: hi}, nil
}

// itemLimits guards the uint64 -> int conversion hcldec needs.
func itemLimits(lo, hi uint64, path string) (int, int, error) {
	const maxInt = uint64(int(^uint(0) >> 1))
	if lo > maxInt || hi > maxInt {
		return 0, 0, fmt.Errorf("%s: min_items/max_items out of range", path)
	}
	if hi != 0 && lo > hi {
		return 0, 0, fmt.Errorf("%s: min_items %d is larger than max_items %d", path, lo, hi)
	}
	return int(lo), int(hi), nil
}

func parseType(expr, path string) (cty.Type, error) {
	if expr == "" {
		return cty.NilType, fmt.Errorf("%s: type expression is empty", path)
	}
	e, diags := hclsyntax.ParseExpression([]byte(expr), "type", hcl.InitialPos)
	if diags.HasErrors() {
		return cty.NilType, fmt.Errorf("%s: type %q: %w", path, expr, diags)
	}
	ty, diags := typeexpr.TypeConstraint(e)
	if diags.HasErrors() {
		return cty.NilType, fmt.Errorf("%s: type %q: %w", path, expr, diags)
	}
	return ty, nil
}

func evalLiteral(expr, path string) (v cty.Value, err error) {
	if expr == "" {
		return cty.NilVal, fmt.Errorf("%s: literal expression is empty", path)
	}
	e, diags := hclsyntax.ParseExpression([]byte(expr), "literal", hcl.InitialPos)
	if diags.HasErrors() {
		return cty.NilVal, fmt.Errorf("%s: literal %q: %w", path, expr, diags)
	}
	// Functions from go-cty's stdlib are not all hardened against every
	// argument; a schema is code, but keep a bad one from crashing the host.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: literal %q: evaluation failed: %v", path, expr, r)
		}
	}()
	val, diags := e.Value(&hcl.EvalContext{Functions: literalFunctions()})
	if diags.HasErrors() {
		return cty.NilVal, fmt.Errorf("%s: literal %q: %w", path, expr, diags)
	}
	if !val.IsWhollyKnown() {
		return cty.NilVal, errors.New(path + ": literal " + expr + " is not a constant")
	}
	return val, nil
}
