package nomad

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/scheduler/internal/nomadfake"
)

func TestConfigFromEnvAndMerge(t *testing.T) {
	env := map[string]string{
		"NOMAD_ADDR": "https://nomad.example:4646", "NOMAD_TOKEN": "secret", "NOMAD_NAMESPACE": "ml",
		"NOMAD_REGION": "eu", "NOMAD_CACERT": "/ca.pem", "NOMAD_CLIENT_CERT": "/c.pem", "NOMAD_CLIENT_KEY": "/k.pem",
		"NOMAD_SKIP_VERIFY": "true",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c, err := ConfigFromEnv(lookup)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Address: "https://nomad.example:4646", Token: "secret", Namespace: "ml", Region: "eu",
		CACert: "/ca.pem", ClientCert: "/c.pem", ClientKey: "/k.pem", Insecure: true}
	if c != want {
		t.Errorf("from env = %+v, want %+v", c, want)
	}
	m := c.Merge(Config{Address: "http://127.0.0.1:4646", Namespace: "prod"})
	if m.Address != "http://127.0.0.1:4646" || m.Namespace != "prod" || m.Token != "secret" {
		t.Errorf("merge = %+v", m)
	}
	env["NOMAD_SKIP_VERIFY"] = "maybe"
	if _, err := ConfigFromEnv(lookup); err == nil || !strings.Contains(err.Error(), "NOMAD_SKIP_VERIFY") {
		t.Errorf("bad NOMAD_SKIP_VERIFY: %v", err)
	}
	for _, bad := range []Config{{Address: "nomad:4646:x"}, {Address: "ftp://x"}, {ClientCert: "/c.pem"}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v validated", bad)
		}
	}
	if _, err := NewClient(Config{Address: "ftp://x"}, nil); err == nil {
		t.Error("NewClient accepted a bad address")
	}
}

func TestStateStore(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	st := NewStateStore(e.c, StateConfig{MaxPreemptionRecords: 3}, e.log)

	vals, at, err := st.LoadUsage(ctx)
	if err != nil || len(vals) != 0 || !at.IsZero() {
		t.Fatalf("empty usage = %v %v %v", vals, at, err)
	}
	now := time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)
	// A project named "at" must not clobber the item holding the instant.
	if err := st.SaveUsage(ctx, map[string]float64{"olmo": 12.5, "team.a/b": 3, "at": 7}, now); err != nil {
		t.Fatal(err)
	}
	vals, at, err = st.LoadUsage(ctx)
	if err != nil || vals["olmo"] != 12.5 || vals["team.a/b"] != 3 || vals["at"] != 7 || !at.Equal(now) {
		t.Fatalf("usage = %v at %v (%v)", vals, at, err)
	}

	// Idle requeue counts survive a new leader; none saved reads empty,
	// and saving none deletes them.
	if rq, err := st.LoadRequeues(ctx); err != nil || len(rq) != 0 {
		t.Fatalf("empty requeues = %v %v", rq, err)
	}
	if err := st.SaveRequeues(ctx, map[string]int{"default/hung.job": 2, "team-a/x y": 1}); err != nil {
		t.Fatal(err)
	}
	if rq, err := st.LoadRequeues(ctx); err != nil || len(rq) != 2 || rq["default/hung.job"] != 2 || rq["team-a/x y"] != 1 {
		t.Fatalf("requeues = %v (%v)", rq, err)
	}
	if err := st.SaveRequeues(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if rq, err := st.LoadRequeues(ctx); err != nil || len(rq) != 0 {
		t.Fatalf("requeues after saving none = %v (%v)", rq, err)
	}

	// Gang requeue records (runs in a row that lost a member) survive a
	// new leader the same way.
	if gr, err := st.LoadGangRequeues(ctx); err != nil || len(gr) != 0 {
		t.Fatalf("empty gang requeues = %v %v", gr, err)
	}
	want := map[string]GangRequeue{"default/crashy": {Runs: 3, Last: now}, "team-a/x@y": {Runs: 1, Last: now.Add(time.Minute)}}
	if err := st.SaveGangRequeues(ctx, want); err != nil {
		t.Fatal(err)
	}
	if gr, err := st.LoadGangRequeues(ctx); err != nil || len(gr) != 2 || gr["default/crashy"].Runs != 3 || !gr["default/crashy"].Last.Equal(now) ||
		gr["team-a/x@y"].Runs != 1 || !gr["team-a/x@y"].Last.Equal(now.Add(time.Minute)) {
		t.Fatalf("gang requeues = %v (%v)", gr, err)
	}
	if err := st.SaveGangRequeues(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if gr, err := st.LoadGangRequeues(ctx); err != nil || len(gr) != 0 {
		t.Fatalf("gang requeues after saving none = %v (%v)", gr, err)
	}

	in := &Intent{Kind: IntentAdmit, JobID: "default/my.job", Phase: PhaseDecided, FromIndex: 7, Created: now}
	if err := st.PutIntent(ctx, in); err != nil {
		t.Fatal(err)
	}
	// A second creator (another leader) loses.
	other := &Intent{Kind: IntentAdmit, JobID: "default/my.job", Phase: PhaseDecided}
	if err := st.PutIntent(ctx, other); !errors.Is(err, ErrConflict) {
		t.Errorf("second create: %v, want ErrConflict", err)
	}
	in.Phase = PhaseRegistered
	if err := st.PutIntent(ctx, in); err != nil {
		t.Fatalf("update: %v", err)
	}
	got, err := st.Intents(ctx)
	if err != nil || len(got) != 1 || got[0].JobID != "default/my.job" || got[0].Phase != PhaseRegistered {
		t.Fatalf("intents = %+v, %v", got, err)
	}
	if err := st.DeleteIntent(ctx, "default/my.job"); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.Intents(ctx); len(got) != 0 {
		t.Errorf("intents after delete = %+v", got)
	}

	for i := 0; i < 5; i++ {
		if err := st.RecordPreemption(ctx, PreemptionRecord{JobID: "default/v", At: now.Add(time.Duration(i) * time.Hour), GPUs: i}); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := st.Preemptions(ctx, now.Add(3*time.Hour))
	if err != nil || len(recs) != 2 || recs[0].GPUs != 3 {
		t.Errorf("records since +3h = %+v (%v)", recs, err)
	}
	all, _ := st.Preemptions(ctx, time.Time{})
	if len(all) != 3 {
		t.Errorf("kept %d records, want the newest 3", len(all))
	}
}

func TestExplainWriterWritesOnChangeOnly(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	x := NewExplainWriter(e.c, e.log)
	at := time.Unix(1_800_000_000, 0)
	train := map[string]string{"state": "waiting", "position": "1", "summary": "Waiting for 16 free GPUs (first in line)."}
	if err := x.WriteItems(ctx, "default/train", train, at); err != nil {
		t.Fatal(err)
	}
	v := e.fake.Variable("nomad/jobs/train/impact")
	if v["position"] != "1" || v["state"] != "waiting" || v[WrittenByItem] != WrittenBy || v[DecidedAtItem] != "2027-01-15T08:00:00Z" {
		t.Errorf("train explanation = %v", v)
	}
	puts := func() int {
		n := 0
		for _, r := range e.fake.Requests() {
			if r.Method == "PUT" && strings.HasPrefix(r.Path, "/v1/var/nomad/jobs/") {
				n++
			}
		}
		return n
	}
	before := puts()
	if err := x.WriteItems(ctx, "default/train", maps.Clone(train), at.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if puts() != before {
		t.Errorf("unchanged explanation rewritten")
	}
	train["position"] = "2"
	if err := x.WriteItems(ctx, "default/train", train, at.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if puts() != before+1 {
		t.Errorf("changed explanation writes = %d, want 1", puts()-before)
	}
	items, err := x.Read(ctx, "default/train")
	if err != nil || items["position"] != "2" {
		t.Errorf("read = %v, %v", items, err)
	}
	if err := x.Forget(ctx, "default/train"); err != nil || e.fake.Variable("nomad/jobs/train/impact") != nil {
		t.Errorf("forget: %v, variable %v", err, e.fake.Variable("nomad/jobs/train/impact"))
	}
	// Written again after Forget: created afresh.
	if err := x.WriteItems(ctx, "default/train", train, at); err != nil || e.fake.Variable("nomad/jobs/train/impact") == nil {
		t.Errorf("rewrite after forget: %v", err)
	}
}

// The writer takes over what another agent (a previous leader) wrote, but
// never a Variable someone else put at the path, and deletes only its own.
func TestExplainWriterOwnership(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	put := func(path string, items map[string]string) {
		t.Helper()
		if _, _, err := e.c.api.Variables().Update(&api.Variable{Path: path, Items: items}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A user's Variable (say of a task group named "impact"), and the
	// previous leader's explanation of another job.
	put("nomad/jobs/mine/impact", map[string]string{"password": "hunter2"})
	put("nomad/jobs/old/impact", map[string]string{"state": "waiting", WrittenByItem: WrittenBy})
	x := NewExplainWriter(e.c, e.log)
	err := x.WriteItems(ctx, "default/mine", map[string]string{"state": "waiting"}, time.Now())
	if !errors.Is(err, ErrNotOurs) {
		t.Errorf("write over a user's Variable: err = %v, want ErrNotOurs", err)
	}
	if v := e.fake.Variable("nomad/jobs/mine/impact"); v["password"] != "hunter2" || v["state"] != "" {
		t.Errorf("user's Variable = %v, want it untouched", v)
	}
	if err := x.WriteItems(ctx, "default/mine", map[string]string{"state": "running"}, time.Now()); err != nil {
		t.Errorf("second write to a foreign path: %v, want a silent skip", err)
	}
	if err := x.WriteItems(ctx, "default/old", map[string]string{"state": "running"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if v := e.fake.Variable("nomad/jobs/old/impact"); v["state"] != "running" {
		t.Errorf("previous leader's explanation not taken over: %v", v)
	}
	// Someone rewrites our Variable behind our back: the next write
	// checks-and-sets against what is there now.
	put("nomad/jobs/old/impact", map[string]string{"state": "stale", WrittenByItem: WrittenBy})
	if err := x.WriteItems(ctx, "default/old", map[string]string{"state": "waiting"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if v := e.fake.Variable("nomad/jobs/old/impact"); v["state"] != "waiting" {
		t.Errorf("after a foreign rewrite: %v", v)
	}
	if err := x.Forget(ctx, "default/mine"); err != nil || e.fake.Variable("nomad/jobs/mine/impact") == nil {
		t.Errorf("Forget deleted a user's Variable (err %v)", err)
	}

	// Sweep: deletes ours of jobs that are gone, keeps the rest.
	put("nomad/jobs/gone/impact", map[string]string{"state": "waiting", WrittenByItem: WrittenBy})
	put("nomad/jobs/gone", map[string]string{"user": "owned"})
	put("nomad/jobs/gone/impact/deeper", map[string]string{WrittenByItem: WrittenBy})
	n, err := x.Sweep(ctx, func(id string) bool { return id == "default/old" })
	if err != nil || n != 1 {
		t.Errorf("sweep = %d, %v; want 1 deleted", n, err)
	}
	for path, want := range map[string]bool{"nomad/jobs/gone/impact": false, "nomad/jobs/old/impact": true,
		"nomad/jobs/mine/impact": true, "nomad/jobs/gone": true, "nomad/jobs/gone/impact/deeper": true} {
		if got := e.fake.Variable(path) != nil; got != want {
			t.Errorf("after sweep %s exists = %v, want %v", path, got, want)
		}
	}
}

func TestElectorOneLeaderAndFailover(t *testing.T) {
	e := newEnv(t, 0)
	e.fake.AllowShortLockTTL(true)
	// TTL 1s, renewed every 100ms: the leader steps down only when no
	// renewal succeeded for 3/4 TTL (750ms), several attempts. With the
	// default beat (TTL/2) one renewal had TTL/4 to answer; at TTL 400ms
	// that was 100ms, which a loaded machine running -race exceeds.
	// A standby reads the lease every 50ms (the default here is 1s), so
	// it sees a clean release at once.
	cfg := ElectorConfig{TTL: time.Second, LockDelay: time.Second, RetryInterval: 20 * time.Millisecond,
		LeaseBeat: 100 * time.Millisecond, LeasePoll: 50 * time.Millisecond}
	var leading [2]atomic.Bool
	var terms [2]atomic.Int32
	els := [2]*Elector{}
	cancels := [2]context.CancelFunc{}
	dones := [2]chan struct{}{}
	for i := range els {
		c := cfg
		c.HolderID = []string{"agent-1", "agent-2"}[i]
		els[i] = NewElector(e.c, c, e.log)
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		dones[i] = make(chan struct{})
		go func() {
			defer close(dones[i])
			_ = els[i].Run(ctx, func(lctx context.Context) {
				if leading[1-i].Load() {
					t.Errorf("agent %d leads while agent %d does", i, 1-i)
				}
				leading[i].Store(true)
				terms[i].Add(1)
				<-lctx.Done()
				leading[i].Store(false)
			})
		}()
	}
	defer func() {
		for i := range cancels {
			cancels[i]()
			<-dones[i]
		}
	}()
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out: %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitUntil("a leader", func() bool { return els[0].IsLeader() || els[1].IsLeader() })
	first := 0
	if els[1].IsLeader() {
		first = 1
	}
	// Renewals keep the leader for several TTLs.
	time.Sleep(3 * cfg.TTL)
	if !els[first].IsLeader() || els[1-first].IsLeader() {
		t.Fatalf("leadership moved without cause")
	}
	holder, err := els[1-first].Holder(context.Background())
	if err != nil || holder != []string{"agent-1", "agent-2"}[first] {
		t.Errorf("holder = %q, %v", holder, err)
	}
	// The leader's lock expires (it was cut off): it must step down (its
	// term ends), and a leader (either) is elected again, never two.
	before := terms[0].Load() + terms[1].Load()
	e.fake.ExpireLocks()
	waitUntil("old term ended", func() bool { return !leading[first].Load() || terms[first].Load() > 1 })
	waitUntil("new term", func() bool {
		return terms[0].Load()+terms[1].Load() > before && (els[0].IsLeader() || els[1].IsLeader())
	})
	// Clean shutdown of the leader releases the lock: the other takes over
	// without waiting for the TTL and lock delay.
	cur := 0
	if els[1].IsLeader() {
		cur = 1
	}
	start := time.Now()
	cancels[cur]()
	<-dones[cur]
	waitUntil("takeover after release", func() bool { return els[1-cur].IsLeader() })
	// Without the release the lock frees TTL + lock delay after the last
	// renewal, which was at most 3/4 TTL before the cancel (else the
	// leader had stepped down): over 1.25s from now.
	took := time.Since(start)
	t.Logf("takeover after a clean release took %v", took)
	if took > cfg.TTL {
		t.Errorf("takeover after a clean release took %v; want within the TTL (%v)", took, cfg.TTL)
	}
}

// A leader whose renewals hang (Nomad accepted the connection and stalled)
// must step down within its TTL: waiting on the request forever would keep
// it acting after the lock expired and another agent took it.
func TestElectorStepsDownWhenRenewalHangs(t *testing.T) {
	e := newEnv(t, 0)
	e.fake.AllowShortLockTTL(true)
	cfg := ElectorConfig{HolderID: "agent-1", TTL: 400 * time.Millisecond, LockDelay: 400 * time.Millisecond, RetryInterval: 50 * time.Millisecond}
	el := NewElector(e.c, cfg, e.log)
	ctx, cancel := context.WithCancel(context.Background())
	leading := make(chan struct{})
	ended := make(chan time.Time, 1)
	done := make(chan struct{})
	var once sync.Once
	go func() {
		defer close(done)
		_ = el.Run(ctx, func(lctx context.Context) {
			first := false
			once.Do(func() { first = true; close(leading) })
			<-lctx.Done()
			if first {
				ended <- time.Now()
			}
		})
	}()
	defer func() { cancel(); <-done }()
	select {
	case <-leading:
	case <-time.After(5 * time.Second):
		t.Fatal("never became leader")
	}
	release := e.fake.Hang("PUT", "/v1/var/", "lock-renew")
	defer release()
	hungAt := time.Now()
	select {
	case at := <-ended:
		// The last good renewal was at most TTL/2 before the hang; the
		// step-down is due 3/4 TTL after it.
		if took := at.Sub(hungAt); took > cfg.TTL {
			t.Errorf("stepped down %v after renewals started hanging; want within the TTL (%v)", took, cfg.TTL)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("leader kept leading while its renewals hung")
	}
}

func TestClientTLS(t *testing.T) {
	f := nomadfake.New(nomadfake.Options{TLS: true})
	defer f.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, f.CACertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(Config{Address: f.URL(), CACert: ca}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(context.Background(), c); err != nil {
		t.Errorf("ping over TLS with the CA: %v", err)
	}
	if err := c.EnsureNodePool(context.Background(), parking, "parking"); err != nil {
		t.Errorf("write over TLS: %v", err)
	}
	// Without the CA the server is not trusted; NOMAD_SKIP_VERIFY-style
	// Insecure is the explicit opt-out.
	bad, _ := NewClient(Config{Address: f.URL()}, nil)
	if err := ping(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("ping without the CA: %v, want a certificate error", err)
	}
	insecure, _ := NewClient(Config{Address: f.URL(), Insecure: true}, nil)
	if err := ping(context.Background(), insecure); err != nil {
		t.Errorf("insecure ping: %v", err)
	}
	if _, err := NewClient(Config{Address: f.URL(), CACert: filepath.Join(t.TempDir(), "missing.pem")}, nil); err == nil {
		t.Error("a missing CA file was accepted")
	}
}
