// Package hclfile is how the project's own HCL files (the policy file,
// the simulator's cluster file, impact-gpu's fake topology file) are
// decoded: gohcl's
// struct tags name each key once, and every error names the file, the line
// and the key at fault. (Plugin configs keep Nomad's hclspec wire schema:
// see plugin/hclspec.)
package hclfile

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Decode parses src, native HCL syntax, and decodes it into v (a pointer
// to a struct with gohcl's `hcl:"..."` tags). Every problem is reported
// (an Errors), each naming the file, line and key; what did decode is left
// in v. The parsed body is returned for Positions and KeyAt (nil when src
// is not HCL).
func Decode(src []byte, filename string, v any) (*hclsyntax.Body, error) {
	f, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, errorsOf(nil, diags, true)
	}
	body, _ := f.Body.(*hclsyntax.Body)
	return body, errorsOf(body, gohcl.DecodeBody(f.Body, nil, v), false)
}

// Problem is one error of a file: where, the key it is about ("" when
// none holds it) and what is wrong.
type Problem struct {
	Range hcl.Range
	Key   string
	Msg   string
	// Syntax: the file is not valid HCL (nothing was decoded).
	Syntax bool
}

func (p *Problem) Error() string {
	if p.Key == "" {
		return p.Range.String() + ": " + p.Msg
	}
	return p.Range.String() + ": " + p.Key + ": " + p.Msg
}

// Errors is every problem of one decode, one per line.
type Errors []*Problem

func (e Errors) Error() string {
	parts := make([]string, len(e))
	for i, p := range e {
		parts[i] = p.Error()
	}
	return strings.Join(parts, "\n")
}

func errorsOf(body *hclsyntax.Body, diags hcl.Diagnostics, syntax bool) error {
	var out Errors
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += "; " + d.Detail
		}
		p := &Problem{Msg: msg, Syntax: syntax}
		if d.Subject != nil {
			p.Range = *d.Subject
			p.Key = KeyAt(body, *d.Subject)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Positions maps the key (as KeyAt spells it) of every block and
// attribute body writes to where: a block's header, an attribute's whole
// definition. A key written twice keeps its first place.
func Positions(body *hclsyntax.Body) map[string]hcl.Range {
	out := map[string]hcl.Range{}
	var walk func(b *hclsyntax.Body, prefix string)
	walk = func(b *hclsyntax.Body, prefix string) {
		for name, a := range b.Attributes {
			if _, dup := out[prefix+name]; !dup {
				out[prefix+name] = a.SrcRange
			}
		}
		for _, blk := range b.Blocks {
			key := prefix + blockKey(blk)
			if _, dup := out[key]; !dup {
				out[key] = blk.DefRange()
			}
			walk(blk.Body, key+" ")
		}
	}
	if body != nil {
		walk(body, "")
	}
	return out
}

func blockKey(b *hclsyntax.Block) string {
	k := b.Type
	for _, l := range b.Labels {
		k += " " + strconv.Quote(l)
	}
	return k
}

// KeyAt names the innermost attribute or block of body that holds r, as
// the files' errors spell it: block types with their labels quoted, then
// the attribute (`node_group "dgx" gpus`); "" when r is outside them all.
func KeyAt(body *hclsyntax.Body, r hcl.Range) string {
	var path []string
	for body != nil {
		next := (*hclsyntax.Body)(nil)
		for name, a := range body.Attributes {
			if contains(a.SrcRange, r) {
				return strings.Join(append(path, name), " ")
			}
		}
		for _, b := range body.Blocks {
			if contains(b.Range(), r) {
				path = append(path, blockKey(b))
				next = b.Body
				break
			}
		}
		body = next
	}
	return strings.Join(path, " ")
}

// AttrRange is where the attribute name of body (a block's body, as
// gohcl's `hcl:",body"` tag captures it) was written; when it was not,
// the body's missing-item range (where its block opens).
func AttrRange(body hcl.Body, name string) hcl.Range {
	if b, ok := body.(*hclsyntax.Body); ok {
		if a, ok := b.Attributes[name]; ok {
			return a.SrcRange
		}
	}
	return body.MissingItemRange()
}

// Line is the line a decoded block starts on, from its body (as gohcl's
// `hcl:",body"` tag captures it); 0 when unknown.
func Line(body hcl.Body) int {
	if b, ok := body.(*hclsyntax.Body); ok {
		return b.SrcRange.Start.Line
	}
	return 0
}

// Errorf is a Problem at an attribute of a decoded block (key names the
// block), as Decode's are.
func Errorf(body hcl.Body, key, attr string, format string, args ...any) *Problem {
	k := attr
	if key != "" {
		k = key + " " + attr
	}
	return &Problem{Range: AttrRange(body, attr), Key: k, Msg: fmt.Sprintf(format, args...)}
}

func contains(outer, inner hcl.Range) bool {
	return outer.Filename == inner.Filename && outer.Start.Byte <= inner.Start.Byte && inner.End.Byte <= outer.End.Byte
}
