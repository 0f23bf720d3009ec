package policy

import (
	"strings"
	"testing"
	"time"
)

// A second file changes only what it writes: a tier's idle block keeps
// the fields an earlier one set, a project keeps its share, and each
// field's position is the file that wrote it last.
func TestOverlayKeepsWhatALaterFileDoesNotWrite(t *testing.T) {
	first, err := Default().Overlay([]byte(`tier "normal" {
  idle {
    threshold = 10
    action    = "preemptible"
  }
}
project "p" {
  share = 3
}
`), "a.hcl")
	if err != nil {
		t.Fatal(err)
	}
	second, err := first.Overlay([]byte(`tier "normal" {
  idle {
    duration = "2h"
  }
}
project "p" {
  weight = 2
}
`), "b.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Validate(); err != nil {
		t.Fatal(err)
	}
	i := second.IdleOfTier("normal")
	if i.Threshold != 10 || i.Action != IdlePreemptible || i.Duration != 2*time.Hour {
		t.Fatalf("normal's idle %+v: want threshold 10 and action preemptible from a.hcl, duration 2h from b.hcl", i)
	}
	if pr := second.Projects["p"]; pr.Share != 3 || pr.Weight != 2 {
		t.Fatalf("project p %+v", pr)
	}
	if got := second.pos[`tier "normal" idle threshold`]; got != (Pos{File: "a.hcl", Line: 3}) {
		t.Fatalf("threshold written at %v", got)
	}
	if got := second.pos[`tier "normal" idle duration`]; got != (Pos{File: "b.hcl", Line: 3}) {
		t.Fatalf("duration written at %v", got)
	}
	if first.Projects["p"].Weight != 1 {
		t.Fatal("Overlay changed the policy beneath")
	}
}

func TestOverlayErrorsNameFileLineAndKey(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"tier \"a b\" {\n  weight = 1\n}\n", `x.hcl:1: tier "a b": tier name must use letters, digits, '-', '_' or '.'`},
		{"project \"p\" {}\n\nproject \"p\" {}\n", `x.hcl:3: project "p": defined twice (first at line 1)`},
		{"aging {}\naging {}\n", `x.hcl:2: aging: Duplicate aging block`},
		{"headroom \"gpu\" {\n  tiers = [\"critical\"]\n  learn = true\n  window = 12\n}\n", `x.hcl:4: headroom "gpu" window: must be a duration string such as "10m", got number`},
		{"tier \"high\" {\n  idle {\n    duration = \"soon\"\n  }\n}\n", `x.hcl:3: tier "high" idle duration: must be a duration such as "90s", "10m" or "24h", got "soon"`},
		{"deadline {\n  horizon = var.h\n}\n", `x.hcl:2: deadline horizon: Variables not allowed`},
	} {
		_, err := Default().Overlay([]byte(tc.src), "x.hcl")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.src, err, tc.want)
		}
	}
}
