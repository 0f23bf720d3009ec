package nomad

import (
	"testing"

	"github.com/hashicorp/nomad/api"
)

// Admitting and parking again must give back the user's constraints
// untouched: their own distinct_hosts (empty LTarget) stays, ours goes.
func TestWithoutPinsKeepsUserConstraints(t *testing.T) {
	user := []*api.Constraint{
		{Operand: "distinct_hosts", RTarget: "true"},
		{LTarget: "${attr.cpu.arch}", RTarget: "amd64", Operand: "="},
	}
	admitted := append(append([]*api.Constraint{}, user...),
		&api.Constraint{LTarget: PinTarget, RTarget: "n1,n2", Operand: "set_contains_any"},
		ownDistinctHosts(),
	)
	got := withoutPins(admitted)
	if len(got) != len(user) {
		t.Fatalf("withoutPins kept %d constraints, want the user's %d: %+v", len(got), len(user), got)
	}
	for i := range user {
		if *got[i] != *user[i] {
			t.Errorf("constraint %d = %+v, want the user's %+v", i, *got[i], *user[i])
		}
	}
}
