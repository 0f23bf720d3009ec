package nomadbarrier

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/gang"
)

func TestDepartedMembers(t *testing.T) {
	t.Parallel()
	r := func(alloc string, idx int) ServiceRegistration {
		tags := []string{}
		if idx >= 0 {
			tags = append(tags, fmt.Sprintf("alloc_index=%d", idx))
		}
		return ServiceRegistration{AllocID: alloc, Tags: tags}
	}
	cur := func(regs ...ServiceRegistration) map[string]ServiceRegistration { return byAlloc(regs) }
	cases := []struct {
		name    string
		seen    map[string]int
		current map[string]ServiceRegistration
		size    int
		want    []string
	}{
		{"still forming: not everyone seen", map[string]int{"a": 0}, cur(r("b", 1)), 3, nil},
		{"everyone seen, one left", map[string]int{"a": 0, "b": 1}, cur(r("b", 1)), 2, []string{"a"}},
		{"self counts though never listed", map[string]int{"a": 0}, cur(), 2, []string{"a"}},
		{"replaced under the same alloc index", map[string]int{"a": 0, "b": 1}, cur(r("a2", 0), r("b", 1)), 2, nil},
		{"back again", map[string]int{"a": 0, "b": 1}, cur(r("a", 0), r("b", 1)), 2, nil},
		{"untagged member left", map[string]int{"a": -1, "b": -1, "c": -1}, cur(r("c", -1)), 3, []string{"a", "b"}},
	}
	for _, c := range cases {
		if got := departedMembers(c.seen, c.current, "b", c.size); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: departed %v, want %v", c.name, got, c.want)
		}
	}
}

func TestJobAllocCount(t *testing.T) {
	t.Parallel()
	body := `{"TaskGroups":[{"Name":"a","Count":3},{"Name":"b","Count":2},{"Name":"c"}]}`
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/job/train" || r.URL.Query().Get("namespace") != "ml" || r.Header.Get("X-Nomad-Token") != "tok" {
			http.Error(w, "unexpected "+r.URL.String(), http.StatusNotFound)
			return
		}
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	defer srv.Close()
	n, err := NewNomadClient(srv.URL, "tok")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got, err := n.JobAllocCount(ctx, "ml", "train"); err != nil || got != 6 {
		t.Fatalf("count %d, %v; want 3+2+1 (a group without count has 1)", got, err)
	}
	status, body = http.StatusForbidden, "Permission denied"
	_, err = n.JobAllocCount(ctx, "ml", "train")
	var apiErr *gang.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != http.StatusForbidden || !strings.Contains(err.Error(), "nomad job train") {
		t.Fatalf("forbidden: %v", err)
	}
	status, body = http.StatusOK, `{"TaskGroups":[{"Name":"a","Count":0}]}`
	if _, err := n.JobAllocCount(ctx, "ml", "train"); err == nil || !strings.Contains(err.Error(), "no allocations") {
		t.Fatalf("zero count: %v", err)
	}
}

// NomadHold outlasts a poll by the slowest member plus a margin, and a
// lost gang is given up only after a departed member's hold.
func TestNomadHoldAndLostGrace(t *testing.T) {
	t.Parallel()
	for _, poll := range []time.Duration{100 * time.Millisecond, time.Second, 5 * time.Second} {
		if h := NomadHold(poll); h < 2*poll+time.Second {
			t.Errorf("poll %s: hold %s", poll, h)
		}
		if g := nomadLostGrace(poll); g <= NomadHold(poll)+poll {
			t.Errorf("poll %s: lost grace %s does not outlast a hold (%s) and a poll", poll, g, NomadHold(poll))
		}
	}
}

// Ranks depend on who the members are, never on the order Nomad lists their
// services in.
func TestRanksIndependentOfListingOrder(t *testing.T) {
	t.Parallel()
	regs := []ServiceRegistration{
		{ID: "s-a", AllocID: "a", NodeID: "n2", Address: "10.0.0.2", Port: 1, Tags: []string{"alloc_index=1"}},
		{ID: "s-b", AllocID: "b", NodeID: "n1", Address: "10.0.0.1", Port: 2, Tags: []string{"alloc_index=0"}},
		{ID: "s-c", AllocID: "c", NodeID: "n1", Address: "10.0.0.1", Port: 3, Tags: []string{"alloc_index=2"}},
	}
	var wantOrder []string
	for _, order := range permutations(3) {
		shuffled := make([]ServiceRegistration, 0, 3)
		for _, i := range order {
			shuffled = append(shuffled, regs[i])
		}
		a, allocs, err := assignFromServices("g", "a", byAlloc(shuffled))
		if err != nil {
			t.Fatal(err)
		}
		if a.Rank != 1 || a.MasterPort != 2 || a.NodeRank != 1 || a.NNodes != 2 {
			t.Fatalf("order %v: %+v", order, a)
		}
		if wantOrder == nil {
			wantOrder = allocs
		} else if fmt.Sprint(allocs) != fmt.Sprint(wantOrder) {
			t.Fatalf("order %v: rank order %v, first gave %v", order, allocs, wantOrder)
		}
	}
}

func permutations(n int) [][]int {
	if n == 1 {
		return [][]int{{0}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}
