package policy

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestHeadroomParse(t *testing.T) {
	src := `
headroom "gpu" {
  tiers = ["critical"]
  gpus  = 16
}
headroom "a100" {
  tiers = ["critical", "high"]
  share = 0.1
}
headroom "h100" {
  tiers     = ["critical"]
  learn     = true
  window    = "12h"
  max_share = 0.5
  idle_budget = 0.004
}
`
	p, err := LoadBytes([]byte(src), "p.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := p.HeadroomFor("gpu").Size(64); !ok || g != 16 {
		t.Fatalf("gpu headroom %d %v, want 16", g, ok)
	}
	if g, _ := p.HeadroomFor("gpu").Size(8); g != 8 {
		t.Fatalf("fixed headroom on 8 GPUs: %d, want 8 (capped by the pool)", g)
	}
	if g, ok := p.HeadroomFor("a100").Size(63); !ok || g != 7 {
		t.Fatalf("a100 headroom %d, want ceil(6.3) = 7", g)
	}
	h := p.HeadroomFor("h100")
	if _, ok := h.Size(64); ok || !h.Learn || h.Window != 12*time.Hour || h.LearnedCap(64) != 32 {
		t.Fatalf("h100 headroom %+v", h)
	}
	if rate, carry := h.IdleAllowance(1000); h.IdleBudget != 0.004 || math.Abs(rate-4) > 1e-9 || math.Abs(carry-4*12*3600) > 1e-6 ||
		!strings.HasSuffix(h.Describe(), "at most 50% of the pool, idle at most 0.4% of the pool on average") {
		t.Fatalf("h100 idle budget %v: allowance %v a second, %v carried; %q", h.IdleBudget, rate, carry, h.Describe())
	}
	if rate, _ := p.HeadroomFor("gpu").IdleAllowance(64); rate != 0 || strings.Contains(p.HeadroomFor("gpu").Describe(), "idle") {
		t.Fatalf("a headroom without idle_budget has an allowance of %v", rate)
	}
	if !h.UsesHeadroom("critical") || h.UsesHeadroom("high") {
		t.Fatal("UsesHeadroom")
	}
	if p.HeadroomFor("other") != nil {
		t.Fatal("a pool without a block has a headroom")
	}
	// Clone is deep.
	c := p.Clone()
	c.Headrooms["gpu"].Tiers[0] = "high"
	if p.Headrooms["gpu"].Tiers[0] != "critical" {
		t.Fatal("Clone shares headroom tiers")
	}
	// A later file replaces the size choice and keeps the rest.
	m, err := p.Overlay([]byte("headroom \"gpu\" {\n  learn = true\n}\n"), "o.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	if mh := m.HeadroomFor("gpu"); !mh.Learn || mh.GPUs != 0 || mh.Tiers[0] != "critical" || mh.Window != DefaultHeadroomWindow {
		t.Fatalf("merged %+v", mh)
	}
}

func TestHeadroomErrors(t *testing.T) {
	cases := []struct{ src, want string }{
		{"headroom \"gpu\" {\n  gpus = 4\n}\n", `p.hcl:1: headroom "gpu" tiers: required`},
		{"headroom \"gpu\" {\n  tiers = [\"urgent\"]\n  gpus = 4\n}\n", `p.hcl:2: headroom "gpu" tiers: names tier "urgent", which is not defined`},
		{"headroom \"gpu\" {\n  tiers = [\"critical\"]\n  gpus = 4\n  share = 0.5\n}\n", `headroom "gpu" gpus: set exactly one of gpus, share and learn = true (got 2)`},
		{"headroom \"gpu\" {\n  tiers = [\"critical\"]\n}\n", `p.hcl:1: headroom "gpu" gpus: set exactly one of gpus, share and learn = true (got 0)`},
		{"headroom \"gpu\" {\n  tiers = [\"critical\"]\n  share = 1.5\n}\n", `p.hcl:3: headroom "gpu" share: must be a share of the pool in (0, 1], got 1.5`},
		{"headroom \"gpu\" {\n  tiers = [\"critical\"]\n  gpus = -1\n}\n", `p.hcl:3: headroom "gpu" gpus: must be >= 0, got -1`},
		{"headroom \"gpu\" {\n  tiers = [\"critical\"]\n  learn = true\n  window = \"0s\"\n}\n", `p.hcl:4: headroom "gpu" window: must be > 0`},
		{"headroom \"gpu\" {\n  tiers = [\"critical\"]\n  learn = true\n  max_share = 0\n}\n", `p.hcl:4: headroom "gpu" max_share: must be a share of the pool in (0, 1]`},
		{"headroom \"gpu\" {\n  tiers = [\"critical\"]\n  gpus = 4\n  idle_budget = 1\n}\n", `p.hcl:4: headroom "gpu" idle_budget: must be a share of the pool in [0, 1) (0: no budget), got 1`},
		{"headroom \"gpu\" {\n  tiers = [\"critical\"]\n  gpus = 4\n  idle_budget = -0.01\n}\n", `p.hcl:4: headroom "gpu" idle_budget: must be a share of the pool in [0, 1) (0: no budget), got -0.01`},
		{"headroom \"gpu\" {\n  tiers = [\"critical\"]\n  gpus = 4\n  loan_grace = \"-5s\"\n}\n", `p.hcl:4: headroom "gpu" loan_grace: must be >= 0 ("0s": stop work on loan at once), got -5s`},
		{"headroom \"gpu\" {\n  tiers = [\"critical\"]\n  gpus = 4\n  loan_grace = \"soon\"\n}\n", `p.hcl:4: headroom "gpu" loan_grace: must be a duration such as "90s", "10m" or "24h", got "soon"`},
		{"headroom \"gpu\" {\n  tiers = [\"critical\"]\n  gpus = 4\n  take_back = \"-1m\"\n}\n", `p.hcl:4: headroom "gpu" take_back: must be >= 0 ("0s": take nothing back), got -1m0s`},
		{"headroom \"gpu\" {\n  tiers = [\"critical\"]\n  gpus = 4\n  take_back = 10\n}\n", `p.hcl:4: headroom "gpu" take_back: must be a duration string such as "10m", got number`},
		{"headroom \"gpu\" {\n  tiers = [\"critical\"]\n  gpus = 4\n  take_back_unsaved = \"-2m\"\n}\n", `p.hcl:4: headroom "gpu" take_back_unsaved: must be >= 0 ("0s": take nothing back by it), got -2m0s`},
		{"headroom \"gpu\" {\n  tiers = [\"critical\"]\n  gpus = 4\n  take_back_unsaved = true\n}\n", `p.hcl:4: headroom "gpu" take_back_unsaved: must be a duration string such as "10m", got bool`},
		{"headroom \"gpu\" {\n  tiers = [\"critical\"]\n  gpu = 4\n}\n", `p.hcl:3`},
		{"headroom \"gpu\" {\n  tiers = \"critical\"\n  gpus = 4\n}\n", `p.hcl:2: headroom "gpu" tiers: Unsuitable value type; Unsuitable value: list of string required`},
		{"headroom \"g\" {\n  tiers = [\"critical\"]\n  gpus = 1\n}\nheadroom \"g\" {\n  tiers = [\"critical\"]\n  gpus = 1\n}\n", `p.hcl:5: headroom "g": defined twice (first at line 1)`},
	}
	for _, c := range cases {
		_, err := LoadBytes([]byte(c.src), "p.hcl")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.src, err, c.want)
		}
	}
}

// loan_grace: unset lends nothing; set, a victim on loan gets the shorter
// of it and its own grace; a later file keeps it unless it writes one;
// Clone does not share it.
func TestHeadroomLoanGrace(t *testing.T) {
	p, err := LoadBytes([]byte("headroom \"gpu\" {\n  tiers = [\"critical\"]\n  gpus = 8\n  loan_grace = \"10s\"\n}\nheadroom \"h100\" {\n  tiers = [\"critical\"]\n  gpus = 8\n}\n"), "p.hcl")
	if err != nil {
		t.Fatal(err)
	}
	h := p.HeadroomFor("gpu")
	for _, c := range []struct{ own, want time.Duration }{{time.Minute, 10 * time.Second}, {3 * time.Second, 3 * time.Second}, {0, 0}} {
		if g, ok := h.LoanOf(c.own); !ok || g != c.want {
			t.Errorf("LoanOf(%s) = %s, %v; want %s, true", c.own, g, ok, c.want)
		}
	}
	if !strings.Contains(h.Describe(), "lent to preemptible work on 10s notice") {
		t.Errorf("Describe: %q", h.Describe())
	}
	if g, ok := p.HeadroomFor("h100").LoanOf(time.Minute); ok || g != time.Minute || strings.Contains(p.HeadroomFor("h100").Describe(), "lent") {
		t.Errorf("a headroom without loan_grace lends: %s %v", g, ok)
	}
	c := p.Clone()
	*c.Headrooms["gpu"].LoanGrace = time.Hour
	if *h.LoanGrace != 10*time.Second {
		t.Fatalf("Clone shares loan_grace: %s", *h.LoanGrace)
	}
	m, err := p.Overlay([]byte("headroom \"gpu\" {\n  gpus = 4\n}\n"), "o.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if g := m.HeadroomFor("gpu").LoanGrace; g == nil || *g != 10*time.Second {
		t.Fatalf("an overlay that does not write loan_grace dropped it: %v", g)
	}
}

// take_back: unset takes nothing back; set, a victim whose first
// allocation started less than take_back ago is taken back, one as old
// as take_back or older is not; a later file keeps it unless it writes
// one, and one that writes it replaces it.
func TestHeadroomTakeBack(t *testing.T) {
	p, err := LoadBytes([]byte("headroom \"gpu\" {\n  tiers = [\"critical\"]\n  gpus = 8\n  take_back = \"10m\"\n}\nheadroom \"h100\" {\n  tiers = [\"critical\"]\n  gpus = 8\n}\n"), "p.hcl")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	h := p.HeadroomFor("gpu")
	for _, c := range []struct {
		name    string
		started time.Time
		want    bool
	}{
		{"started a second ago", ago(time.Second), true},
		{"just under take_back", ago(10*time.Minute - time.Second), true},
		{"exactly take_back ago", ago(10 * time.Minute), false},
		{"older", ago(11 * time.Minute), false},
		{"never started", time.Time{}, false},
	} {
		if got := h.TakesBack(c.started, now); got != c.want {
			t.Errorf("%s: TakesBack = %v, want %v", c.name, got, c.want)
		}
	}
	if !strings.Contains(h.Describe(), "preemptible work younger than 10m0s taken back at once") {
		t.Errorf("Describe: %q", h.Describe())
	}
	if o := p.HeadroomFor("h100"); o.TakesBack(ago(time.Second), now) || strings.Contains(o.Describe(), "taken back") {
		t.Errorf("a headroom without take_back takes back: %q", o.Describe())
	}
	m, err := p.Overlay([]byte("headroom \"gpu\" {\n  gpus = 4\n}\n"), "o.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if g := m.HeadroomFor("gpu").TakeBack; g != 10*time.Minute {
		t.Fatalf("an overlay that does not write take_back changed it to %s", g)
	}
	m, err = p.Overlay([]byte("headroom \"gpu\" {\n  take_back = \"0s\"\n}\n"), "o.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if m.HeadroomFor("gpu").TakesBack(ago(time.Second), now) {
		t.Fatal("an overlay writing take_back = \"0s\" still takes back")
	}
}

// take_back_unsaved: unset takes nothing back by it; set, a victim with
// less work unsaved than it is taken back, one with as much or more is
// not, nor one that has not started; Describe names it; a later file
// keeps it unless it writes one.
func TestHeadroomTakeBackUnsaved(t *testing.T) {
	p, err := LoadBytes([]byte("headroom \"gpu\" {\n  tiers = [\"critical\"]\n  gpus = 8\n  take_back_unsaved = \"2m\"\n}\nheadroom \"h100\" {\n  tiers = [\"critical\"]\n  gpus = 8\n  take_back = \"10m\"\n}\n"), "p.hcl")
	if err != nil {
		t.Fatal(err)
	}
	h := p.HeadroomFor("gpu")
	for _, c := range []struct {
		unsaved time.Duration
		want    bool
	}{{0, true}, {time.Second, true}, {2*time.Minute - time.Second, true}, {2 * time.Minute, false}, {time.Hour, false}, {-1, false}} {
		if got := h.TakesBackUnsaved(c.unsaved); got != c.want {
			t.Errorf("TakesBackUnsaved(%s) = %v, want %v", c.unsaved, got, c.want)
		}
	}
	if !h.TakesAnyBack() || h.TakesBack(time.Now(), time.Now().Add(time.Second)) {
		t.Errorf("take_back_unsaved alone: TakesAnyBack %v, TakesBack by age %v", h.TakesAnyBack(), h.TakesBack(time.Now(), time.Now().Add(time.Second)))
	}
	if !strings.Contains(h.Describe(), "preemptible work with less than 2m0s unsaved since its last checkpoint taken back at once") {
		t.Errorf("Describe: %q", h.Describe())
	}
	o := p.HeadroomFor("h100")
	if o.TakesBackUnsaved(time.Second) || !o.TakesAnyBack() || strings.Contains(o.Describe(), "unsaved") {
		t.Errorf("a headroom with take_back alone: TakesBackUnsaved %v, TakesAnyBack %v, %q", o.TakesBackUnsaved(time.Second), o.TakesAnyBack(), o.Describe())
	}
	m, err := p.Overlay([]byte("headroom \"gpu\" {\n  gpus = 4\n}\n"), "o.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if g := m.HeadroomFor("gpu").TakeBackUnsaved; g != 2*time.Minute {
		t.Fatalf("an overlay that does not write take_back_unsaved changed it to %s", g)
	}
	m, err = p.Overlay([]byte("headroom \"gpu\" {\n  take_back_unsaved = \"0s\"\n}\n"), "o.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if m.HeadroomFor("gpu").TakesAnyBack() {
		t.Fatal("an overlay writing take_back_unsaved = \"0s\" still takes back")
	}
}
