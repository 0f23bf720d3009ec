package config_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"
	ctymsgpack "github.com/zclconf/go-cty/cty/msgpack"

	"github.com/impact-sched/nomad-impact/plugin/config"
	"github.com/impact-sched/nomad-impact/plugin/hclspec"
)

// schema exercises every hclspec node kind that yields a value.
func schema() *hclspec.Spec {
	return hclspec.Object(hclspec.Attrs{
		"name":    hclspec.RequiredAttr("name", "string"),
		"enabled": hclspec.AttrDefault("enabled", "bool", "true"),
		"count":   hclspec.AttrDefault("count", "number", "2"),
		"ratio":   hclspec.Attr("ratio", "number"),
		"period":  hclspec.Default(hclspec.Attr("period", "string"), hclspec.String("1m")),
		"tags":    hclspec.AttrDefault("tags", "list(string)", "[]"),
		"labels":  hclspec.Attr("labels", "map(string)"),
		"extra":   hclspec.Attr("extra", "any"),
		"env":     hclspec.BlockAttrs("env", "string", false),
		"limits": hclspec.Block("limits", hclspec.Object(hclspec.Attrs{
			"cpu": hclspec.RequiredAttr("", "number"),
		})),
		"mount": hclspec.BlockList("mount", 0, 3, hclspec.Object(hclspec.Attrs{
			"source":   hclspec.RequiredAttr("", "string"),
			"readonly": hclspec.AttrDefault("readonly", "bool", "false"),
		})),
		"port": hclspec.BlockMap("port", []string{"label"}, hclspec.Object(hclspec.Attrs{
			"to": hclspec.Attr("", "number"),
		})),
	})
}

type limits struct {
	CPU int `cty:"cpu"`
}

type mount struct {
	Source   string `cty:"source"`
	ReadOnly bool   `cty:"readonly"`
}

type port struct {
	To *int `cty:"to"`
}

type settings struct {
	Name    string            `cty:"name"`
	Enabled bool              `cty:"enabled"`
	Count   int               `cty:"count"`
	Ratio   *float64          `cty:"ratio"`
	Period  string            `cty:"period"`
	Tags    []string          `cty:"tags"`
	Labels  map[string]string `cty:"labels"`
	Extra   cty.Value         `cty:"extra"`
	Env     map[string]string `cty:"env"`
	Limits  *limits           `cty:"limits"`
	Mounts  []mount           `cty:"mount"`
	Ports   map[string]port   `cty:"port"`
}

// encode decodes HCL against the schema and encodes it as Nomad does.
func encode(t testing.TB, src string) []byte {
	t.Helper()
	v, err := hclspec.DecodeHCL(schema(), []byte(src), "test.hcl")
	if err != nil {
		t.Fatalf("decode HCL: %v", err)
	}
	b, err := config.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decoder(t testing.TB) *config.Decoder {
	t.Helper()
	d, err := config.NewDecoder(schema())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDecodeFromHCL(t *testing.T) {
	five := 5
	cases := []struct {
		name  string
		src   string
		check func(t *testing.T, s settings)
	}{
		{"defaults", `name = "a"`, func(t *testing.T, s settings) {
			if s.Name != "a" || !s.Enabled || s.Count != 2 || s.Period != "1m" {
				t.Errorf("defaults not applied: %+v", s)
			}
			if s.Ratio != nil || s.Labels != nil || s.Limits != nil || s.Env != nil {
				t.Errorf("unset optional values should be nil: %+v", s)
			}
			if len(s.Tags) != 0 || len(s.Mounts) != 0 || len(s.Ports) != 0 {
				t.Errorf("absent lists should be empty: %+v", s)
			}
			if !s.Extra.IsNull() {
				t.Errorf("extra = %#v, want null", s.Extra)
			}
		}},
		{"decimal that arrives as a string", `
name = "a"
ratio = 0.1`, func(t *testing.T, s settings) {
			if s.Ratio == nil || *s.Ratio != 0.1 {
				t.Errorf("ratio = %v, want 0.1", s.Ratio)
			}
		}},
		{"exact binary fraction", `
name = "a"
ratio = 0.5`, func(t *testing.T, s settings) {
			if s.Ratio == nil || *s.Ratio != 0.5 {
				t.Errorf("ratio = %v", s.Ratio)
			}
		}},
		{"large and negative numbers", `
name = "a"
count = 300
ratio = -5`, func(t *testing.T, s settings) {
			if s.Count != 300 || s.Ratio == nil || *s.Ratio != -5 {
				t.Errorf("count=%d ratio=%v", s.Count, s.Ratio)
			}
		}},
		{"collections and blocks", `
name = "a"
tags = ["x", "y"]
labels = { zone = "b" }
env { A = "1" }
limits { cpu = 500 }
mount { source = "/a" }
mount {
  source = "/b"
  readonly = true
}
port "http" { to = 5 }
port "raw" {}`, func(t *testing.T, s settings) {
			if strings.Join(s.Tags, ",") != "x,y" || s.Labels["zone"] != "b" || s.Env["A"] != "1" {
				t.Errorf("collections: %+v", s)
			}
			if s.Limits == nil || s.Limits.CPU != 500 {
				t.Errorf("limits = %+v", s.Limits)
			}
			if len(s.Mounts) != 2 || s.Mounts[0] != (mount{"/a", false}) || s.Mounts[1] != (mount{"/b", true}) {
				t.Errorf("mounts = %+v", s.Mounts)
			}
			if s.Ports["http"].To == nil || *s.Ports["http"].To != five || s.Ports["raw"].To != nil {
				t.Errorf("ports = %+v", s.Ports)
			}
		}},
		{"any-typed attribute", `
name = "a"
extra = { list = [1, "two"], flag = true, n = 0.1 }`, func(t *testing.T, s settings) {
			if !s.Extra.Type().IsObjectType() {
				t.Fatalf("extra type = %s", s.Extra.Type().FriendlyName())
			}
			if got := s.Extra.GetAttr("flag"); !got.RawEquals(cty.True) {
				t.Errorf("extra.flag = %#v", got)
			}
			if l := s.Extra.GetAttr("list"); !l.Type().IsTupleType() || l.LengthInt() != 2 {
				t.Errorf("extra.list = %#v", l)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s settings
			if err := decoder(t).Decode(encode(t, tc.src), &s); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			tc.check(t, s)
		})
	}
}

// TestUnmarshalAgreesWithGoCty checks our decoder against go-cty's own for
// schemas without "any" (where go-cty's decoder applies as is).
func TestUnmarshalAgreesWithGoCty(t *testing.T) {
	ty := cty.Object(map[string]cty.Type{
		"n": cty.Number, "s": cty.String, "b": cty.Bool,
		"l": cty.List(cty.Number), "set": cty.Set(cty.String), "m": cty.Map(cty.Bool),
		"t": cty.Tuple([]cty.Type{cty.String, cty.Number}),
		"o": cty.Object(map[string]cty.Type{"x": cty.Number}),
	})
	vals := []cty.Value{
		cty.ObjectVal(map[string]cty.Value{
			"n": cty.MustParseNumberVal("0.1"), "s": cty.StringVal("héllo"), "b": cty.True,
			"l":   cty.ListVal([]cty.Value{cty.NumberIntVal(-1), cty.NumberUIntVal(math.MaxUint64), cty.NumberFloatVal(1.5), cty.MustParseNumberVal("1e20")}),
			"set": cty.SetVal([]cty.Value{cty.StringVal("a"), cty.StringVal("b")}),
			"m":   cty.MapVal(map[string]cty.Value{"k": cty.False}),
			"t":   cty.TupleVal([]cty.Value{cty.StringVal("x"), cty.NumberIntVal(math.MinInt64)}),
			"o":   cty.ObjectVal(map[string]cty.Value{"x": cty.PositiveInfinity}),
		}),
		cty.ObjectVal(map[string]cty.Value{
			"n": cty.NullVal(cty.Number), "s": cty.NullVal(cty.String), "b": cty.NullVal(cty.Bool),
			"l": cty.ListValEmpty(cty.Number), "set": cty.SetValEmpty(cty.String), "m": cty.MapValEmpty(cty.Bool),
			"t": cty.NullVal(cty.Tuple([]cty.Type{cty.String, cty.Number})), "o": cty.NullVal(cty.Object(map[string]cty.Type{"x": cty.Number})),
		}),
	}
	for i, v := range vals {
		b, err := ctymsgpack.Marshal(v, ty)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ctymsgpack.Unmarshal(b, ty)
		if err != nil {
			t.Fatal(err)
		}
		got, err := config.Unmarshal(b, ty)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if !got.RawEquals(want) {
			t.Errorf("case %d:\n got %#v\nwant %#v", i, got, want)
		}
	}
}

// TestNumberEncodings feeds every MessagePack number form Nomad may send.
func TestNumberEncodings(t *testing.T) {
	ty := cty.Object(map[string]cty.Type{"n": cty.Number})
	prefix := []byte{0x81, 0xa1, 'n'} // {"n": ...}
	cases := []struct {
		name string
		enc  []byte
		want string
	}{
		{"positive fixint", []byte{0x07}, "7"},
		{"negative fixint", []byte{0xfb}, "-5"},
		{"uint8", []byte{0xcc, 0xff}, "255"},
		{"uint16", []byte{0xcd, 0x01, 0x2c}, "300"},
		{"uint32", []byte{0xce, 0, 1, 0, 0}, "65536"},
		{"uint64 max", []byte{0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "18446744073709551615"},
		{"int8", []byte{0xd0, 0x80}, "-128"},
		{"int16", []byte{0xd1, 0xff, 0x00}, "-256"},
		{"int32", []byte{0xd2, 0xff, 0xff, 0xff, 0xfe}, "-2"},
		{"int64 min", []byte{0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0}, "-9223372036854775808"},
		{"float32", []byte{0xca, 0x3f, 0xc0, 0, 0}, "1.5"},
		{"float64", []byte{0xcb, 0x3f, 0xe0, 0, 0, 0, 0, 0, 0}, "0.5"},
		{"decimal string", append([]byte{0xa3}, "0.1"...), "0.1"},
		{"huge string", append([]byte{0xb5}, "100000000000000000000"...), "100000000000000000000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := config.Unmarshal(append(append([]byte(nil), prefix...), tc.enc...), ty)
			if err != nil {
				t.Fatal(err)
			}
			got := v.GetAttr("n").AsBigFloat().Text('f', -1)
			if got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestDecodeErrorsNameTheField(t *testing.T) {
	good := func() map[string]cty.Value {
		v, err := hclspec.DecodeHCL(schema(), []byte(`name = "a"
mount { source = "/a" }`), "t.hcl")
		if err != nil {
			t.Fatal(err)
		}
		return v.AsValueMap()
	}
	with := func(k string, v cty.Value) []byte {
		m := good()
		m[k] = v
		b, err := config.Marshal(cty.ObjectVal(m))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	without := func(k string) []byte {
		m := good()
		delete(m, k)
		b, err := config.Marshal(cty.ObjectVal(m))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	mounts := func(n int, source cty.Value) cty.Value {
		var l []cty.Value
		for range n {
			l = append(l, cty.ObjectVal(map[string]cty.Value{"source": source, "readonly": cty.False}))
		}
		return cty.ListVal(l)
	}
	cases := []struct {
		name      string
		data      []byte
		field     string // "" = whole config
		wantInMsg string
	}{
		{"wrong scalar type", with("enabled", cty.StringVal("yes")), "enabled", "expected bool, got string"},
		{"number is not a number", with("count", cty.StringVal("many")), "count", `expected number, got string "many"`},
		{"fraction into an int field", with("count", cty.NumberFloatVal(1.5)), "count", "whole number"},
		{"out of range for int", with("count", cty.MustParseNumberVal("1e30")), "count", ""},
		{"required attribute null", with("name", cty.NullVal(cty.String)), "name", "required attribute is missing"},
		{"attribute missing from the map", without("period"), "period", "missing from the config"},
		{"unexpected field", with("bogus", cty.True), "bogus", "unexpected field"},
		{"list of wrong element type", with("tags", cty.ListVal([]cty.Value{cty.True})), "tags[0]", "expected string, got bool"},
		{"nested block field", with("mount", mounts(1, cty.NumberIntVal(3))), "mount[0].source", "expected string, got int"},
		{"nested required block attribute", with("mount", mounts(1, cty.NullVal(cty.String))), "mount[0].source", "required attribute is missing"},
		{"too many blocks", with("mount", mounts(4, cty.StringVal("/x"))), "mount", "at most 3 blocks"},
		{"block list null", with("mount", cty.NullVal(cty.List(cty.Object(map[string]cty.Type{"source": cty.String, "readonly": cty.Bool})))), "mount", "null"},
		{"not a map at the top", []byte{0x93, 1, 2, 3}, "", "expected object"},
		{"empty bytes", nil, "", "no bytes received"},
		{"garbage", []byte("\xc1\xff\x00garbage"), "", "invalid MessagePack byte 0xc1"},
		{"truncated", with("name", cty.StringVal("abcdef"))[:20], "", "truncated"},
		{"trailing bytes", append(with("name", cty.StringVal("a")), 0x01), "", "trailing bytes"},
		{"NaN", append([]byte{0x81, 0xa5, 'r', 'a', 't', 'i', 'o'}, 0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 1), "", ""},
		{"huge declared length", []byte{0xdf, 0xff, 0xff, 0xff, 0xff}, "", "exceeds"},
		{"non-string key", []byte{0x81, 0x01, 0x02}, "", "map key is int"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s settings
			err := decoder(t).Decode(tc.data, &s)
			if err == nil {
				t.Fatal("no error")
			}
			var fe *config.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T) is not a *FieldError", err, err)
			}
			if tc.field != "" && fe.Field() != tc.field {
				t.Errorf("field = %q, want %q (error: %v)", fe.Field(), tc.field, err)
			}
			if tc.field != "" && !strings.Contains(err.Error(), `"`+tc.field+`"`) {
				t.Errorf("message %q does not name %q", err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.wantInMsg) {
				t.Errorf("message %q does not contain %q", err, tc.wantInMsg)
			}
		})
	}
}

func TestStructMustMatchSchema(t *testing.T) {
	type partial struct {
		Name string `cty:"name"`
	}
	err := decoder(t).Decode(encode(t, `name = "a"`), &partial{})
	if err == nil || !strings.Contains(err.Error(), "unsupported attribute") {
		t.Fatalf("err = %v, want an unsupported attribute error", err)
	}
}

func TestDynamicInference(t *testing.T) {
	ty := cty.Object(map[string]cty.Type{"x": cty.DynamicPseudoType})
	cases := []struct {
		name string
		val  cty.Value
	}{
		{"string", cty.StringVal("s")},
		{"number", cty.NumberIntVal(4)},
		{"bool", cty.True},
		{"null", cty.NullVal(cty.DynamicPseudoType)},
		{"tuple", cty.TupleVal([]cty.Value{cty.StringVal("a"), cty.NumberIntVal(1)})},
		{"object", cty.ObjectVal(map[string]cty.Value{"k": cty.TupleVal([]cty.Value{cty.True})})},
		{"empty tuple", cty.EmptyTupleVal},
		{"empty object", cty.EmptyObjectVal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := cty.ObjectVal(map[string]cty.Value{"x": tc.val})
			b, err := config.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			got, err := config.Unmarshal(b, ty)
			if err != nil {
				t.Fatal(err)
			}
			if !got.GetAttr("x").RawEquals(tc.val) {
				t.Errorf("got %#v, want %#v", got.GetAttr("x"), tc.val)
			}
		})
	}
}

func TestNestingDepthIsBounded(t *testing.T) {
	var b []byte
	for range 10000 {
		b = append(b, 0x91) // array of one element
	}
	b = append(b, 0xc0)
	_, err := config.Unmarshal(b, cty.DynamicPseudoType)
	if err == nil || !strings.Contains(err.Error(), "levels deep") {
		t.Fatalf("err = %v", err)
	}
}

func TestFormatPath(t *testing.T) {
	p := cty.GetAttrPath("a").Index(cty.NumberIntVal(2)).GetAttr("b").Index(cty.StringVal("k"))
	if got := config.FormatPath(p); got != `a[2].b["k"]` {
		t.Errorf("got %s", got)
	}
}

// TestBlocksWithAnyTypedAttributes: hcldec turns repeated blocks whose
// element types differ (because of "any") into a tuple rather than a list;
// decoding must follow. ("any" inside a block_map is refused by Convert.)
func TestBlocksWithAnyTypedAttributes(t *testing.T) {
	spec := hclspec.Object(hclspec.Attrs{
		"item":  hclspec.BlockList("item", 0, 0, hclspec.Object(hclspec.Attrs{"v": hclspec.Attr("v", "any")})),
		"named": hclspec.BlockMap("named", []string{"name"}, hclspec.Object(hclspec.Attrs{"v": hclspec.Attr("v", "string")})),
	})
	v, err := hclspec.DecodeHCL(spec, []byte(`
item { v = 1 }
item { v = "s" }
named "a" { v = "x" }
named "b" {}`), "t.hcl")
	if err != nil {
		t.Fatal(err)
	}
	b, err := config.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := config.NewDecoder(spec)
	if err != nil {
		t.Fatal(err)
	}
	got, err := dec.Value(b)
	if err != nil {
		t.Fatal(err)
	}
	if !got.RawEquals(v) {
		t.Errorf("got  %#v\nwant %#v", got, v)
	}
	var out struct {
		Items []struct {
			V cty.Value `cty:"v"`
		} `cty:"item"`
		Named map[string]struct {
			V cty.Value `cty:"v"`
		} `cty:"named"`
	}
	if err := dec.Decode(b, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Items) != 2 || !out.Items[1].V.RawEquals(cty.StringVal("s")) || !out.Named["a"].V.RawEquals(cty.StringVal("x")) {
		t.Errorf("decoded %+v", out)
	}
}
