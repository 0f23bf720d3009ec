package fake

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseTopology: any topology file gives a topology or an error naming
// the file, never a panic; a topology that parses has resolvable labels.
// Run with: go test -fuzz FuzzParseTopology ./device/gpu/fake/
func FuzzParseTopology(f *testing.F) {
	files, _ := filepath.Glob("../../../example/topologies/*.hcl")
	for _, p := range files {
		if src, err := os.ReadFile(p); err == nil {
			f.Add(src)
		}
	}
	f.Add([]byte(twoGPUs))
	f.Fuzz(func(t *testing.T, src []byte) {
		top, err := ParseTopology("f.hcl", src)
		if err != nil {
			return
		}
		for label, uuid := range top.Labels {
			if got, err := top.Resolve(label); err != nil || got != uuid {
				t.Fatalf("label %q resolves to %q, %v; want %q", label, got, err, uuid)
			}
		}
	})
}

// FuzzControlLine: any control line is applied, ignored or refused with an
// error, never a panic.
func FuzzControlLine(f *testing.F) {
	for _, l := range []string{"xid a 79", "lost b", "recover 1", "stats a utilization=85 power_w=250.5", "# c", ""} {
		f.Add(l)
	}
	top, err := ParseTopology("t.hcl", []byte(twoGPUs))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, line string) {
		a, ok, err := top.ParseControlLine(line)
		if ok && err == nil && a.UUID == "" {
			t.Fatalf("%q: action without a GPU", line)
		}
	})
}
