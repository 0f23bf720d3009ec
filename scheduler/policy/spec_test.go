package policy

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/impact-sched/nomad-impact/jobspec"
)

func TestCheckSpecUnknownTier(t *testing.T) {
	p := Default()
	err := p.CheckSpec(jobspec.Spec{Tier: "urgent"})
	var me *jobspec.MetaError
	if !errors.As(err, &me) || me.Key != jobspec.MetaTier || !strings.Contains(err.Error(), "critical") {
		t.Fatalf("want unknown-tier error listing tiers, got %v", err)
	}
	if err := p.CheckSpec(jobspec.Spec{}); err != nil {
		t.Fatalf("empty tier resolves to the default: %v", err)
	}
}

// Issue 36: a job's meta problems are told at once, an unknown tier (which
// only the policy can tell) among them: "urgnet" must not wait until
// "soon" is fixed. Policy.SpecError joins the parse's errors with the
// tier's, each once, job keys in key order, then the groups'.
func TestSpecErrorReportsEveryProblemAtOnce(t *testing.T) {
	p := Default()
	cases := []struct {
		name     string
		job, grp map[string]string // grp nil: jobspec.ParseMeta of the job alone
		want     []string          // each problem's key and value, in order; nil: no error
	}{
		{"bad grace and unknown tier",
			map[string]string{"impact_grace": "soon", "impact_tier": "urgnet"}, nil,
			[]string{`impact_grace = "soon"`, `impact_tier = "urgnet"`}},
		{"unknown tier sorts among the job's keys",
			map[string]string{"impact_walltime": "long", "impact_tier": "urgnet", "impact_deadline": "friday"}, nil,
			[]string{`impact_deadline = "friday"`, `impact_tier = "urgnet"`, `impact_walltime = "long"`}},
		{"unknown tier alone",
			map[string]string{"impact_tier": "urgnet"}, nil,
			[]string{`impact_tier = "urgnet"`}},
		{"known tier, bad grace",
			map[string]string{"impact_tier": "high", "impact_grace": "soon"}, nil,
			[]string{`impact_grace = "soon"`}},
		{"job, tier and group problems",
			map[string]string{"impact_grace": "soon", "impact_tier": "urgnet"},
			map[string]string{"impact_topology": "rack"},
			[]string{`impact_grace = "soon"`, `impact_tier = "urgnet"`, `group "workers" meta impact_topology = "rack"`}},
		{"valid", map[string]string{"impact_tier": "high"}, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := jobspec.ParseMeta(tc.job, nil)
			if tc.grp != nil {
				var gerr error
				_, gerr = jobspec.ParseGroupMeta(tc.job, tc.grp, "workers")
				err = jobspec.JoinMetaErrors(err, gerr)
			}
			got := p.SpecError(spec, err)
			if tc.want == nil {
				if got != nil {
					t.Fatalf("want no error, got %v", got)
				}
				return
			}
			if got == nil {
				t.Fatalf("want %v, got no error", tc.want)
			}
			msg := got.Error()
			last := -1
			for _, w := range tc.want {
				at := strings.Index(msg, w)
				if at <= last {
					t.Fatalf("error %q should name %q once, after the previous ones", msg, w)
				}
				if strings.Count(msg, w) != 1 {
					t.Fatalf("error %q names %q more than once", msg, w)
				}
				last = at
			}
			if len(tc.want) > 1 && !strings.HasPrefix(msg, strconv.Itoa(len(tc.want))+" impact meta errors: ") {
				t.Fatalf("error %q should count %d errors", msg, len(tc.want))
			}
		})
	}
}
