package gang

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/internal/testwait"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func join(i int, node string, size int) JoinRequest {
	return JoinRequest{Size: size, Namespace: "default", JobID: "train", AllocID: fmt.Sprintf("alloc%d", i),
		AllocIndex: i, Group: "workers", Task: "trainer", NodeID: node, Addr: "10.0.0." + node, Port: 29500 + i}
}

func TestRegistryRanksAndStates(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(1000, 0)}
	reg := NewRegistry(RegistryConfig{Clock: clk.Now})
	ctx := context.Background()
	// Join out of order; ranks follow alloc index; nodes 1,1,2 -> node ranks 0,0,1.
	nodes := []string{"1", "1", "2"}
	for _, i := range []int{2, 0, 1} {
		st, err := reg.Join(ctx, "g", MemberID(fmt.Sprintf("alloc%d", i), "trainer"), join(i, nodes[i], 3))
		if err != nil {
			t.Fatalf("join %d: %v", i, err)
		}
		want := StateForming
		if i == 1 {
			want = StateReady
		}
		if st.State != want {
			t.Fatalf("after join %d: state %s, want %s", i, st.State, want)
		}
	}
	st, _, err := reg.Get("g")
	if err != nil {
		t.Fatal(err)
	}
	if st.MasterAddr != "10.0.0.1" || st.MasterPort != 29500 || st.NNodes != 2 {
		t.Fatalf("master %s:%d nnodes %d", st.MasterAddr, st.MasterPort, st.NNodes)
	}
	wants := []struct{ rank, nodeRank, localRank, localWorld int }{{0, 0, 0, 2}, {1, 0, 1, 2}, {2, 1, 0, 1}}
	for i, w := range wants {
		a, err := AssignmentFor(st, MemberID(fmt.Sprintf("alloc%d", i), "trainer"))
		if err != nil {
			t.Fatal(err)
		}
		if a.Rank != w.rank || a.NodeRank != w.nodeRank || a.LocalRank != w.localRank || a.LocalWorldSize != w.localWorld || a.WorldSize != 3 {
			t.Errorf("member %d: got %+v, want %+v", i, a, w)
		}
	}
	// A fourth member is refused: the gang is full.
	if _, err := reg.Join(ctx, "g", "extra", join(3, "3", 3)); !errors.Is(err, ErrConflict) {
		t.Fatalf("join to full gang: %v, want conflict", err)
	}
	// A clean exit keeps the gang ready; a failure fails it.
	if st, _ = reg.Exit("g", MemberID("alloc0", "trainer"), ExitRequest{}); st.State != StateReady {
		t.Fatalf("after clean exit: %s", st.State)
	}
	st, _ = reg.Exit("g", MemberID("alloc2", "trainer"), ExitRequest{ExitCode: 3})
	if st.State != StateFailed || !strings.Contains(st.Reason, "alloc2.trainer exited with code 3") {
		t.Fatalf("after failure: %s %q", st.State, st.Reason)
	}
	// A rejoin while a member still runs is refused...
	if _, err := reg.Join(ctx, "g", MemberID("alloc2", "trainer"), join(2, "2", 3)); !errors.Is(err, ErrConflict) {
		t.Fatalf("rejoin while stopping: %v", err)
	}
	// ...and accepted as a new generation once everyone has exited.
	reg.Exit("g", MemberID("alloc1", "trainer"), ExitRequest{Stopped: true})
	st, err = reg.Join(ctx, "g", MemberID("alloc2", "trainer"), join(2, "2", 3))
	if err != nil || st.Generation != 2 || st.State != StateForming || st.Arrived != 1 {
		t.Fatalf("new generation: %+v %v", st, err)
	}
}

func TestRegistryTTL(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(1000, 0)}
	reg := NewRegistry(RegistryConfig{Clock: clk.Now, DefaultTTL: 10 * time.Second})
	ctx := context.Background()
	if _, err := reg.Join(ctx, "g", "a", join(0, "1", 2)); err != nil {
		t.Fatal(err)
	}
	// While forming, an expired member is removed (not counted as arrived).
	clk.Advance(11 * time.Second)
	if _, _, err := reg.Get("g"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("forming gang with its only member expired: %v, want not found", err)
	}
	reg.Join(ctx, "g", "a", join(0, "1", 2))
	reg.Join(ctx, "g", "b", join(1, "2", 2))
	clk.Advance(6 * time.Second)
	if _, err := reg.Heartbeat("g", "a"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(6 * time.Second) // b is now 12s silent
	st, err := reg.Heartbeat("g", "a")
	if err != nil {
		t.Fatal(err)
	}
	if st.State != StateFailed || !strings.Contains(st.Reason, "b missed its heartbeats") {
		t.Fatalf("after b expired: %s %q", st.State, st.Reason)
	}
	if _, err := reg.Heartbeat("g", "b"); !errors.Is(err, ErrConflict) {
		t.Fatalf("heartbeat of a lost member: %v", err)
	}
}

func TestRegistrySizeResolution(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := NewRegistry(RegistryConfig{})
	if _, err := reg.Join(ctx, "g", "a", join(0, "1", 0)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "size unknown") {
		t.Fatalf("no size, no resolver: %v", err)
	}
	reg = NewRegistry(RegistryConfig{SizeResolver: func(_ context.Context, ns, job string) (int, error) {
		if ns != "default" || job != "train" {
			return 0, fmt.Errorf("unexpected job %s/%s", ns, job)
		}
		return 2, nil
	}})
	st, err := reg.Join(ctx, "g", "a", join(0, "1", 0))
	if err != nil || st.Size != 2 {
		t.Fatalf("resolved size: %+v %v", st, err)
	}
	if _, err := reg.Join(ctx, "g", "b", join(1, "1", 5)); !errors.Is(err, ErrConflict) {
		t.Fatalf("size mismatch: %v", err)
	}
	bad := join(1, "1", 2)
	bad.Port = 0
	if _, err := reg.Join(ctx, "g", "b", bad); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "port") {
		t.Fatalf("bad port: %v", err)
	}
}

func startServer(t *testing.T) *Server {
	t.Helper()
	s, err := StartServer("127.0.0.1:0", RegistryConfig{}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Several members rendezvous through a test server and get consistent ranks.
func TestBarrierRendezvous(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	const n = 4
	var wg sync.WaitGroup
	got := make([]Assignment, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _ := NewClient(s.URL, nil)
			got[i], errs[i] = c.Barrier(context.Background(), BarrierConfig{
				Gang: "default:train", Member: MemberID(fmt.Sprintf("alloc%d", i), "trainer"),
				Join: join(i, fmt.Sprint(i/2), n), Timeout: 10 * time.Second, Heartbeat: time.Second,
			})
		}()
	}
	wg.Wait()
	ranks := map[int]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("member %d: %v", i, errs[i])
		}
		a := got[i]
		if a.WorldSize != n || a.MasterAddr != "10.0.0.0" || a.MasterPort != 29500 || a.NNodes != 2 {
			t.Errorf("member %d: %+v", i, a)
		}
		if a.Rank != i || a.NodeRank != i/2 || a.LocalRank != i%2 || a.LocalWorldSize != 2 {
			t.Errorf("member %d ranks: %+v", i, a)
		}
		ranks[a.Rank] = true
		env := a.Env()
		if env["RANK"] != fmt.Sprint(i) || env["WORLD_SIZE"] != "4" || env["MASTER_PORT"] != "29500" {
			t.Errorf("member %d env: %v", i, env)
		}
	}
	if len(ranks) != n {
		t.Fatalf("ranks not distinct: %v", ranks)
	}
}

// A missing member makes the barrier time out with the arrived count, and
// the member that gave up is removed from the gang.
func TestBarrierTimeout(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c, _ := NewClient(s.URL, nil)
	var progress []int
	start := time.Now()
	_, err := c.Barrier(context.Background(), BarrierConfig{
		Gang: "g", Member: "a", Join: join(0, "1", 2), Timeout: time.Second,
		Progress: func(st Status) { progress = append(progress, st.Arrived) },
	})
	var te *TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("want TimeoutError, got %v", err)
	}
	if te.Arrived != 1 || te.Size != 2 || !strings.Contains(err.Error(), "1 of 2 members arrived") {
		t.Fatalf("timeout error: %v", err)
	}
	if el := time.Since(start); el < time.Second || el > 10*time.Second {
		t.Fatalf("barrier returned after %s", el)
	}
	if len(progress) == 0 || progress[0] != 1 {
		t.Fatalf("progress: %v", progress)
	}
	if _, err := c.Get(context.Background(), "g", 0, 0); err == nil {
		t.Fatalf("gang should be gone after its only member left")
	}
}

// A member that fails while others wait or run makes the gang failed, and
// the waiting members' barriers return a StoppedError.
func TestBarrierPeerFailure(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c, _ := NewClient(s.URL, nil)
	ctx := context.Background()
	// Member a joins and fails before b arrives: a stop while forming.
	if _, err := c.Join(ctx, "g", "a", join(0, "1", 3)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Barrier(ctx, BarrierConfig{Gang: "g", Member: "b", Join: join(1, "1", 3), Timeout: 10 * time.Second})
		done <- err
	}()
	// Wait until b has arrived, then stop the gang.
	testwait.For(t, 5*time.Second, "b arrived", func() bool {
		st, err := c.Get(ctx, "g", 0, 0)
		return err == nil && st.Arrived == 2
	})
	if _, err := c.Stop(ctx, "g", "preempted by job urgent"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var se *StoppedError
		if !errors.As(err, &se) || se.State != StateStopping || !strings.Contains(se.Reason, "preempted") {
			t.Fatalf("want StoppedError, got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("barrier did not return after the gang was stopped")
	}
}

func TestHandlerErrors(t *testing.T) {
	t.Parallel()
	h := NewHandler(NewRegistry(RegistryConfig{}), nil)
	cases := []struct {
		method, path, body string
		code               int
		contains           string
	}{
		{"GET", "/v1/gang/nope", "", 404, "gang"},
		{"PUT", "/v1/gang/g/members/m", `{"size":2}`, 400, "job_id is required"},
		{"PUT", "/v1/gang/g/members/m", `{"size":"x"}`, 400, "decoding"},
		{"PUT", "/v1/gang/g/members/m", `{"bogus":1}`, 400, "unknown field"},
		{"POST", "/v1/gang/", "", 405, "not allowed"},
		{"GET", "/v1/gang/g/what", "", 404, "no such endpoint"},
		{"GET", "/v1/gang/g?index=x", "", 400, "index"},
		{"PUT", "/v1/gang/g/members/m/heartbeat", "", 404, "gang"},
	}
	for _, tc := range cases {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
			if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.contains) {
				t.Fatalf("got %d %s, want %d containing %q", rec.Code, rec.Body.String(), tc.code, tc.contains)
			}
		})
	}
	// Mounted under a mux with the escaped gang ID containing a slash.
	mux := http.NewServeMux()
	mux.Handle(PathPrefix, h)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c, _ := NewClient(srv.URL, nil)
	st, err := c.Join(context.Background(), "ns/job:x", "a.t", join(0, "1", 1))
	if err != nil || st.ID != "ns/job:x" || st.State != StateReady {
		t.Fatalf("escaped gang id: %+v %v", st, err)
	}
}

// A restarted server (empty registry) takes running members back with the
// ranks they already use, and refuses a mismatching resume.
func TestRegistryResume(t *testing.T) {
	t.Parallel()
	reg := NewRegistry(RegistryConfig{})
	ctx := context.Background()
	res := func(i, gen int) JoinRequest {
		j := join(i, "1", 2)
		j.Resume = &Resume{Generation: gen, Rank: i, NodeRank: 0, LocalRank: i, LocalWorldSize: 2}
		return j
	}
	st, err := reg.Join(ctx, "g", "b", res(1, 3))
	if err != nil || st.State != StateReady || st.Generation != 3 || st.Arrived != 1 {
		t.Fatalf("first resume: %+v %v", st, err)
	}
	if st.MasterAddr != "" {
		t.Fatalf("master known before rank 0 resumed: %q", st.MasterAddr)
	}
	st, err = reg.Join(ctx, "g", "a", res(0, 3))
	if err != nil || st.MasterAddr != "10.0.0.1" || st.MasterPort != 29500 {
		t.Fatalf("second resume: %+v %v", st, err)
	}
	if a, err := AssignmentFor(st, "b"); err != nil || a.Rank != 1 || a.LocalRank != 1 {
		t.Fatalf("assignment after resume: %+v %v", a, err)
	}
	// A member of another generation cannot slip in; a failure still propagates.
	reg2 := NewRegistry(RegistryConfig{})
	reg2.Join(ctx, "g", "a", res(0, 3))
	if _, err := reg2.Join(ctx, "g", "b", res(1, 4)); !errors.Is(err, ErrConflict) {
		t.Fatalf("generation mismatch: %v", err)
	}
	bad := res(5, 1)
	if _, err := reg2.Join(ctx, "g", "c", bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("rank out of range: %v", err)
	}
	st, _ = reg.Exit("g", "a", ExitRequest{ExitCode: 1})
	if st.State != StateFailed {
		t.Fatalf("after failure: %s", st.State)
	}
}

// Members waiting at the barrier join again when the server restarts.
func TestBarrierSurvivesServerRestart(t *testing.T) {
	// Not parallel: it reuses its server's port after closing it.
	s, err := StartServer("127.0.0.1:0", RegistryConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(s.URL, "http://")
	c, _ := NewClient(s.URL, nil)
	done := make(chan error, 1)
	go func() {
		_, err := c.Barrier(context.Background(), BarrierConfig{Gang: "g", Member: "a", Join: join(0, "1", 2),
			Timeout: 20 * time.Second, Heartbeat: 100 * time.Millisecond})
		done <- err
	}()
	testwait.For(t, 5*time.Second, "a joined", func() bool { _, _, err := s.Registry.Get("g"); return err == nil })
	s.Close()
	s2, err := StartServer(addr, RegistryConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	// a re-joins the new registry; then b arrives and both pass.
	testwait.For(t, 10*time.Second, "a joined the restarted server", func() bool {
		st, _, err := s2.Registry.Get("g")
		return err == nil && st.Arrived == 1
	})
	if _, err := c.Barrier(context.Background(), BarrierConfig{Gang: "g", Member: "b", Join: join(1, "1", 2), Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("member a did not pass the barrier after the restart")
	}
}

// A member that cannot join (its size conflicts) times out with the reason.
func TestBarrierTimeoutSaysWhyJoinFailed(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c, _ := NewClient(s.URL, nil)
	if _, err := c.Join(context.Background(), "g", "a", join(0, "1", 2)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Barrier(context.Background(), BarrierConfig{Gang: "g", Member: "b", Join: join(1, "1", 3), Timeout: time.Second})
	var te *TimeoutError
	if !errors.As(err, &te) || te.Arrived != 1 || te.Size != 2 || !strings.Contains(err.Error(), "could not join") || !strings.Contains(err.Error(), "asks for 3") {
		t.Fatalf("got %v", err)
	}
}

// TTL and retention boundaries on the injected clock: a member silent for
// exactly its TTL is alive, a nanosecond more and it is lost; an ended
// gang is kept exactly Retention, then dropped.
func TestRegistryTTLAndRetentionBoundaries(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(1000, 0)}
	reg := NewRegistry(RegistryConfig{Clock: clk.Now, DefaultTTL: 10 * time.Second, Retention: time.Minute})
	ctx := context.Background()
	for i, m := range []string{"a", "b"} {
		if _, err := reg.Join(ctx, "g", m, join(i, "1", 2)); err != nil {
			t.Fatal(err)
		}
	}
	// A member's own TTL (JoinRequest.TTL) overrides the default.
	c := join(2, "1", 1)
	c.TTL = "2s"
	if _, err := reg.Join(ctx, "solo", "c", c); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second)
	st, err := reg.Heartbeat("g", "a")
	if err != nil || st.State != StateReady {
		t.Fatalf("after exactly the TTL: %+v %v", st, err)
	}
	if st, _, err := reg.Get("solo"); err != nil || st.State != StateFailed || !strings.Contains(st.Reason, "missed its heartbeats for 2s") {
		t.Fatalf("member with a 2s TTL after 10s: %+v %v", st, err)
	}
	clk.Advance(time.Nanosecond)
	st, err = reg.Heartbeat("g", "a")
	if err != nil || st.State != StateFailed || !strings.Contains(st.Reason, "b missed its heartbeats for 10s") {
		t.Fatalf("a nanosecond after the TTL: %+v %v", st, err)
	}
	if _, err := reg.Exit("g", "a", ExitRequest{ExitCode: 143, Signal: 15, Stopped: true}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	if _, _, err := reg.Get("g"); err != nil {
		t.Fatalf("ended gang dropped before its retention: %v", err)
	}
	clk.Advance(time.Nanosecond)
	if _, _, err := reg.Get("g"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ended gang kept past its retention: %v", err)
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

// Ranks depend on who the members are, never on the order they join in
// (driver/internal/nomadbarrier tests the same for the order Nomad lists
// their services in).
func TestRanksIndependentOfArrivalOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nodes := []string{"2", "1", "2", "1"}
	var want map[string]Assignment
	for _, order := range permutations(4) {
		reg := NewRegistry(RegistryConfig{})
		var st Status
		for _, i := range order {
			var err error
			if st, err = reg.Join(ctx, "g", MemberID(fmt.Sprintf("alloc%d", i), "trainer"), join(i, nodes[i], 4)); err != nil {
				t.Fatal(err)
			}
		}
		st, _, _ = reg.Get("g")
		got := map[string]Assignment{}
		for i := range 4 {
			id := MemberID(fmt.Sprintf("alloc%d", i), "trainer")
			a, err := AssignmentFor(st, id)
			if err != nil {
				t.Fatal(err)
			}
			got[id] = a
		}
		if want == nil {
			want = got
			// alloc index order; node ranks by first appearance in rank order.
			if a := got[MemberID("alloc0", "trainer")]; a.Rank != 0 || a.NodeRank != 0 || a.MasterAddr != "10.0.0.2" {
				t.Fatalf("rank 0: %+v", a)
			}
			if a := got[MemberID("alloc3", "trainer")]; a.Rank != 3 || a.NodeRank != 1 || a.LocalRank != 1 {
				t.Fatalf("rank 3: %+v", a)
			}
			continue
		}
		for id, a := range got {
			if a != want[id] {
				t.Fatalf("join order %v: %s got %+v, first order gave %+v", order, id, a, want[id])
			}
		}
	}

}

// A member that cannot reach the server never learns the size the server
// would resolve: its timeout says so instead of "0 of 0 members".
func TestBarrierTimeoutWithoutServer(t *testing.T) {
	t.Parallel()
	c, _ := NewClient("http://127.0.0.1:1", nil)
	j := join(0, "1", 0)
	_, err := c.Barrier(context.Background(), BarrierConfig{Gang: "g", Member: "a", Join: j, Timeout: 300 * time.Millisecond})
	var te *TimeoutError
	if !errors.As(err, &te) || te.JoinErr == nil {
		t.Fatalf("want a TimeoutError with the join error, got %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "0 members arrived (gang size unknown)") || !strings.Contains(msg, "could not join") {
		t.Fatalf("message: %s", msg)
	}
}
