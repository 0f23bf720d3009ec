package policy

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
)

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
}

func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// The documented example policy parses, validates and says what it says.
func TestExamplePolicy(t *testing.T) {
	p, err := Load(filepath.Join(repoRoot(t), "example", "policy.hcl"))
	if err != nil {
		t.Fatalf("example/policy.hcl: %v", err)
	}
	for _, name := range []string{"critical", "high", "normal", "scavenger"} {
		if p.Tiers[name] == nil {
			t.Fatalf("tier %s missing", name)
		}
	}
	if got := p.TierNames(); strings.Join(got, ",") != "critical,high,normal,scavenger" {
		t.Fatalf("tier order %v", got)
	}
	if !p.MayPreempt("critical", "scavenger") || p.MayPreempt("scavenger", "normal") {
		t.Fatal("may_preempt not as written")
	}
	if p.Tiers["normal"].MaxGPUHoursLostPerHour != 32 || p.Tiers["critical"].MaxGPUHoursLostPerHour != 0 || p.Preemption.MaxGPUHoursLostPerHour != 64 {
		t.Fatalf("preemption budgets: normal %v, critical %v, shared %v", p.Tiers["normal"].MaxGPUHoursLostPerHour, p.Tiers["critical"].MaxGPUHoursLostPerHour, p.Preemption.MaxGPUHoursLostPerHour)
	}
	olmo := p.Projects["olmo"]
	if olmo == nil || olmo.Share != 3 || olmo.Weight != 1.5 || olmo.GPUQuota != 256 {
		t.Fatalf("project olmo = %+v", olmo)
	}
	if p.FairShare.HalfLife != 24*time.Hour || p.Preemption.RestartCost != 5*time.Minute {
		t.Fatalf("durations: %+v %+v", p.FairShare, p.Preemption)
	}
	if want := (Defragment{MaxVictimGPUs: 2, MaxPerCycle: 2}); p.Defragment != want || p.DefragmentGainHorizon() != time.Hour {
		t.Fatalf("defragment = %+v (gain horizon %s), want %+v with the preemption block's 1h", p.Defragment, p.DefragmentGainHorizon(), want)
	}
}

func TestMergeKeepsUnsetDefaults(t *testing.T) {
	p, err := LoadBytes([]byte(`
tier "normal" { weight = 20 }
tier "high" { max_gpu_hours_lost_per_hour = 12 }
project "x" { gpu_quota = 8 }
preemption { enabled = false }
`), "p.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if p.Tiers["normal"].Weight != 20 {
		t.Fatalf("weight not merged")
	}
	if h := p.Tiers["high"]; h.MaxGPUHoursLostPerHour != 12 || h.Weight != 1000 || p.Tiers["normal"].MaxGPUHoursLostPerHour != 0 {
		t.Fatalf("tier budgets: high %+v, normal %+v", h, p.Tiers["normal"])
	}
	if n := p.Tiers["normal"]; len(n.MayPreempt) != 1 || n.MayPreempt[0] != "scavenger" || !n.Preemptible {
		t.Fatalf("may_preempt of normal lost in merge: %+v", p.Tiers["normal"])
	}
	if p.Tiers["critical"] == nil || p.Preemption.Enabled || p.Preemption.MaxPerCycle != Default().Preemption.MaxPerCycle {
		t.Fatalf("defaults lost: %+v", p.Preemption)
	}
	if x := p.Projects["x"]; x == nil || x.Share != 1 || x.GPUQuota != 8 {
		t.Fatalf("project x = %+v", x)
	}
}

// Bad policy files: every error names file, line and field.
func TestPolicyFileErrors(t *testing.T) {
	cases := []struct {
		name, src string
		want      []string // substrings, all required
	}{
		{"syntax", "tier \"a\" {\n  weight = \n}\n", []string{"bad.hcl:2", "syntax"}},
		{"unknown attribute", "aging {\n  weight_per_day = 3\n}\n", []string{"bad.hcl:2", "aging", "weight_per_day"}},
		{"unknown block", "\n\nfairshare {\n}\n", []string{"bad.hcl:3", "fairshare"}},
		{"wrong type", "\ntier \"x\" {\n  weight = \"heavy\"\n}\n", []string{"bad.hcl:3", `tier "x" weight`, "number"}},
		{"bad duration", "fair_share {\n  half_life = \"a day\"\n}\n", []string{"bad.hcl:2", "fair_share half_life", "duration"}},
		{"duration as number", "preemption {\n\n  min_runtime = 600\n}\n", []string{"bad.hcl:3", "preemption min_runtime"}},
		{"negative weight", "tier \"x\" {\n  weight = -1\n}\n", []string{"bad.hcl:2", `tier "x" weight`, ">= 0"}},
		{"new tier without weight", "\ntier \"gold\" {\n  preemptible = true\n}\n", []string{"bad.hcl:2", `tier "gold" weight`, "required"}},
		{"zero share", "project \"p\" {\n  share = 0\n}\n", []string{"bad.hcl:2", `project "p" share`}},
		{"unknown may_preempt", "tier \"x\" {\n  weight = 1\n  may_preempt = [\"nobody\"]\n}\n", []string{"bad.hcl:3", `tier "x" may_preempt`, "nobody"}},
		{"self preempt", "tier \"normal\" {\n  may_preempt = [\"normal\"]\n}\n", []string{"bad.hcl:2", "may not preempt itself"}},
		{"default tier undefined", "\ndefault_tier = \"gold\"\n", []string{"bad.hcl:2", "default_tier", "gold"}},
		{"fractional int", "backfill {\n  reservations = 1.5\n}\n", []string{"bad.hcl:2", "backfill reservations", "whole number"}},
		{"unknown reserve tier", "backfill {\n\n  reserve_tiers = [\"critical\", \"urgent\"]\n}\n", []string{"bad.hcl:3", "backfill reserve_tiers", `"urgent"`, "not defined"}},
		{"negative quota", "project \"p\" {\n  gpu_quota = -4\n}\n", []string{"bad.hcl:2", `project "p" gpu_quota`}},
		{"duplicate block", "tier \"a\" { weight = 1 }\ntier \"a\" {}\n", []string{"bad.hcl:2", "defined twice"}},
		{"negative tier budget", "tier \"normal\" {\n\n  max_gpu_hours_lost_per_hour = -2\n}\n", []string{"bad.hcl:3", `tier "normal" max_gpu_hours_lost_per_hour`, ">= 0"}},
		{"half life zero", "fair_share {\n half_life = \"0s\"\n}\n", []string{"bad.hcl:2", "fair_share half_life", "> 0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadBytes([]byte(tc.src), "bad.hcl")
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not mention %q", err, w)
				}
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("want a *FieldError, got %T", err)
			}
		})
	}
}

func TestValidateReportsAllErrors(t *testing.T) {
	_, err := LoadBytes([]byte("tier \"x\" {\n  weight = -1\n}\nproject \"p\" {\n  share = -2\n}\n"), "two.hcl")
	if err == nil || !strings.Contains(err.Error(), "two.hcl:2") || !strings.Contains(err.Error(), "two.hcl:5") {
		t.Fatalf("want both errors, got %v", err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.hcl"))
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("want not-exist error, got %v", err)
	}
}

// MinRuntimeSource names where a job's min runtime comes from: its own
// impact_min_runtime when that decides, else the policy's min_runtime.
func TestMinRuntimeSource(t *testing.T) {
	p := Default() // preemption min_runtime 10m
	for _, tc := range []struct {
		own  time.Duration
		want string
	}{
		{0, "the policy's preemption min_runtime 10m0s"},
		{5 * time.Minute, "the policy's preemption min_runtime 10m0s"},
		{10 * time.Minute, "impact_min_runtime 10m0s"},
		{30 * time.Minute, "impact_min_runtime 30m0s"},
	} {
		if got := p.MinRuntimeSource(jobspec.Spec{MinRuntime: tc.own}); got != tc.want {
			t.Errorf("own %s: %q, want %q", tc.own, got, tc.want)
		}
	}
}

// backfill reserve_tiers names the tiers whose blocked jobs always get a
// reservation; unset, none do.
func TestReserveTiersParse(t *testing.T) {
	p, err := LoadBytes([]byte("backfill {\n  reserve_tiers = [\"critical\", \"high\"]\n}\n"), "p.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.Backfill.ReserveTiers, ","); got != "critical,high" || p.Backfill.Reservations != 1 {
		t.Fatalf("reserve_tiers %q, reservations %d; want critical,high beside the default 1", got, p.Backfill.Reservations)
	}
	p, err = LoadBytes([]byte("backfill {\n  reservations = 0\n}\n"), "p.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Backfill.ReserveTiers) != 0 {
		t.Fatalf("reserve_tiers %q unset, want none", p.Backfill.ReserveTiers)
	}
}
