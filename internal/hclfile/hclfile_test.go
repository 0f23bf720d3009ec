package hclfile

import (
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
)

type inner struct {
	Profile string `hcl:"profile,label"`
	Memory  int    `hcl:"memory_mib"`
}

type outer struct {
	Name string   `hcl:"name,label"`
	Size *int     `hcl:"size,optional"`
	MIG  []inner  `hcl:"mig,block"`
	Body hcl.Body `hcl:",body"`
}

type file struct {
	Version *string `hcl:"version,optional"`
	GPUs    []outer `hcl:"gpu,block"`
}

// Every problem of a file is reported, each with its file:line and the
// key it is about, however deep the block.
func TestDecodeNamesFileLineAndKey(t *testing.T) {
	src := `version = 1
gpu "a" {
  size = "big"
  mig "1g" {
    memory_mib = "lots"
  }
  colour = "red"
}
`
	var f file
	_, err := Decode([]byte(src), "t.hcl", &f)
	if err == nil {
		t.Fatal("want errors")
	}
	for _, want := range []string{
		`t.hcl:3,11-14: gpu "a" size: Unsuitable value type`,
		`t.hcl:5,19-23: gpu "a" mig "1g" memory_mib: Unsuitable value type`,
		`t.hcl:7,3-9: gpu "a" colour: Unsupported argument`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error\n%v\nlacks %q", err, want)
		}
	}
	if f.Version == nil || *f.Version != "1" {
		t.Errorf("a number converts to a string attribute: version = %v", f.Version)
	}
}

func TestErrorfAtAttribute(t *testing.T) {
	var f file
	if _, err := Decode([]byte("gpu \"a\" {\n  size = 3\n}\n"), "t.hcl", &f); err != nil {
		t.Fatal(err)
	}
	var err error = Errorf(f.GPUs[0].Body, `gpu "a"`, "size", "must be even, got %d", 3)
	if err.Error() != `t.hcl:2,3-11: gpu "a" size: must be even, got 3` {
		t.Fatalf("got %q", err)
	}
	err = Errorf(f.GPUs[0].Body, `gpu "a"`, "missing", "is required")
	if !strings.HasPrefix(err.Error(), `t.hcl:1,9-9: gpu "a" missing: `) {
		t.Fatalf("an unwritten attribute is placed at its block: %q", err)
	}
}
