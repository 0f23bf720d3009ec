package hclspec_test

import (
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"pgregory.net/rapid"

	"github.com/impact-sched/nomad-impact/plugin/hclspec"
	"github.com/impact-sched/nomad-impact/plugin/proto/hclspecpb"
)

func TestConvertRejectsWhatNomadRejects(t *testing.T) {
	cases := []struct {
		name string
		spec *hclspec.Spec
		want string
	}{
		{"empty spec", &hclspecpb.Spec{}, "invalid spec block"},
		{"nil spec", nil, "spec is missing"},
		{"attr without name under Default", hclspec.Object(hclspec.Attrs{
			"a": hclspec.Default(hclspec.Attr("", "string"), hclspec.String("x")),
		}), `object["a"].default.primary: name is empty`},
		{"attr without name at the top", hclspec.Attr("", "string"), "name is empty"},
		{"empty type", hclspec.Object(hclspec.Attrs{"a": hclspec.Attr("a", "")}), "type expression is empty"},
		{"bad type", hclspec.Object(hclspec.Attrs{"a": hclspec.Attr("a", "strin")}), `type "strin"`},
		{"unquoted string literal", hclspec.Object(hclspec.Attrs{"a": hclspec.AttrDefault("a", "string", "1m")}), `literal "1m"`},
		{"unknown function", hclspec.Literal(`format("%d", 1)`), "format"},
		{"block without nested", hclspec.Object(hclspec.Attrs{"b": hclspec.Block("b", nil)}), "nested spec is missing"},
		{"block map without labels", hclspec.Object(hclspec.Attrs{"b": hclspec.BlockMap("b", nil, hclspec.Object(nil))}), "at least one label"},
		{"any inside a block map", hclspec.Object(hclspec.Attrs{"b": hclspec.BlockMap("b", []string{"l"}, hclspec.Object(hclspec.Attrs{"v": hclspec.Attr("v", "any")}))}), "not allowed inside a block_map"},
		{"min above max", hclspec.Object(hclspec.Attrs{"b": hclspec.BlockList("b", 3, 2, hclspec.Object(nil))}), "min_items 3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := hclspec.Validate(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestImpliedNamesAndTypes(t *testing.T) {
	spec := hclspec.Object(hclspec.Attrs{
		"a":     hclspec.Attr("", "list(string)"),
		"b":     hclspec.AttrDefault("b", "number", "abs(-3)"),
		"blk":   hclspec.Block("", hclspec.Object(hclspec.Attrs{"x": hclspec.Attr("", "bool")})),
		"items": hclspec.BlockSet("item", 0, 0, hclspec.Object(hclspec.Attrs{"v": hclspec.Attr("", "string")})),
		"pair":  hclspec.Array(hclspec.String("k"), hclspec.Number(7)),
		"obj":   hclspec.Attr("", "object({ k = string, n = number })"),
	})
	ty, err := hclspec.ImpliedType(spec)
	if err != nil {
		t.Fatal(err)
	}
	want := cty.Object(map[string]cty.Type{
		"a":     cty.List(cty.String),
		"b":     cty.Number,
		"blk":   cty.Object(map[string]cty.Type{"x": cty.Bool}),
		"items": cty.Set(cty.Object(map[string]cty.Type{"v": cty.String})),
		"pair":  cty.Tuple([]cty.Type{cty.String, cty.Number}),
		"obj":   cty.Object(map[string]cty.Type{"k": cty.String, "n": cty.Number}),
	})
	if !ty.Equals(want) {
		t.Fatalf("type = %s\nwant %s", ty.GoString(), want.GoString())
	}
	v, err := hclspec.DecodeHCL(spec, []byte("a = [\"q\"]\nblk { x = true }\nitem { v = \"1\" }\nitem { v = \"2\" }"), "t.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if got := v.GetAttr("b"); !got.RawEquals(cty.NumberIntVal(3)) {
		t.Errorf("default via function: b = %#v", got)
	}
	if got := v.GetAttr("items").LengthInt(); got != 2 {
		t.Errorf("items = %d", got)
	}
	if got := v.GetAttr("pair"); !got.RawEquals(cty.TupleVal([]cty.Value{cty.StringVal("k"), cty.NumberIntVal(7)})) {
		t.Errorf("pair = %#v", got)
	}
}

func TestDecodeReportsHCLErrors(t *testing.T) {
	spec := hclspec.Object(hclspec.Attrs{"name": hclspec.RequiredAttr("name", "string"), "n": hclspec.Attr("n", "number")})
	for src, want := range map[string]string{
		``:                        `"name" is required`,
		"name = \"a\"\nn = \"x\"": "number is required",
		"name = \"a\"\nbogus = 1": "bogus",
	} {
		if _, err := hclspec.DecodeHCL(spec, []byte(src), "t.hcl"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", src, err, want)
		}
	}
	v, err := hclspec.DecodeJSON(spec, []byte(`{"name": "a", "n": 0.1}`), "t.json")
	if err != nil {
		t.Fatal(err)
	}
	if !v.GetAttr("n").RawEquals(cty.MustParseNumberVal("0.1")) {
		t.Errorf("n = %#v", v.GetAttr("n"))
	}
}

// TestQuoteRoundTrips: any string quoted by Quote evaluates back to itself
// as an HCL expression, including template sequences and control bytes.
func TestQuoteRoundTrips(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.OneOf(rapid.String(), rapid.StringMatching(`[$%{}"\\\n\t a-z]*`)).Draw(t, "s")
		expr, diags := hclsyntax.ParseExpression([]byte(hclspec.Quote(s)), "q", hcl.InitialPos)
		if diags.HasErrors() {
			t.Fatalf("Quote(%q) = %s does not parse: %v", s, hclspec.Quote(s), diags)
		}
		v, diags := expr.Value(nil)
		if diags.HasErrors() {
			t.Fatalf("Quote(%q) does not evaluate: %v", s, diags)
		}
		if got := v.AsString(); got != cty.StringVal(s).AsString() {
			t.Fatalf("Quote(%q) evaluates to %q", s, got)
		}
	})
}
