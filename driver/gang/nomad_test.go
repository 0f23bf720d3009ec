package gang

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
	var apiErr *APIError
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
