package impact

import (
	"bytes"
	"os"
	"testing"
)

// The built-in policy is shown to users as example/sim/policy.hcl (the
// report names it): the two copies must not drift apart.
func TestBuiltinPolicyMatchesExample(t *testing.T) {
	example, err := os.ReadFile("../../../example/sim/policy.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(example, DefaultPolicyHCL) {
		t.Fatal("scheduler/sim/impact/policy.hcl and example/sim/policy.hcl differ: keep the built-in policy and its documented copy the same")
	}
}
