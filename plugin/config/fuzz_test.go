package config_test

import (
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/impact-sched/nomad-impact/plugin/config"
	"github.com/impact-sched/nomad-impact/plugin/hclspec"
)

// FuzzDecode: arbitrary bytes must give a value or an error, never a panic,
// and a value must survive a round trip through Nomad's encoding.
// Run with: go test -fuzz FuzzDecode ./plugin/config/
func FuzzDecode(f *testing.F) {
	seeds := []string{
		`name = "a"`,
		"name = \"a\"\nratio = 0.1\ntags = [\"x\"]\nextra = { a = [1, \"b\"] }\nmount { source = \"/x\" }\nport \"p\" { to = 1 }",
		"name = \"a\"\nlabels = { k = \"v\" }\nenv { A = \"1\" }\nlimits { cpu = 1 }",
	}
	for _, s := range seeds {
		v, err := hclspec.DecodeHCL(schema(), []byte(s), "seed.hcl")
		if err != nil {
			f.Fatal(err)
		}
		b, err := config.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xc1})
	f.Add([]byte{0x81, 0xa1, 'x', 0xdd, 0xff, 0xff, 0xff, 0xff})
	dec, err := config.NewDecoder(schema())
	if err != nil {
		f.Fatal(err)
	}
	// A type without "any": there a number that go-cty re-encodes as a
	// decimal string would come back as a string, the inherent ambiguity of
	// "any" that Nomad's own decoding shares.
	typed := cty.Object(map[string]cty.Type{
		"n": cty.Number, "s": cty.String, "b": cty.Bool,
		"l": cty.List(cty.Number), "set": cty.Set(cty.String), "m": cty.Map(cty.Bool),
		"t": cty.Tuple([]cty.Type{cty.String, cty.Number}),
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		var s settings
		_ = dec.Decode(data, &s)
		_, _ = config.Unmarshal(data, cty.DynamicPseudoType)
		v, err := config.Unmarshal(data, typed)
		if err != nil {
			return
		}
		b, err := config.Marshal(v)
		if err != nil {
			t.Fatalf("re-marshal of %#v: %v", v, err)
		}
		v2, err := config.Unmarshal(b, typed)
		if err != nil {
			t.Fatalf("round trip: %v", err)
		}
		if !v2.Equals(v).True() {
			t.Fatalf("round trip changed %#v into %#v", v, v2)
		}
	})
}
