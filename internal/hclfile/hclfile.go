// Package hclfile is how the project's own HCL files (the simulator's
// cluster file, impact-gpu's fake topology file) are decoded: gohcl's
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
// to a struct with gohcl's `hcl:"..."` tags). Every problem is reported,
// one per line, as "file:line,col: key: what" (see Error); what did decode
// is left in v.
func Decode(src []byte, filename string, v any) error {
	f, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return errorOf(nil, diags)
	}
	body, _ := f.Body.(*hclsyntax.Body)
	return errorOf(body, gohcl.DecodeBody(f.Body, nil, v))
}

// Error is every error diagnostic of one decode, each naming where it is
// and the key it is about.
type Error []string

func (e Error) Error() string { return strings.Join(e, "\n") }

func errorOf(body *hclsyntax.Body, diags hcl.Diagnostics) error {
	var out Error
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += "; " + d.Detail
		}
		if d.Subject == nil {
			out = append(out, msg)
			continue
		}
		if key := KeyAt(body, *d.Subject); key != "" {
			msg = key + ": " + msg
		}
		out = append(out, d.Subject.String()+": "+msg)
	}
	if len(out) == 0 {
		return nil
	}
	return out
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
				part := b.Type
				for _, l := range b.Labels {
					part += " " + strconv.Quote(l)
				}
				path = append(path, part)
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

// Errorf is an error at an attribute of a decoded block: "file:line,col:
// key: what", as Decode's are.
func Errorf(body hcl.Body, key, attr string, format string, args ...any) error {
	k := attr
	if key != "" {
		k = key + " " + attr
	}
	return fmt.Errorf("%s: %s: %s", AttrRange(body, attr), k, fmt.Sprintf(format, args...))
}

func contains(outer, inner hcl.Range) bool {
	return outer.Filename == inner.Filename && outer.Start.Byte <= inner.Start.Byte && inner.End.Byte <= outer.End.Byte
}
