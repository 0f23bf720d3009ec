package agent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// scriptedElector answers Campaign from a script: each entry is an error
// (the campaign fails) or nil (won; the term's lost channel is kept in
// terms so the test can end it). Past the script it blocks.
type scriptedElector struct {
	mu     sync.Mutex
	script []error
	terms  []chan struct{}
	holder string
	asks   int
}

func (s *scriptedElector) Campaign(ctx context.Context) (<-chan struct{}, error) {
	s.mu.Lock()
	if len(s.script) == 0 {
		s.mu.Unlock()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	err := s.script[0]
	s.script = s.script[1:]
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	lost := make(chan struct{})
	s.terms = append(s.terms, lost)
	s.mu.Unlock()
	return lost, nil
}

func (s *scriptedElector) Resign(context.Context) error { return nil }

func (s *scriptedElector) Holder(context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asks++
	return s.holder, nil
}

func testLeadership(t *testing.T, el Elector, clk func() time.Time) *leadership {
	t.Helper()
	m, err := NewMetrics()
	if err != nil {
		t.Fatal(err)
	}
	return newLeadership(Options{Name: "a1", Elector: el, HolderCheckEvery: 5 * time.Second, Clock: clk, Metrics: m}, hclog.NewNullLogger())
}

// A failing campaign is retried and reported until it succeeds; each term
// won and lost is handed to the loop in order.
func TestCampaignRetriesAndReportsTerms(t *testing.T) {
	el := &scriptedElector{script: []error{errors.New("permission denied"), nil, nil}}
	l := testLeadership(t, el, time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.campaign(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	waitFor(t, "the failure reported", func() bool { return l.status().electionErr != nil })
	first := recvChange(t, l)
	if !first.gained || l.status().electionErr != nil {
		t.Fatalf("first change %+v, election error %v: want a term won and the error cleared", first, l.status().electionErr)
	}
	el.mu.Lock()
	close(el.terms[0])
	el.mu.Unlock()
	if ch := recvChange(t, l); ch.gained {
		t.Fatalf("after the lock was lost: %+v, want a loss", ch)
	}
	if ch := recvChange(t, l); !ch.gained {
		t.Fatalf("second campaign: %+v, want a term won", ch)
	}
}

func recvChange(t *testing.T, l *leadership) leadershipChange {
	t.Helper()
	select {
	case ch := <-l.changes:
		return ch
	case <-time.After(10 * time.Second):
		t.Fatal("no leadership change")
		return leadershipChange{}
	}
}

// A term is published only once won; its context ends when the lock is
// lost; stepping down ends it once.
func TestTermLifecycle(t *testing.T) {
	l := testLeadership(t, &scriptedElector{}, time.Now)
	lost := make(chan struct{})
	lctx, cancel := l.start(context.Background(), lost)
	if l.context() != nil || l.leader.Load() || l.leading() {
		t.Fatal("a term started but not won is published")
	}
	l.won(lctx, cancel)
	if l.context() == nil || !l.leader.Load() || !l.status().leader {
		t.Fatal("a won term is not published")
	}
	close(lost)
	waitFor(t, "the term's context ended with the lock", func() bool { return lctx.Err() != nil })
	if l.context() != nil {
		t.Error("the context of a lost term is still handed out")
	}
	if !l.stepDown() || l.leader.Load() {
		t.Error("stepDown of a published term did not end it")
	}
	if l.stepDown() {
		t.Error("a second stepDown ended a term again")
	}
}

// A standby asks who holds the lock at most once per HolderCheckEvery of
// its clock (and again at once if the clock goes back); its own name in
// the holder item means nobody leads.
func TestHolderChecks(t *testing.T) {
	clk := newTestClock()
	el := &scriptedElector{holder: "a2"}
	l := testLeadership(t, el, clk.Now)
	ctx := context.Background()
	steps := []struct {
		advance time.Duration
		asks    int
	}{{0, 1}, {4 * time.Second, 1}, {time.Second, 2}, {-time.Minute, 3}, {time.Second, 3}}
	for i, s := range steps {
		clk.Advance(s.advance)
		l.checkHolder(ctx)
		if el.asks != s.asks {
			t.Fatalf("step %d: %d asks, want %d", i, el.asks, s.asks)
		}
	}
	if st := l.status(); st.holder != "a2" || !st.noLeaderSince.IsZero() {
		t.Fatalf("holder %q noLeaderSince %v, want a2 and none", st.holder, st.noLeaderSince)
	}
	el.holder = "a1" // this agent's stale item
	l.holderChecked = time.Time{}
	l.checkHolder(ctx)
	if st := l.status(); st.holder != "" || st.noLeaderSince.IsZero() {
		t.Fatalf("stale self as holder: holder %q noLeaderSince %v, want none and set", st.holder, st.noLeaderSince)
	}
}
