package policy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
)

func TestIdleDefaults(t *testing.T) {
	p := Default()
	for _, tier := range []string{"critical", "high", "normal", "scavenger"} {
		i := p.IdleOfTier(tier)
		if i.Action != IdleReport || i.Threshold != 5 || i.Duration != 30*time.Minute || !i.AllowOptOut || i.MaxRequeues != 2 {
			t.Fatalf("tier %s idle = %+v", tier, i)
		}
	}
}

// A tier's idle block overrides only the fields it writes; the rest come
// from the policy-wide block, which itself overrides only what it writes.
func TestIdlePerTierMerge(t *testing.T) {
	p, err := LoadBytes([]byte(`
idle {
  threshold = 10
  duration  = "20m"
}
tier "scavenger" {
  idle {
    action        = "requeue"
    max_requeues  = 1
  }
}
tier "high" {
  idle {
    action        = "preemptible"
    duration      = "1h"
    allow_opt_out = false
  }
}
`), "idle.hcl")
	if err != nil {
		t.Fatal(err)
	}
	sc := p.IdleOfTier("scavenger")
	if sc.Action != IdleRequeue || sc.MaxRequeues != 1 || sc.Threshold != 10 || sc.Duration != 20*time.Minute || !sc.AllowOptOut {
		t.Fatalf("scavenger idle = %+v", sc)
	}
	hi := p.IdleOfTier("high")
	if hi.Action != IdlePreemptible || hi.Duration != time.Hour || hi.Threshold != 10 || hi.AllowOptOut || hi.MaxRequeues != 2 {
		t.Fatalf("high idle = %+v", hi)
	}
	if n := p.IdleOfTier("normal"); n.Action != IdleReport || n.Threshold != 10 {
		t.Fatalf("normal idle = %+v", n)
	}
	if got := p.MaxIdleDuration(); got != time.Hour {
		t.Fatalf("MaxIdleDuration = %s", got)
	}
	// Clone is deep: changing the copy's override leaves p alone.
	c := p.Clone()
	*c.Tiers["high"].Idle.Action = IdleReport
	if p.IdleOfTier("high").Action != IdlePreemptible {
		t.Fatal("Clone shares the tier's idle override")
	}
	// The opt-out holds only where the tier allows it.
	if !p.IdleIgnored(jobspec.Spec{Tier: "scavenger", IdleIgnore: true}) {
		t.Fatal("scavenger opt-out not honoured")
	}
	if p.IdleIgnored(jobspec.Spec{Tier: "high", IdleIgnore: true}) {
		t.Fatal("high forbids the opt-out, yet it holds")
	}
	if p.IdleIgnored(jobspec.Spec{Tier: "scavenger"}) {
		t.Fatal("no opt-out written, yet it holds")
	}
}

func TestIdlePolicyErrors(t *testing.T) {
	cases := []struct {
		name, src string
		want      []string
	}{
		{"threshold zero", "idle {\n  threshold = 0\n}\n", []string{"bad.hcl:2", "idle threshold", "(0, 100]"}},
		{"threshold over 100", "idle {\n\n  threshold = 150\n}\n", []string{"bad.hcl:3", "idle threshold"}},
		{"bad action", "tier \"normal\" {\n  idle {\n    action = \"kill\"\n  }\n}\n", []string{"bad.hcl:3", `tier "normal" idle action`, `"kill"`, "requeue"}},
		{"action not a string", "idle {\n  action = [\"report\"]\n}\n", []string{"bad.hcl:2", "idle action", "string required"}},
		{"action a number", "idle {\n  action = 3\n}\n", []string{"bad.hcl:2", "idle action", `must be one of "report", "preemptible", "requeue", got "3"`}},
		{"zero duration", "idle {\n  duration = \"0s\"\n}\n", []string{"bad.hcl:2", "idle duration", "> 0"}},
		{"bad duration", "tier \"high\" {\n  idle {\n    duration = \"half an hour\"\n  }\n}\n", []string{"bad.hcl:3", `tier "high" idle duration`, "duration"}},
		{"negative requeues", "idle {\n  max_requeues = -1\n}\n", []string{"bad.hcl:2", "idle max_requeues", ">= 0"}},
		{"unknown attribute", "idle {\n  treshold = 5\n}\n", []string{"bad.hcl:2", "treshold"}},
		{"opt-out not bool", "idle {\n  allow_opt_out = \"no\"\n}\n", []string{"bad.hcl:2", "idle allow_opt_out", "a bool is required"}},
		{"tier idle twice", "tier \"normal\" {\n  idle {}\n  idle {}\n}\n", []string{"bad.hcl:3", `tier "normal" idle`, "Duplicate idle block", "Another was defined at bad.hcl:2"}},
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
