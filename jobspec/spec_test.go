package jobspec

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseMetaValid(t *testing.T) {
	spec, err := ParseMeta(map[string]string{
		"impact_tier":                "high",
		"impact_project":             "olmo",
		"impact_deadline":            "2026-12-05T00:00:00Z",
		"impact_preemptible":         "false",
		"impact_grace":               "10m",
		"impact_checkpoint_signal":   "SIGUSR1",
		"impact_min_runtime":         "30m",
		"impact_walltime":            "6h",
		"impact_topology":            "nvlink",
		"impact_pool":                "gpu",
		"impact_checkpoint_interval": "45m",
		"owner":                      "someone", // not ours: ignored
	}, nil)
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	want := Spec{
		Tier: "high", Project: "olmo", Deadline: time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC),
		Preemptible: false, PreemptibleSet: true, Grace: 10 * time.Minute, CheckpointSignal: "SIGUSR1",
		MinRuntime: 30 * time.Minute, Walltime: 6 * time.Hour, Topology: TopologyNVLink, Pool: "gpu",
		CheckpointInterval: 45 * time.Minute,
	}
	if spec != want {
		t.Fatalf("spec = %+v\nwant %+v", spec, want)
	}
}

func TestParseMetaEmptyIsUnset(t *testing.T) {
	spec, err := ParseMeta(map[string]string{}, nil)
	if err != nil || spec != (Spec{}) {
		t.Fatalf("got %+v, %v; want zero spec", spec, err)
	}
}

// Bad metadata: every malformed value is an error naming the key; nothing
// is defaulted.
func TestParseMetaErrors(t *testing.T) {
	cases := []struct {
		name      string
		job, grp  map[string]string
		wantKey   string
		wantInMsg string
	}{
		{"bad duration", map[string]string{"impact_grace": "ten minutes"}, nil, "impact_grace", "duration"},
		{"negative grace", map[string]string{"impact_grace": "-5m"}, nil, "impact_grace", "negative"},
		{"zero walltime", map[string]string{"impact_walltime": "0s"}, nil, "impact_walltime", "greater than zero"},
		{"zero checkpoint interval", map[string]string{"impact_checkpoint_interval": "0s"}, nil, "impact_checkpoint_interval", "greater than zero"},
		{"bad checkpoint interval", map[string]string{"impact_checkpoint_interval": "hourly"}, nil, "impact_checkpoint_interval", "duration"},
		{"checkpoint interval in group", map[string]string{}, map[string]string{"impact_checkpoint_interval": "1h"}, "impact_checkpoint_interval", "only be set in job meta"},
		{"bad bool", map[string]string{"impact_preemptible": "sometimes"}, nil, "impact_preemptible", "true or false"},
		{"bad deadline", map[string]string{"impact_deadline": "next friday"}, nil, "impact_deadline", "RFC 3339"},
		{"bad topology", map[string]string{"impact_topology": "pcie"}, nil, "impact_topology", "nvlink"},
		{"bad signal", map[string]string{"impact_checkpoint_signal": "USR1"}, nil, "impact_checkpoint_signal", "signal"},
		{"empty tier", map[string]string{"impact_tier": ""}, nil, "impact_tier", "tier name"},
		{"bad project", map[string]string{"impact_project": "a b"}, nil, "impact_project", "project name"},
		{"typo key", map[string]string{"impact_teir": "high"}, nil, "impact_teir", "unknown impact key"},
		{"group overrides tier", map[string]string{"impact_tier": "normal"}, map[string]string{"impact_tier": "critical"}, "impact_tier", "only be set in job meta"},
		{"group bad topology", nil, map[string]string{"impact_topology": "rack"}, "impact_topology", "group \"workers\" meta"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseGroupMeta(tc.job, tc.grp, "workers")
			if tc.grp == nil {
				_, err = ParseMeta(tc.job, nil)
			}
			var me *MetaError
			if !errors.As(err, &me) {
				t.Fatalf("want *MetaError, got %v", err)
			}
			if me.Key != tc.wantKey {
				t.Fatalf("error names key %q, want %q (%v)", me.Key, tc.wantKey, err)
			}
			if !strings.Contains(err.Error(), tc.wantInMsg) || !strings.Contains(err.Error(), tc.wantKey) {
				t.Fatalf("error %q should mention %q and %q", err, tc.wantKey, tc.wantInMsg)
			}
		})
	}
}

func TestParseGroupMetaOverrides(t *testing.T) {
	job := map[string]string{"impact_tier": "high", "impact_topology": "any", "impact_grace": "1m"}
	spec, err := ParseGroupMeta(job, map[string]string{"impact_topology": "nvlink", "impact_tier": "high"}, "w")
	if err != nil {
		t.Fatal(err)
	}
	if spec.Topology != TopologyNVLink || spec.Tier != "high" || spec.Grace != time.Minute {
		t.Fatalf("group spec = %+v", spec)
	}
}

// Several bad keys are all reported in one error, job keys first and each
// part in key order, and errors.As still finds a *MetaError (the first).
func TestParseMetaReportsEveryBadKey(t *testing.T) {
	cases := []struct {
		name     string
		job, grp map[string]string
		want     []string // "key@where" in order
	}{
		{"two job keys",
			map[string]string{"impact_walltime": "0s", "impact_grace": "soon", "impact_tier": "normal"}, nil,
			[]string{"impact_grace@job meta", "impact_walltime@job meta"}},
		{"three job keys with a typo",
			map[string]string{"impact_teir": "high", "impact_deadline": "friday", "impact_preemptible": "maybe"}, nil,
			[]string{"impact_deadline@job meta", "impact_preemptible@job meta", "impact_teir@job meta"}},
		{"job and group keys",
			map[string]string{"impact_tier": "normal", "impact_pool": "a b"},
			map[string]string{"impact_topology": "rack", "impact_tier": "critical"},
			[]string{"impact_pool@job meta", "impact_tier@group \"workers\" meta", "impact_topology@group \"workers\" meta"}},
		{"group repeats a bad job value once",
			map[string]string{"impact_project": "a b", "impact_grace": "x"},
			map[string]string{"impact_project": "a b"},
			[]string{"impact_grace@job meta", "impact_project@job meta"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var (
				spec Spec
				err  error
			)
			if tc.grp == nil {
				spec, err = ParseMeta(tc.job, nil)
			} else {
				spec, err = ParseGroupMeta(tc.job, tc.grp, "workers")
			}
			if spec != (Spec{Tier: spec.Tier}) {
				t.Fatalf("spec must be zero but for its tier on error, got %+v", spec)
			}
			var multi MetaErrors
			if !errors.As(err, &multi) {
				t.Fatalf("want MetaErrors, got %T %v", err, err)
			}
			var got []string
			for _, me := range multi {
				where := "job meta"
				if me.Group != "" {
					where = "group \"" + me.Group + "\" meta"
				}
				got = append(got, me.Key+"@"+where)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("errors = %v, want %v", got, tc.want)
			}
			var me *MetaError
			if !errors.As(err, &me) || me != multi[0] {
				t.Fatalf("errors.As should find the first *MetaError, got %v", me)
			}
			msg := err.Error()
			last := -1
			for i, w := range tc.want {
				key := strings.SplitN(w, "@", 2)[0]
				at := strings.Index(msg, multi[i].Error())
				if at <= last || !strings.Contains(multi[i].Error(), key) {
					t.Fatalf("message %q should list %q in order", msg, key)
				}
				last = at
			}
			if !strings.HasPrefix(msg, strconv.Itoa(len(tc.want))+" impact meta errors: ") {
				t.Fatalf("message %q should count the errors", msg)
			}
			// Stable: the same input gives the same text.
			for range 5 {
				_, again := ParseGroupMeta(tc.job, tc.grp, "workers")
				if tc.grp == nil {
					_, again = ParseMeta(tc.job, nil)
				}
				if again.Error() != msg {
					t.Fatalf("unstable message:\n%s\n%s", again, msg)
				}
			}
		})
	}
}

// One bad key stays a plain *MetaError (not a list of one).
func TestParseMetaOneBadKeyIsMetaError(t *testing.T) {
	_, err := ParseMeta(map[string]string{"impact_grace": "soon", "impact_tier": "normal"}, nil)
	if _, ok := err.(*MetaError); !ok {
		t.Fatalf("want *MetaError, got %T %v", err, err)
	}
}

// JoinMetaErrors lists a problem once however many parses repeat it, keeps
// the job's keys sorted before the groups', and passes other errors on.
func TestJoinMetaErrors(t *testing.T) {
	job := map[string]string{"impact_grace": "soon", "impact_pool": "a b"}
	_, jerr := ParseMeta(job, nil)
	_, g1 := ParseGroupMeta(job, map[string]string{"impact_topology": "rack"}, "a")
	_, g2 := ParseGroupMeta(job, map[string]string{"impact_checkpoint_signal": "USR1"}, "b")
	other := errors.New(`group "c": negative count -1`)
	err := JoinMetaErrors(jerr, g1, nil, g2, other)
	var multi MetaErrors
	if !errors.As(err, &multi) {
		t.Fatalf("want MetaErrors inside, got %T %v", err, err)
	}
	var got []string
	for _, me := range multi {
		got = append(got, me.Group+"/"+me.Key)
	}
	want := "/impact_grace,/impact_pool,a/impact_topology,b/impact_checkpoint_signal"
	if strings.Join(got, ",") != want {
		t.Fatalf("errors %v, want %s", got, want)
	}
	if !errors.Is(err, other) {
		t.Fatalf("the other error is lost: %v", err)
	}
	if JoinMetaErrors(nil, nil) != nil {
		t.Fatal("no errors must join to nil")
	}
	_, one := ParseMeta(map[string]string{"impact_grace": "soon"}, nil)
	if _, ok := JoinMetaErrors(one, one).(*MetaError); !ok {
		t.Fatal("one problem must stay a *MetaError")
	}
}

// impact_on_failure and impact_max_failures: what a gang that loses a
// member becomes, and how many runs in a row may lose one.
func TestParseOnFailure(t *testing.T) {
	for _, tc := range []struct {
		meta    map[string]string
		wantMax int
		fail    bool
		bad     string
	}{
		{meta: nil, wantMax: DefaultMaxFailures},
		{meta: map[string]string{MetaOnFailure: "requeue"}, wantMax: DefaultMaxFailures},
		{meta: map[string]string{MetaOnFailure: "fail"}, wantMax: 1, fail: true},
		{meta: map[string]string{MetaOnFailure: "fail", MetaMaxFailures: "5"}, wantMax: 1, fail: true},
		{meta: map[string]string{MetaMaxFailures: "3"}, wantMax: 3},
		{meta: map[string]string{MetaOnFailure: "retry"}, bad: MetaOnFailure},
		{meta: map[string]string{MetaMaxFailures: "0"}, bad: MetaMaxFailures},
		{meta: map[string]string{MetaMaxFailures: "many"}, bad: MetaMaxFailures},
	} {
		s, err := ParseMeta(tc.meta, nil)
		if tc.bad != "" {
			var me *MetaError
			if !errors.As(err, &me) || me.Key != tc.bad {
				t.Errorf("%v: err = %v, want a MetaError on %s", tc.meta, err, tc.bad)
			}
			continue
		}
		if err != nil || s.MaxFailedRuns() != tc.wantMax || s.FailOnLoss != tc.fail {
			t.Errorf("%v: max %d fail %v err %v, want %d %v", tc.meta, s.MaxFailedRuns(), s.FailOnLoss, err, tc.wantMax, tc.fail)
		}
	}
}

func TestIdleMeta(t *testing.T) {
	s, err := ParseMeta(map[string]string{MetaIdle: "ignore"}, nil)
	if err != nil || !s.IdleIgnore {
		t.Fatalf("spec %+v, err %v", s, err)
	}
	_, err = ParseMeta(map[string]string{MetaIdle: "off"}, nil)
	var me *MetaError
	if !errors.As(err, &me) || me.Key != MetaIdle || !strings.Contains(me.Reason, "ignore") {
		t.Fatalf("want a MetaError on %s, got %v", MetaIdle, err)
	}
	// A job-level fact: a group may not set a different one.
	_, err = ParseMeta(map[string]string{}, map[string]string{MetaIdle: "ignore"})
	if !errors.As(err, &me) || me.Key != MetaIdle || !me.InGroup {
		t.Fatalf("want a group MetaError on %s, got %v", MetaIdle, err)
	}
}

// A job's expected run from its next start is its walltime less the work
// saved; past its walltime what is left is unknown, never negative or a
// guess.
func TestLeftSubtractsSavedWork(t *testing.T) {
	for _, c := range []struct {
		name               string
		walltime, progress time.Duration
		want               time.Duration
	}{
		{"nothing saved", 6 * time.Hour, 0, 6 * time.Hour},
		{"five hours saved", 6 * time.Hour, 5 * time.Hour, time.Hour},
		{"saved all it said it needs", 6 * time.Hour, 6 * time.Hour, 0},
		{"outran its walltime", 6 * time.Hour, 7 * time.Hour, 0},
		{"no walltime", 0, 2 * time.Hour, 0},
	} {
		s := Spec{Walltime: c.walltime, Progress: c.progress}
		if got := s.Left(); got != c.want {
			t.Errorf("%s: Left() = %v, want %v", c.name, got, c.want)
		}
	}
}
