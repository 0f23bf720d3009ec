package policy

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/impact-sched/nomad-impact/internal/hclfile"
	"github.com/impact-sched/nomad-impact/jobspec"
)

// The policy file's layout, decoded by gohcl: each key is named once, in
// its tag. A nil attribute (or null duration expression) is one the file
// does not write, so the policy beneath keeps its value. Durations are
// read as expressions, to name their place when they do not parse.

type policyFile struct {
	DefaultTier    *string         `hcl:"default_tier,optional"`
	DefaultProject *string         `hcl:"default_project,optional"`
	Tiers          []tierFile      `hcl:"tier,block"`
	Projects       []projectFile   `hcl:"project,block"`
	Aging          *agingFile      `hcl:"aging,block"`
	FairShare      *fairShareFile  `hcl:"fair_share,block"`
	Deadline       *deadlineFile   `hcl:"deadline,block"`
	ShortestFirst  *shortestFile   `hcl:"shortest_first,block"`
	Preemption     *preemptionFile `hcl:"preemption,block"`
	Backfill       *backfillFile   `hcl:"backfill,block"`
	Defragment     *defragmentFile `hcl:"defragment,block"`
	Headrooms      []headroomFile  `hcl:"headroom,block"`
	Gangs          *gangsFile      `hcl:"gangs,block"`
	Idle           *idleFile       `hcl:"idle,block"`
	Walltime       *walltimeFile   `hcl:"walltime,block"`
}

type tierFile struct {
	Name                   string    `hcl:"name,label"`
	Weight                 *float64  `hcl:"weight,optional"`
	MayPreempt             *[]string `hcl:"may_preempt,optional"`
	Preemptible            *bool     `hcl:"preemptible,optional"`
	MaxGPUHoursLostPerHour *float64  `hcl:"max_gpu_hours_lost_per_hour,optional"`
	Idle                   *idleFile `hcl:"idle,block"`
	Body                   hcl.Body  `hcl:",body"`
}

type projectFile struct {
	Name     string   `hcl:"name,label"`
	Share    *float64 `hcl:"share,optional"`
	Weight   *float64 `hcl:"weight,optional"`
	GPUQuota *int     `hcl:"gpu_quota,optional"`
	Body     hcl.Body `hcl:",body"`
}

type agingFile struct {
	WeightPerHour *float64 `hcl:"weight_per_hour,optional"`
	Max           *float64 `hcl:"max,optional"`
}

type fairShareFile struct {
	HalfLife hcl.Expression `hcl:"half_life,optional"`
	Weight   *float64       `hcl:"weight,optional"`
}

type deadlineFile struct {
	Weight  *float64       `hcl:"weight,optional"`
	Horizon hcl.Expression `hcl:"horizon,optional"`
}

type shortestFile struct {
	Weight       *float64 `hcl:"weight,optional"`
	OverdueShare *float64 `hcl:"overdue_share,optional"`
}

type preemptionFile struct {
	Enabled                *bool          `hcl:"enabled,optional"`
	MaxGPUHoursLostPerHour *float64       `hcl:"max_gpu_hours_lost_per_hour,optional"`
	MinRuntime             hcl.Expression `hcl:"min_runtime,optional"`
	RestartCost            hcl.Expression `hcl:"restart_cost,optional"`
	GainHorizon            hcl.Expression `hcl:"gain_horizon,optional"`
	MaxPerCycle            *int           `hcl:"max_per_cycle,optional"`
	WeighEnds              *bool          `hcl:"weigh_ends,optional"`
	Withdraw               *bool          `hcl:"withdraw,optional"`
}

type backfillFile struct {
	Enabled      *bool     `hcl:"enabled,optional"`
	Reservations *int      `hcl:"reservations,optional"`
	Gather       *bool     `hcl:"gather,optional"`
	ReserveTiers *[]string `hcl:"reserve_tiers,optional"`
}

type defragmentFile struct {
	Enabled       *bool          `hcl:"enabled,optional"`
	MaxVictimGPUs *int           `hcl:"max_victim_gpus,optional"`
	MaxPerCycle   *int           `hcl:"max_per_cycle,optional"`
	GainHorizon   hcl.Expression `hcl:"gain_horizon,optional"`
}

type headroomFile struct {
	Pool            string         `hcl:"pool,label"`
	Tiers           *[]string      `hcl:"tiers,optional"`
	GPUs            *int           `hcl:"gpus,optional"`
	Share           *float64       `hcl:"share,optional"`
	Learn           *bool          `hcl:"learn,optional"`
	Window          hcl.Expression `hcl:"window,optional"`
	MaxShare        *float64       `hcl:"max_share,optional"`
	MinGPUs         *int           `hcl:"min_gpus,optional"`
	IdleBudget      *float64       `hcl:"idle_budget,optional"`
	LoanGrace       hcl.Expression `hcl:"loan_grace,optional"`
	TakeBack        hcl.Expression `hcl:"take_back,optional"`
	TakeBackUnsaved hcl.Expression `hcl:"take_back_unsaved,optional"`
	Body            hcl.Body       `hcl:",body"`
}

type gangsFile struct {
	MissingMemberGrace hcl.Expression `hcl:"missing_member_grace,optional"`
}

type walltimeFile struct {
	Learn      *bool          `hcl:"learn,optional"`
	Running    *bool          `hcl:"running,optional"`
	Quantile   *float64       `hcl:"quantile,optional"`
	MinSamples *int           `hcl:"min_samples,optional"`
	Window     hcl.Expression `hcl:"window,optional"`
}

type idleFile struct {
	Threshold   *float64       `hcl:"threshold,optional"`
	Duration    hcl.Expression `hcl:"duration,optional"`
	Action      *string        `hcl:"action,optional"`
	MaxRequeues *int           `hcl:"max_requeues,optional"`
	AllowOptOut *bool          `hcl:"allow_opt_out,optional"`
}

// overlay lays what a decoded file writes on p (a clone): fields it
// writes replace p's, tiers, projects and headrooms merge by name. Every
// problem is collected in errs.
type overlay struct {
	p    *Policy
	body *hclsyntax.Body
	at   map[string]hcl.Range // where each key of the file is written
	errs []error
}

func (o *overlay) fail(r hcl.Range, field, format string, args ...any) {
	o.errs = append(o.errs, &FieldError{Pos: posOf(r), Field: field, Reason: fmt.Sprintf(format, args...)})
}

func posOf(r hcl.Range) Pos { return Pos{File: r.Filename, Line: r.Start.Line} }

// set lays *src on *dst when the file writes it.
func set[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}

// dur lays a duration the file writes on *dst, or says where it is not one.
func (o *overlay) dur(dst *time.Duration, e hcl.Expression) {
	d, ok := o.duration(e)
	if ok {
		*dst = d
	}
}

// durPtr is dur for an override: nil when the file does not write it.
func (o *overlay) durPtr(e hcl.Expression) *time.Duration {
	if d, ok := o.duration(e); ok {
		return &d
	}
	return nil
}

func (o *overlay) duration(e hcl.Expression) (time.Duration, bool) {
	if e == nil {
		return 0, false
	}
	v, diags := e.Value(nil)
	field := hclfile.KeyAt(o.body, e.Range())
	if diags.HasErrors() {
		o.fail(e.Range(), field, "%s", diags[0].Summary)
		return 0, false
	}
	if v.IsNull() {
		return 0, false
	}
	if !v.IsKnown() || v.Type() != cty.String {
		o.fail(e.Range(), field, "must be a duration string such as \"10m\", got %s", v.Type().FriendlyName())
		return 0, false
	}
	d, err := time.ParseDuration(strings.TrimSpace(v.AsString()))
	if err != nil {
		o.fail(e.Range(), field, "must be a duration such as \"90s\", \"10m\" or \"24h\", got %q", v.AsString())
		return 0, false
	}
	return d, true
}

// label checks a block's name; key is the block as errors name it.
func (o *overlay) label(what, name, key string) bool {
	if jobspec.ValidName(name) {
		return true
	}
	o.fail(o.at[key], key, "%s name must use letters, digits, '-', '_' or '.'", what)
	return false
}

// once reports a block label already seen, as defined twice.
func (o *overlay) once(seen map[string]bool, key string, body hcl.Body) bool {
	if seen[key] {
		r := body.MissingItemRange()
		if sb, ok := body.(*hclsyntax.Body); ok {
			r = sb.SrcRange
		}
		o.fail(r, key, "defined twice (first at line %d)", o.at[key].Start.Line)
		return false
	}
	seen[key] = true
	return true
}

func (o *overlay) apply(f *policyFile) {
	p := o.p
	set(&p.DefaultTier, f.DefaultTier)
	set(&p.DefaultProject, f.DefaultProject)
	seen := map[string]bool{}
	for i := range f.Tiers {
		o.tier(&f.Tiers[i], seen)
	}
	for i := range f.Projects {
		o.project(&f.Projects[i], seen)
	}
	if a := f.Aging; a != nil {
		set(&p.Aging.WeightPerHour, a.WeightPerHour)
		set(&p.Aging.Max, a.Max)
	}
	if fs := f.FairShare; fs != nil {
		o.dur(&p.FairShare.HalfLife, fs.HalfLife)
		set(&p.FairShare.Weight, fs.Weight)
	}
	if d := f.Deadline; d != nil {
		set(&p.Deadline.Weight, d.Weight)
		o.dur(&p.Deadline.Horizon, d.Horizon)
	}
	if sf := f.ShortestFirst; sf != nil {
		set(&p.ShortestFirst.Weight, sf.Weight)
		set(&p.ShortestFirst.OverdueShare, sf.OverdueShare)
	}
	if pr := f.Preemption; pr != nil {
		set(&p.Preemption.Enabled, pr.Enabled)
		set(&p.Preemption.MaxGPUHoursLostPerHour, pr.MaxGPUHoursLostPerHour)
		o.dur(&p.Preemption.MinRuntime, pr.MinRuntime)
		o.dur(&p.Preemption.RestartCost, pr.RestartCost)
		o.dur(&p.Preemption.GainHorizon, pr.GainHorizon)
		set(&p.Preemption.MaxPerCycle, pr.MaxPerCycle)
		set(&p.Preemption.WeighEnds, pr.WeighEnds)
		set(&p.Preemption.Withdraw, pr.Withdraw)
	}
	if b := f.Backfill; b != nil {
		set(&p.Backfill.Enabled, b.Enabled)
		set(&p.Backfill.Reservations, b.Reservations)
		set(&p.Backfill.Gather, b.Gather)
		if b.ReserveTiers != nil {
			p.Backfill.ReserveTiers = append([]string{}, *b.ReserveTiers...)
		}
	}
	if d := f.Defragment; d != nil {
		set(&p.Defragment.Enabled, d.Enabled)
		set(&p.Defragment.MaxVictimGPUs, d.MaxVictimGPUs)
		set(&p.Defragment.MaxPerCycle, d.MaxPerCycle)
		o.dur(&p.Defragment.GainHorizon, d.GainHorizon)
	}
	for i := range f.Headrooms {
		o.headroom(&f.Headrooms[i], seen)
	}
	if g := f.Gangs; g != nil {
		o.dur(&p.Gangs.MissingMemberGrace, g.MissingMemberGrace)
	}
	if f.Idle != nil {
		p.Idle = o.idle(f.Idle).apply(p.Idle)
	}
	if w := f.Walltime; w != nil {
		set(&p.Walltime.Learn, w.Learn)
		set(&p.Walltime.Running, w.Running)
		set(&p.Walltime.Quantile, w.Quantile)
		set(&p.Walltime.MinSamples, w.MinSamples)
		o.dur(&p.Walltime.Window, w.Window)
	}
	for k, r := range o.at {
		p.pos[k] = posOf(r)
	}
}

func (o *overlay) tier(t *tierFile, seen map[string]bool) {
	key := "tier " + strconv.Quote(t.Name)
	if !o.label("tier", t.Name, key) || !o.once(seen, key, t.Body) {
		return
	}
	ct, ok := o.p.Tiers[t.Name]
	if !ok {
		ct = &Tier{Name: t.Name}
		o.p.Tiers[t.Name] = ct
		if t.Weight == nil {
			// A tier the defaults do not know needs its weight said: 0
			// would silently rank it below everything.
			o.p.problems = append(o.p.problems, &FieldError{Pos: posOf(o.at[key]), Field: key + " weight", Reason: "required for a tier that is not built in"})
		}
	}
	set(&ct.Weight, t.Weight)
	if t.MayPreempt != nil {
		ct.MayPreempt = append([]string{}, *t.MayPreempt...)
	}
	set(&ct.Preemptible, t.Preemptible)
	set(&ct.MaxGPUHoursLostPerHour, t.MaxGPUHoursLostPerHour)
	if t.Idle != nil {
		ct.Idle = ct.Idle.with(o.idle(t.Idle))
	}
}

func (o *overlay) project(pf *projectFile, seen map[string]bool) {
	key := "project " + strconv.Quote(pf.Name)
	if !o.label("project", pf.Name, key) || !o.once(seen, key, pf.Body) {
		return
	}
	cp, ok := o.p.Projects[pf.Name]
	if !ok {
		cp = &Project{Name: pf.Name, Share: 1, Weight: 1}
		o.p.Projects[pf.Name] = cp
	}
	set(&cp.Share, pf.Share)
	set(&cp.Weight, pf.Weight)
	set(&cp.GPUQuota, pf.GPUQuota)
}

func (o *overlay) headroom(h *headroomFile, seen map[string]bool) {
	key := "headroom " + strconv.Quote(h.Pool)
	if !o.label("pool", h.Pool, key) || !o.once(seen, key, h.Body) {
		return
	}
	p := o.p
	if p.Headrooms == nil {
		p.Headrooms = map[string]*Headroom{}
	}
	ch, ok := p.Headrooms[h.Pool]
	if !ok {
		ch = &Headroom{Pool: h.Pool, Window: DefaultHeadroomWindow, MaxShare: DefaultHeadroomMaxShare}
		p.Headrooms[h.Pool] = ch
	}
	if h.Tiers != nil {
		ch.Tiers = append([]string{}, *h.Tiers...)
	}
	// The size is one choice: a file that sets one of gpus, share and
	// learn replaces whichever the policy had.
	if h.GPUs != nil || h.Share != nil || h.Learn != nil {
		ch.GPUs, ch.Share, ch.Learn = 0, 0, false
		for _, f := range []string{"gpus", "share", "learn"} {
			delete(p.pos, key+" "+f)
		}
	}
	set(&ch.GPUs, h.GPUs)
	set(&ch.Share, h.Share)
	set(&ch.Learn, h.Learn)
	o.dur(&ch.Window, h.Window)
	set(&ch.MaxShare, h.MaxShare)
	set(&ch.MinGPUs, h.MinGPUs)
	set(&ch.IdleBudget, h.IdleBudget)
	if d := o.durPtr(h.LoanGrace); d != nil {
		ch.LoanGrace = d
	}
	o.dur(&ch.TakeBack, h.TakeBack)
	o.dur(&ch.TakeBackUnsaved, h.TakeBackUnsaved)
}

// idle is what an idle block writes, as an override.
func (o *overlay) idle(f *idleFile) *IdleOverride {
	ov := &IdleOverride{Threshold: f.Threshold, Duration: o.durPtr(f.Duration), MaxRequeues: f.MaxRequeues, AllowOptOut: f.AllowOptOut}
	if f.Action != nil {
		a := IdleAction(*f.Action)
		ov.Action = &a
	}
	return ov
}
