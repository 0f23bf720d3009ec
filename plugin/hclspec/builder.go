// Package hclspec builds the hclspec schemas a Nomad plugin returns from
// ConfigSchema and TaskConfigSchema, and converts them to HCL's hcldec specs
// the way the Nomad client does. The conversion gives the cty type a config
// value has on the wire (see package plugin/config) and lets tests decode HCL
// exactly as an agent would before sending it to a plugin.
//
// Builders return *hclspecpb.Spec directly, so a schema can be put into a
// ConfigSchemaResponse or TaskConfigSchemaResponse as is:
//
//	hclspec.Object(hclspec.Attrs{
//		"enabled": hclspec.AttrDefault("enabled", "bool", "true"),
//		"period":  hclspec.AttrDefault("period", "string", hclspec.Quote("1m")),
//		"image":   hclspec.RequiredAttr("image", "string"),
//		"mount": hclspec.BlockList("mount", 0, 0, hclspec.Object(hclspec.Attrs{
//			"source": hclspec.RequiredAttr("", "string"), // name implied by key
//		})),
//	})
//
// Remember Nomad's rules: a Literal is an HCL expression (a string needs its
// own quotes; use Quote or String), and a child of Default gets no implied
// name, so an Attr under Default must carry its own name (AttrDefault does).
package hclspec

import (
	"strconv"
	"strings"

	"github.com/impact-sched/nomad-impact/plugin/proto/hclspecpb"
)

// Spec is the protobuf schema node; an alias so callers need not import
// hclspecpb just to name the type.
type Spec = hclspecpb.Spec

// Attrs maps an object's output property names to their specs. A key is
// also the implied HCL name of a direct Attr/Block child whose name is "".
type Attrs = map[string]*Spec

// Object yields an object with one property per key of attrs.
func Object(attrs Attrs) *Spec {
	if attrs == nil {
		attrs = Attrs{}
	}
	return &Spec{Block: &hclspecpb.Spec_Object{Object: &hclspecpb.Object{Attributes: attrs}}}
}

// Array yields a tuple with one element per spec.
func Array(values ...*Spec) *Spec {
	return &Spec{Block: &hclspecpb.Spec_Array{Array: &hclspecpb.Array{Values: values}}}
}

// Attr reads an optional attribute of type typeExpr (an HCL type
// expression: string, number, bool, any, list(T), set(T), map(T),
// object({...}), tuple([...])). An absent attribute is null.
func Attr(name, typeExpr string) *Spec {
	return &Spec{Block: &hclspecpb.Spec_Attr{Attr: &hclspecpb.Attr{Name: name, Type: typeExpr}}}
}

// RequiredAttr reads an attribute that must be present.
func RequiredAttr(name, typeExpr string) *Spec {
	return &Spec{Block: &hclspecpb.Spec_Attr{Attr: &hclspecpb.Attr{Name: name, Type: typeExpr, Required: true}}}
}

// AttrDefault reads an optional attribute and falls back to the HCL literal
// expression def when it is absent. The attribute carries its own name, as
// Default requires.
func AttrDefault(name, typeExpr, def string) *Spec {
	return Default(Attr(name, typeExpr), Literal(def))
}

// Block reads at most one nested block named name, whose body is decoded
// with nested. An absent block is null.
func Block(name string, nested *Spec) *Spec {
	return &Spec{Block: &hclspecpb.Spec_BlockValue{BlockValue: &hclspecpb.Block{Name: name, Nested: nested}}}
}

// BlockAttrs reads a block whose attributes all have type elemType into a
// map.
func BlockAttrs(name, elemType string, required bool) *Spec {
	return &Spec{Block: &hclspecpb.Spec_BlockAttrs{BlockAttrs: &hclspecpb.BlockAttrs{Name: name, Type: elemType, Required: required}}}
}

// BlockList reads repeated blocks into a list; minItems/maxItems 0 mean no
// limit. Absent blocks give an empty list.
func BlockList(name string, minItems, maxItems uint64, nested *Spec) *Spec {
	return &Spec{Block: &hclspecpb.Spec_BlockList{BlockList: &hclspecpb.BlockList{Name: name, MinItems: minItems, MaxItems: maxItems, Nested: nested}}}
}

// BlockSet reads repeated blocks into a set.
func BlockSet(name string, minItems, maxItems uint64, nested *Spec) *Spec {
	return &Spec{Block: &hclspecpb.Spec_BlockSet{BlockSet: &hclspecpb.BlockSet{Name: name, MinItems: minItems, MaxItems: maxItems, Nested: nested}}}
}

// BlockMap reads labelled blocks into a map, one map level per label name.
func BlockMap(name string, labels []string, nested *Spec) *Spec {
	return &Spec{Block: &hclspecpb.Spec_BlockMap{BlockMap: &hclspecpb.BlockMap{Name: name, Labels: labels, Nested: nested}}}
}

// Literal yields the value of the HCL expression expr ("true", "5", "[]",
// "\"text\""). Use String, Bool or Number for plain constants.
func Literal(expr string) *Spec {
	return &Spec{Block: &hclspecpb.Spec_Literal{Literal: &hclspecpb.Literal{Value: expr}}}
}

// Default yields primary's value, or def's when primary is null.
func Default(primary, def *Spec) *Spec {
	return &Spec{Block: &hclspecpb.Spec_Default{Default: &hclspecpb.Default{Primary: primary, Default: def}}}
}

// String is a Literal of the string s.
func String(s string) *Spec { return Literal(Quote(s)) }

// Bool is a Literal of b.
func Bool(b bool) *Spec { return Literal(strconv.FormatBool(b)) }

// Number is a Literal of the integer n.
func Number(n int64) *Spec { return Literal(strconv.FormatInt(n, 10)) }

// Quote renders s as an HCL quoted string literal, escaping the template
// sequences "${" and "%{" so the text is taken verbatim.
func Quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i, r := range s {
		switch r {
		case '\\':
			b.WriteString(`\\`)
		case '"':
			b.WriteString(`\"`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '$', '%':
			b.WriteRune(r)
			if i+1 < len(s) && s[i+1] == '{' {
				b.WriteRune(r)
			}
		default:
			if r < 0x20 || r == 0x7f {
				b.WriteString(`\u`)
				h := strconv.FormatInt(int64(r), 16)
				b.WriteString(strings.Repeat("0", 4-len(h)) + h)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
