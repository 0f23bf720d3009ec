package policy

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// Policy is the operator's scheduling policy. Build it with Default, Merge
// the parsed file on top, then Validate (Load does all three).
type Policy struct {
	// DefaultTier is the tier of jobs that set no impact_tier. Naming it in
	// the policy (rather than guessing) keeps the default explicit.
	DefaultTier string
	// DefaultProject is charged for jobs that set no impact_project.
	DefaultProject string
	// Tiers by name.
	Tiers map[string]*Tier
	// Projects by name. Jobs of a project not listed here get share 1,
	// weight 1 and no quota (see Project).
	Projects map[string]*Project
	// Aging raises a waiting job's score with its age, so nothing starves.
	Aging Aging
	// FairShare steers projects towards their share of GPU-hours.
	FairShare FairShare
	// Deadline raises urgency as a job's impact_deadline nears.
	Deadline Deadline
	// Preemption bounds how much work may be thrown away.
	Preemption Preemption
	// Backfill governs the reservation of the head of the queue.
	Backfill Backfill
	// Defragment lets a job that fits the free GPUs but no node move small
	// preemptible jobs out of its way (see Defragment). Off by default.
	Defragment Defragment
	// Headrooms by node pool: capacity kept free of non-preemptible work
	// for urgent tiers (see Headroom). None by default.
	Headrooms map[string]*Headroom
	// Gangs governs running gangs that lose a member.
	Gangs Gangs
	// Idle is the utilisation policy of every tier without its own idle
	// block (see IdleOfTier): when a running job counts as idle or hung,
	// and what is done about it.
	Idle Idle

	// pos records where each field was set (file:line), by field path such
	// as `tier "critical" weight`, so Validate can point at it. Fields set
	// by Default have no entry. set records which fields a parsed file set,
	// for Merge.
	pos map[string]Pos
	// problems found while merging (a new tier without a weight), reported
	// by Validate with the others.
	problems []*FieldError
}

// Tier is a class of importance.
type Tier struct {
	Name string
	// Weight is the tier's term in the impact score and its impact per
	// GPU in preemption gain and cost.
	Weight float64
	// MayPreempt lists the tiers whose preemptible jobs this tier may
	// preempt.
	MayPreempt []string
	// Preemptible is the default for jobs of this tier that do not set
	// impact_preemptible.
	Preemptible bool
	// MaxGPUHoursLostPerHour, when > 0, gives the preemptions this tier's
	// jobs order a budget of their own (work lost over any sliding hour),
	// counted apart from Preemption.MaxGPUHoursLostPerHour: a lower tier
	// that preempts often (normal over scavenger) then cannot spend the
	// budget a higher tier's urgent preemptions need. 0: this tier's
	// preemptions draw on the shared budget.
	MaxGPUHoursLostPerHour float64
	// Idle overrides fields of the policy-wide Idle for this tier (nil:
	// none).
	Idle *IdleOverride
}

// Project is a team or budget that is charged for GPU-hours.
type Project struct {
	Name string
	// Share is the project's relative entitlement (normalised over all
	// projects with work in the cluster).
	Share float64
	// Weight multiplies the impact of the project's jobs (tier weight x
	// project weight).
	Weight float64
	// GPUQuota caps the GPUs the project may hold at once; 0 = no cap.
	GPUQuota int
}

// Aging: score term = min(WeightPerHour x hours waited, Max).
type Aging struct {
	WeightPerHour float64
	Max           float64
}

// FairShare: score term = Weight x (entitled fraction - used fraction of
// decayed GPU-hours), in [-Weight, +Weight].
type FairShare struct {
	HalfLife time.Duration
	Weight   float64
}

// Deadline: score term = Weight x urgency, urgency rising linearly from 0
// at Horizon before the deadline to 1 at the deadline (and staying 1 after).
type Deadline struct {
	Weight  float64
	Horizon time.Duration
}

// Preemption limits.
type Preemption struct {
	// Enabled switches preemption on.
	Enabled bool
	// MaxGPUHoursLostPerHour caps the work thrown away (GPU-hours since
	// the victims' last checkpoint) over any sliding hour; 0 = no cap. It
	// is shared by the preemptions of every tier without a budget of its
	// own (Tier.MaxGPUHoursLostPerHour).
	MaxGPUHoursLostPerHour float64
	// MinRuntime protects every job for its first MinRuntime (a job's
	// impact_min_runtime may raise it).
	MinRuntime time.Duration
	// RestartCost is the work a restart wastes (loading, warm-up) in time
	// per GPU, added to the work lost.
	RestartCost time.Duration
	// GainHorizon is how much earlier start a preemption buys the
	// preemptor, valuing the gain: preemptor impact x GPUs x GainHorizon.
	GainHorizon time.Duration
	// MaxPerCycle bounds the number of jobs that may preempt in one cycle,
	// so one cycle never tears down the cluster.
	MaxPerCycle int
}

// Backfill governs the reservation for blocked jobs at the head of the
// queue.
type Backfill struct {
	// Enabled lets later jobs start before a blocked head job when they
	// cannot delay it. When false the queue is strict: nothing starts
	// before a blocked head job except what fits beside its reservation.
	Enabled bool
	// Reservations is the number of blocked jobs, from the head, that get a
	// reservation.
	Reservations int
}

// Defragment governs defragmenting preemptions. A waiting job whose pool
// has free GPUs enough for it, but not where it could use them (a node
// with 7 free GPUs whose 8th is held by a small job), may stop small
// preemptible jobs it could not preempt otherwise (of its own tier, or of
// a tier its may_preempt does not list), provided each of them can be
// placed again at once on GPUs free elsewhere: the victim is bound to
// those GPUs and restarts there once stopped, losing only the work since
// its last checkpoint and its restart. Gain, cost, minimum runtime and
// the hourly budget of work lost are the preemption block's; a
// defragmenting preemption is a preemption like any other in plans and
// metrics.
type Defragment struct {
	// Enabled switches it on (it needs preemption enabled). Off by
	// default: it stops jobs that the tiers' may_preempt alone would
	// protect from the preemptor.
	Enabled bool
	// MaxVictimGPUs is the most GPUs a victim may hold (in one
	// allocation): only small jobs are moved.
	MaxVictimGPUs int
	// MaxPerCycle bounds the jobs that may defragment in one cycle.
	MaxPerCycle int
	// GainHorizon values a defragmenting preemption's gain as
	// Preemption.GainHorizon values a preemption's (mover impact x GPUs x
	// GainHorizon); 0 takes the preemption block's. A move is worth more
	// than a plain preemption's horizon when that is kept short to spare
	// victims: the victim restarts at once, and the GPUs the mover takes
	// were idle, so the work gained is the cluster's, not only the
	// mover's.
	GainHorizon time.Duration
}

// DefragmentGainHorizon is the gain horizon of defragmenting preemptions:
// the defragment block's, or else the preemption block's.
func (p *Policy) DefragmentGainHorizon() time.Duration {
	if p.Defragment.GainHorizon > 0 {
		return p.Defragment.GainHorizon
	}
	return p.Preemption.GainHorizon
}

// Gangs governs running gangs that lose a member after their admission.
type Gangs struct {
	// MissingMemberGrace: a running gang with a member missing (lost,
	// failed, stopped by someone, on a node that is down or draining, or
	// replaced by Nomad with a member of a later generation) for longer
	// than this is stopped whole, with its checkpoint signal and grace,
	// and requeued whole. Shorter absences (a client restart, a blip) are
	// ridden out. 0 turns the watch off.
	MissingMemberGrace time.Duration
}

// Pos is a position in a policy file.
type Pos struct {
	File string
	Line int
}

func (p Pos) String() string {
	if p.File == "" {
		return "policy default"
	}
	return fmt.Sprintf("%s:%d", p.File, p.Line)
}

// FieldError is a policy error that names the file, line and field.
type FieldError struct {
	Pos    Pos
	Field  string
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.Pos, e.Field, e.Reason)
}

// Default returns the built-in policy: four tiers, a "default" project,
// preemption on with conservative limits, backfill with one reservation.
func Default() *Policy {
	return &Policy{
		DefaultTier:    "normal",
		DefaultProject: "default",
		Tiers: map[string]*Tier{
			"critical":  {Name: "critical", Weight: 10000, MayPreempt: []string{"high", "normal", "scavenger"}},
			"high":      {Name: "high", Weight: 1000, MayPreempt: []string{"normal", "scavenger"}},
			"normal":    {Name: "normal", Weight: 100, MayPreempt: []string{"scavenger"}, Preemptible: true},
			"scavenger": {Name: "scavenger", Weight: 10, Preemptible: true},
		},
		Projects: map[string]*Project{
			"default": {Name: "default", Share: 1, Weight: 1},
		},
		Aging:     Aging{WeightPerHour: 0.2, Max: 20},
		FairShare: FairShare{HalfLife: 24 * time.Hour, Weight: 50},
		Deadline:  Deadline{Weight: 50, Horizon: 24 * time.Hour},
		Preemption: Preemption{
			Enabled:                true,
			MaxGPUHoursLostPerHour: 64,
			MinRuntime:             10 * time.Minute,
			RestartCost:            5 * time.Minute,
			GainHorizon:            time.Hour,
			MaxPerCycle:            8,
		},
		Backfill:   Backfill{Enabled: true, Reservations: 1},
		Defragment: Defragment{MaxVictimGPUs: 2, MaxPerCycle: 2},
		Gangs:      Gangs{MissingMemberGrace: 2 * time.Minute},
		Idle:       defaultIdle(),
		pos:        map[string]Pos{},
	}
}

// Clone returns a deep copy.
func (p *Policy) Clone() *Policy {
	c := *p
	c.Tiers = make(map[string]*Tier, len(p.Tiers))
	for k, t := range p.Tiers {
		tt := *t
		tt.MayPreempt = append([]string(nil), t.MayPreempt...)
		tt.Idle = t.Idle.clone()
		c.Tiers[k] = &tt
	}
	c.Projects = make(map[string]*Project, len(p.Projects))
	for k, pr := range p.Projects {
		pp := *pr
		c.Projects[k] = &pp
	}
	if p.Headrooms != nil {
		c.Headrooms = make(map[string]*Headroom, len(p.Headrooms))
		for k, h := range p.Headrooms {
			hh := *h
			hh.Tiers = append([]string(nil), h.Tiers...)
			c.Headrooms[k] = &hh
		}
	}
	c.problems = append([]*FieldError(nil), p.problems...)
	c.pos = make(map[string]Pos, len(p.pos))
	for k, v := range p.pos {
		c.pos[k] = v
	}
	return &c
}

// Merge returns p with every field that o set (o came from a file: a field
// is set when the file wrote it) laid on top. Tiers and projects merge by
// name: a block in o changes only the fields it writes of the same-named
// entry of p, or adds an entry.
func (p *Policy) Merge(o *Policy) *Policy {
	c := p.Clone()
	if o == nil {
		return c
	}
	set := func(field string) bool { _, ok := o.pos[field]; return ok }
	take := func(field string) { c.pos[field] = o.pos[field] }
	mergeField(set, take, "default_tier", &c.DefaultTier, o.DefaultTier)
	mergeField(set, take, "default_project", &c.DefaultProject, o.DefaultProject)
	c.mergeTiers(o, set, take)
	c.mergeProjects(o, set, take)
	mergeField(set, take, "aging weight_per_hour", &c.Aging.WeightPerHour, o.Aging.WeightPerHour)
	mergeField(set, take, "aging max", &c.Aging.Max, o.Aging.Max)
	mergeField(set, take, "fair_share half_life", &c.FairShare.HalfLife, o.FairShare.HalfLife)
	mergeField(set, take, "fair_share weight", &c.FairShare.Weight, o.FairShare.Weight)
	mergeField(set, take, "deadline weight", &c.Deadline.Weight, o.Deadline.Weight)
	mergeField(set, take, "deadline horizon", &c.Deadline.Horizon, o.Deadline.Horizon)
	mergeField(set, take, "preemption enabled", &c.Preemption.Enabled, o.Preemption.Enabled)
	mergeField(set, take, "preemption max_gpu_hours_lost_per_hour", &c.Preemption.MaxGPUHoursLostPerHour, o.Preemption.MaxGPUHoursLostPerHour)
	mergeField(set, take, "preemption min_runtime", &c.Preemption.MinRuntime, o.Preemption.MinRuntime)
	mergeField(set, take, "preemption restart_cost", &c.Preemption.RestartCost, o.Preemption.RestartCost)
	mergeField(set, take, "preemption gain_horizon", &c.Preemption.GainHorizon, o.Preemption.GainHorizon)
	mergeField(set, take, "preemption max_per_cycle", &c.Preemption.MaxPerCycle, o.Preemption.MaxPerCycle)
	mergeField(set, take, "backfill enabled", &c.Backfill.Enabled, o.Backfill.Enabled)
	mergeField(set, take, "backfill reservations", &c.Backfill.Reservations, o.Backfill.Reservations)
	mergeField(set, take, "defragment enabled", &c.Defragment.Enabled, o.Defragment.Enabled)
	mergeField(set, take, "defragment max_victim_gpus", &c.Defragment.MaxVictimGPUs, o.Defragment.MaxVictimGPUs)
	mergeField(set, take, "defragment max_per_cycle", &c.Defragment.MaxPerCycle, o.Defragment.MaxPerCycle)
	mergeField(set, take, "defragment gain_horizon", &c.Defragment.GainHorizon, o.Defragment.GainHorizon)
	c.mergeHeadrooms(o)
	mergeField(set, take, "gangs missing_member_grace", &c.Gangs.MissingMemberGrace, o.Gangs.MissingMemberGrace)
	mergeIdle(c, o, set, take)
	return c
}

// mergeField lays src on dst when the file set field, keeping its
// position.
func mergeField[T any](set func(string) bool, take func(string), field string, dst *T, src T) {
	if set(field) {
		*dst = src
		take(field)
	}
}

// mergeTiers merges o's tier blocks into c by name.
func (c *Policy) mergeTiers(o *Policy, set func(string) bool, take func(string)) {
	for _, name := range sortedKeys(o.Tiers) {
		ot := o.Tiers[name]
		ct, ok := c.Tiers[name]
		prefix := fmt.Sprintf("tier %q ", name)
		if !ok {
			ct = &Tier{Name: name}
			c.Tiers[name] = ct
			if !set(prefix + "weight") {
				// A tier the defaults do not know needs its weight said:
				// 0 would silently rank it below everything.
				c.problems = append(c.problems, &FieldError{Pos: o.pos[prefix[:len(prefix)-1]], Field: prefix + "weight", Reason: "required for a tier that is not built in"})
			}
		}
		take(prefix[:len(prefix)-1])
		mergeField(set, take, prefix+"weight", &ct.Weight, ot.Weight)
		mergeField(set, take, prefix+"may_preempt", &ct.MayPreempt, append([]string(nil), ot.MayPreempt...))
		mergeField(set, take, prefix+"preemptible", &ct.Preemptible, ot.Preemptible)
		mergeField(set, take, prefix+"max_gpu_hours_lost_per_hour", &ct.MaxGPUHoursLostPerHour, ot.MaxGPUHoursLostPerHour)
	}
}

// mergeProjects merges o's project blocks into c by name.
func (c *Policy) mergeProjects(o *Policy, set func(string) bool, take func(string)) {
	for _, name := range sortedKeys(o.Projects) {
		op := o.Projects[name]
		cp, ok := c.Projects[name]
		if !ok {
			cp = &Project{Name: name, Share: 1, Weight: 1}
			c.Projects[name] = cp
		}
		prefix := fmt.Sprintf("project %q ", name)
		take(prefix[:len(prefix)-1])
		mergeField(set, take, prefix+"share", &cp.Share, op.Share)
		mergeField(set, take, prefix+"weight", &cp.Weight, op.Weight)
		mergeField(set, take, prefix+"gpu_quota", &cp.GPUQuota, op.GPUQuota)
	}
}

// Validate checks the policy as a whole. It returns every problem found,
// joined, each a *FieldError naming file, line and field.
func (p *Policy) Validate() error {
	var errs []error
	for _, pr := range p.problems {
		errs = append(errs, pr)
	}
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Pos: p.posOf(field), Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if len(p.Tiers) == 0 {
		bad("tier", "at least one tier is required")
	}
	if _, ok := p.Tiers[p.DefaultTier]; !ok {
		bad("default_tier", "names tier %q, which is not defined (tiers: %s)", p.DefaultTier, joinKeys(p.Tiers))
	}
	if p.DefaultProject == "" {
		bad("default_project", "must not be empty")
	}
	p.validateTiers(bad)
	p.validateProjects(bad)
	p.validateScoring(bad)
	p.validatePreemption(bad)
	if p.Backfill.Reservations < 0 {
		bad("backfill reservations", "must be >= 0, got %d", p.Backfill.Reservations)
	}
	p.validateDefragment(bad)
	p.validateHeadrooms(bad)
	if p.Gangs.MissingMemberGrace < 0 {
		bad("gangs missing_member_grace", "must not be negative (0 turns the watch off)")
	}
	p.validateIdle(bad)
	return errors.Join(errs...)
}

// posOf is where a field was written, or where its enclosing block was
// when the field itself was not (e.g. a tier block without a weight).
func (p *Policy) posOf(field string) Pos {
	pos, ok := p.pos[field]
	for f := field; !ok && f != ""; {
		i := lastSpace(f)
		if i <= 0 {
			break
		}
		f = f[:i]
		pos, ok = p.pos[f]
	}
	return pos
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func (p *Policy) validateTiers(bad func(field, format string, args ...any)) {
	for _, name := range sortedKeys(p.Tiers) {
		t := p.Tiers[name]
		prefix := fmt.Sprintf("tier %q ", name)
		if !finite(t.Weight) || t.Weight < 0 {
			bad(prefix+"weight", "must be a number >= 0, got %v", t.Weight)
		}
		if !finite(t.MaxGPUHoursLostPerHour) || t.MaxGPUHoursLostPerHour < 0 {
			bad(prefix+"max_gpu_hours_lost_per_hour", "must be a number >= 0 (0 = the shared preemption budget), got %v", t.MaxGPUHoursLostPerHour)
		}
		for _, v := range t.MayPreempt {
			if _, ok := p.Tiers[v]; !ok {
				bad(prefix+"may_preempt", "names tier %q, which is not defined (tiers: %s)", v, joinKeys(p.Tiers))
			} else if v == name {
				bad(prefix+"may_preempt", "a tier may not preempt itself")
			}
		}
	}
}

func (p *Policy) validateProjects(bad func(field, format string, args ...any)) {
	for _, name := range sortedKeys(p.Projects) {
		pr := p.Projects[name]
		prefix := fmt.Sprintf("project %q ", name)
		if !finite(pr.Share) || pr.Share <= 0 {
			bad(prefix+"share", "must be a number > 0, got %v", pr.Share)
		}
		if !finite(pr.Weight) || pr.Weight <= 0 {
			bad(prefix+"weight", "must be a number > 0, got %v", pr.Weight)
		}
		if pr.GPUQuota < 0 {
			bad(prefix+"gpu_quota", "must be >= 0 (0 = no quota), got %d", pr.GPUQuota)
		}
	}
}

// validateScoring checks the aging, fair-share and deadline terms.
func (p *Policy) validateScoring(bad func(field, format string, args ...any)) {
	if !finite(p.Aging.WeightPerHour) || p.Aging.WeightPerHour < 0 {
		bad("aging weight_per_hour", "must be >= 0, got %v", p.Aging.WeightPerHour)
	}
	if !finite(p.Aging.Max) || p.Aging.Max < 0 {
		bad("aging max", "must be >= 0, got %v", p.Aging.Max)
	}
	if p.FairShare.HalfLife <= 0 {
		bad("fair_share half_life", "must be > 0, got %s", p.FairShare.HalfLife)
	}
	if !finite(p.FairShare.Weight) || p.FairShare.Weight < 0 {
		bad("fair_share weight", "must be >= 0, got %v", p.FairShare.Weight)
	}
	if !finite(p.Deadline.Weight) || p.Deadline.Weight < 0 {
		bad("deadline weight", "must be >= 0, got %v", p.Deadline.Weight)
	}
	if p.Deadline.Horizon <= 0 {
		bad("deadline horizon", "must be > 0, got %s", p.Deadline.Horizon)
	}
}

func (p *Policy) validatePreemption(bad func(field, format string, args ...any)) {
	if !finite(p.Preemption.MaxGPUHoursLostPerHour) || p.Preemption.MaxGPUHoursLostPerHour < 0 {
		bad("preemption max_gpu_hours_lost_per_hour", "must be >= 0 (0 = no cap), got %v", p.Preemption.MaxGPUHoursLostPerHour)
	}
	if p.Preemption.MinRuntime < 0 {
		bad("preemption min_runtime", "must not be negative")
	}
	if p.Preemption.RestartCost < 0 {
		bad("preemption restart_cost", "must not be negative")
	}
	if p.Preemption.GainHorizon <= 0 {
		bad("preemption gain_horizon", "must be > 0, got %s", p.Preemption.GainHorizon)
	}
	if p.Preemption.MaxPerCycle < 1 {
		bad("preemption max_per_cycle", "must be >= 1, got %d", p.Preemption.MaxPerCycle)
	}
}

func (p *Policy) validateDefragment(bad func(field, format string, args ...any)) {
	d := p.Defragment
	if d.MaxVictimGPUs < 1 {
		bad("defragment max_victim_gpus", "must be >= 1, got %d", d.MaxVictimGPUs)
	}
	if d.MaxPerCycle < 1 {
		bad("defragment max_per_cycle", "must be >= 1, got %d", d.MaxPerCycle)
	}
	if d.GainHorizon < 0 {
		bad("defragment gain_horizon", "must not be negative (0 = the preemption block's), got %s", d.GainHorizon)
	}
	if d.Enabled && !p.Preemption.Enabled {
		bad("defragment enabled", "needs preemption enabled (a defragmenting preemption uses its gain, cost, minimum runtime and budget)")
	}
}

// TierOf resolves the tier of a spec (the default tier when unset); nil
// when the tier is not defined.
func (p *Policy) TierOf(s Spec) *Tier {
	name := s.Tier
	if name == "" {
		name = p.DefaultTier
	}
	return p.Tiers[name]
}

// ProjectName resolves the project charged for a spec.
func (p *Policy) ProjectName(s Spec) string {
	if s.Project == "" {
		return p.DefaultProject
	}
	return s.Project
}

// ProjectOf returns the project's settings; an unlisted project gets share
// 1, weight 1 and no quota (projects are open: listing one only changes its
// settings).
func (p *Policy) ProjectOf(s Spec) Project {
	name := p.ProjectName(s)
	if pr, ok := p.Projects[name]; ok {
		return *pr
	}
	return Project{Name: name, Share: 1, Weight: 1}
}

// CheckSpec reports a spec that this policy cannot honour (an unknown
// tier), as a *MetaError naming the key.
func (p *Policy) CheckSpec(s Spec) error {
	if p.TierOf(s) == nil {
		return &MetaError{Key: MetaTier, Value: s.Tier, Reason: fmt.Sprintf("unknown tier (policy tiers: %s)", joinKeys(p.Tiers))}
	}
	return nil
}

// IsPreemptible resolves a spec's preemptibility: the job's own answer, else
// its tier's default.
func (p *Policy) IsPreemptible(s Spec) bool {
	if s.PreemptibleSet {
		return s.Preemptible
	}
	if t := p.TierOf(s); t != nil {
		return t.Preemptible
	}
	return false
}

// MayPreempt reports whether a job of tier `by` may preempt one of tier
// `victim` (the victim's own preemptibility is checked separately).
func (p *Policy) MayPreempt(by, victim string) bool {
	t := p.Tiers[by]
	if t == nil {
		return false
	}
	for _, v := range t.MayPreempt {
		if v == victim {
			return true
		}
	}
	return false
}

// Impact is the value per GPU of running a job: tier weight x project
// weight. Preemption weighs gain and cost with it.
func (p *Policy) Impact(s Spec) float64 {
	t := p.TierOf(s)
	if t == nil {
		return 0
	}
	return t.Weight * p.ProjectOf(s).Weight
}

// MinRuntime is how long a job is protected from preemption after it
// starts: the larger of the policy's and the job's.
func (p *Policy) MinRuntime(s Spec) time.Duration {
	return max(p.Preemption.MinRuntime, s.MinRuntime)
}

// TierNames returns the tier names ordered by weight, heaviest first.
func (p *Policy) TierNames() []string {
	names := sortedKeys(p.Tiers)
	sort.SliceStable(names, func(i, j int) bool { return p.Tiers[names[i]].Weight > p.Tiers[names[j]].Weight })
	return names
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func joinKeys[V any](m map[string]V) string {
	keys := sortedKeys(m)
	s := ""
	for i, k := range keys {
		if i > 0 {
			s += ", "
		}
		s += k
	}
	return s
}

func lastSpace(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == ' ' {
			return i
		}
	}
	return -1
}
