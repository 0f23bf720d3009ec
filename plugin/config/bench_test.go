package config_test

import (
	"testing"
)

// BenchmarkDecode measures decoding a typical plugin config into a struct
// (run with -bench; plain tests skip it).
func BenchmarkDecode(b *testing.B) {
	data := encode(b, "name = \"a\"\nratio = 0.1\ntags = [\"x\", \"y\"]\nmount { source = \"/a\" }\nport \"p\" { to = 1 }")
	dec := decoder(b)
	b.ReportAllocs()
	for b.Loop() {
		var s settings
		if err := dec.Decode(data, &s); err != nil {
			b.Fatal(err)
		}
	}
}
