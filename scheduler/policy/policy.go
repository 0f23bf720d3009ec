package policy

import (
	"fmt"
	"sort"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
)

// Policy is the operator's scheduling policy. Build it with Default,
// Overlay the file on top, then Validate (Load does all three).
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
	// ShortestFirst orders a tier's waiting jobs shortest walltime first,
	// those that have waited long first come, first served (see
	// ShortestFirst). Off by default.
	ShortestFirst ShortestFirst
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
	// Walltime governs run times learned for jobs that declare no
	// impact_walltime (see Walltime). Off by default.
	Walltime Walltime
	// Idle is the utilisation policy of every tier without its own idle
	// block (see IdleOfTier): when a running job counts as idle or hung,
	// and what is done about it.
	Idle Idle

	// pos records where each key was written (file:line), by its path
	// such as `tier "critical" weight` (hclfile.KeyAt's spelling), so
	// Validate can point at it. Fields set by Default have no entry.
	pos map[string]Pos
	// problems found while overlaying (a new tier without a weight), reported
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

// ShortestFirst: score term = Weight x 1h / (1h + walltime), a job
// without an impact_walltime counting as an hour's (Weight / 2); an
// overdue job, one that has waited more than OverdueShare of what the
// oldest job of its tier waiting in its pool has, gets the whole Weight.
//
// Why: among jobs of equal weight, serving the shortest first lowers
// the median wait and the mean completion time of all of them; served
// purely so, a long job would wait behind every shorter one that
// arrives after it. The overdue jobs, the oldest of the tier's queue,
// are served before the rest and first come, first served among
// themselves (equal scores break ties on submit time), so that the
// longest waits stay near those of first come, first served. Below a
// share of 1 the oldest waiting job is always overdue, so a tier's
// queue is first come, first served at its head; shortest first orders
// the jobs behind it: which go past a head that cannot start yet (a
// gang waiting for nodes, a job the headroom keeps out) and which of
// several start when many GPUs free at once. At 1 no job is overdue:
// shortest first throughout.
//
// A Weight below the smallest gap between tier weights orders jobs only
// within their tier. 0 switches the term off.
type ShortestFirst struct {
	Weight       float64
	OverdueShare float64
}

// ShortestFirstReference is the walltime whose job gets half the
// shortest-first weight; a job without a walltime is counted so.
const ShortestFirstReference = time.Hour

// DefaultOverdueShare is ShortestFirst.OverdueShare unless the policy
// says otherwise.
const DefaultOverdueShare = 0.75

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
	// WeighEnds: a top-tier job values a preemption by the wait it saves.
	// Its victims free their GPUs only once their grace is over, and it
	// takes whatever frees first: where running work ends on its own
	// every few seconds it starts on such GPUs, and the victims lose their
	// work for nothing. So the gain is weighed by the chance that no such
	// end frees room for it before the victims would stop, from the pace
	// of the ends of the last hour and the GPUs each freed (a job's
	// allocations ending together are one end; engine/endpace.go), until
	// it has waited as long as a preemption takes. Not below the top
	// tier: there the victims' GPUs pass to the next job of the
	// preemptor's tier, and the suite measured the tier-weighted JCT
	// worse for it.
	WeighEnds bool
	// Withdraw: a preemption whose preemptor no longer waits (it started
	// on GPUs that freed meanwhile, or left the queue) is withdrawn while
	// its victims' grace lasts, and they run on (engine/withdraw.go). A
	// victim that keeps working after its checkpoint signal loses
	// nothing; one that exits on it (with its requeue code) is requeued
	// as before.
	Withdraw bool
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
	// ReserveTiers: a blocked job of these tiers that can neither start
	// nor preempt its way in gets a reservation whatever Reservations
	// says; these reservations do not count against Reservations. Urgent
	// work that needs a whole node, in a pool where every node holds work
	// it may not preempt, otherwise waits until a node happens to free at
	// once, while every GPU that frees goes to narrower jobs behind it;
	// its reservation drains the node whose unpreemptible work ends
	// soonest instead (engine/reserve.go). Such a reservation idles
	// GPUs for urgent work as a headroom does: where the tier uses a
	// pool's headroom with an IdleBudget, that budget pays for the
	// reserved GPUs no job backfills, and while it is spent the tier's
	// jobs reserve there only within Reservations, like any job.
	ReserveTiers []string
	// Gather lets a blocked job of several allocations that gets no
	// reservation hold, in queue order, the free GPUs where its
	// allocations fit now, one allocation at a time, as plain Nomad
	// places a job's allocations: the nodes a gang needs are gathered
	// as they free instead of only when all are free at once, which
	// smaller jobs behind it would otherwise never leave. Held GPUs idle,
	// as the placed allocations of Nomad's partial placement would: no
	// later job backfills them (work the gang may preempt did, and could
	// be too young or too costly to preempt when the gang needed it).
	// Nothing starts until the whole gang fits. A gang as wide as
	// its pool holds each node as it frees until it starts, as Nomad's
	// partial placement would; one wider than the pool is parked.
	Gather bool
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
// metrics. Moves are searched once the whole queue is decided, on the
// GPUs no waiting job took: a move fills GPUs that would otherwise idle,
// never GPUs a job behind the mover fits on.
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

// Walltime governs learned walltimes. A job that declares no
// impact_walltime leaves the engine blind to when it ends: a waiting one
// may not backfill reserved GPUs unless it is preemptible by the
// reserving job, and a reservation behind a running one has no time. With
// Learn, the engine learns the run times of finished jobs (allocations
// that ran to their end on their own; stopped, failed, lost or preempted
// ones teach nothing), from the runs that ended within the last Window of
// the finest class of jobs with at least MinSamples of them: the same
// project, tier and GPUs per allocation, else the same project and tier,
// else the same tier. A run time is the whole job's: a job resumed from a
// checkpoint counts the work its earlier runs saved (impact_progress)
// with its last run, and a job with saved work needs the estimate less
// it. A waiting job without a walltime is estimated to run the Quantile
// of them: it backfills reserved GPUs when that ends
// before the reservation is needed, and a learned headroom counts it for
// that long (instead of an hour). With Running too, a running job
// without one is estimated to end at the (1 - Quantile) quantile of the
// runs of its class longer than it has run so far (early: a reservation
// timed late lets backfilled work delay it), which times reservations
// behind it. Estimates never stop a job; explanations say when one was
// used.
type Walltime struct {
	Learn bool
	// Running: estimates also time the ends of running work (see above).
	Running bool
	// Quantile of the run times taken as a waiting job's estimate, in
	// (0, 1]: high, so that most jobs end before it.
	Quantile float64
	// MinSamples: no estimate from fewer runs.
	MinSamples int
	// Window: how far back run times count (by their end).
	Window time.Duration
}

// Defaults of a walltime block.
const (
	DefaultWalltimeQuantile   = 0.9
	DefaultWalltimeMinSamples = 20
	DefaultWalltimeWindow     = 72 * time.Hour
)

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
		Aging:         Aging{WeightPerHour: 0.2, Max: 20},
		FairShare:     FairShare{HalfLife: 24 * time.Hour, Weight: 50},
		Deadline:      Deadline{Weight: 50, Horizon: 24 * time.Hour},
		ShortestFirst: ShortestFirst{OverdueShare: DefaultOverdueShare},
		Preemption: Preemption{
			Enabled:                true,
			MaxGPUHoursLostPerHour: 64,
			MinRuntime:             10 * time.Minute,
			RestartCost:            5 * time.Minute,
			GainHorizon:            time.Hour,
			MaxPerCycle:            8,
			WeighEnds:              true,
			Withdraw:               true,
		},
		Backfill:   Backfill{Enabled: true, Reservations: 1},
		Defragment: Defragment{MaxVictimGPUs: 2, MaxPerCycle: 2},
		Gangs:      Gangs{MissingMemberGrace: 2 * time.Minute},
		Walltime:   Walltime{Quantile: DefaultWalltimeQuantile, MinSamples: DefaultWalltimeMinSamples, Window: DefaultWalltimeWindow},
		Idle:       defaultIdle(),
		pos:        map[string]Pos{},
	}
}

// TierOf resolves the tier of a spec (the default tier when unset); nil
// when the tier is not defined.
func (p *Policy) TierOf(s jobspec.Spec) *Tier {
	name := s.Tier
	if name == "" {
		name = p.DefaultTier
	}
	return p.Tiers[name]
}

// ProjectName resolves the project charged for a spec.
func (p *Policy) ProjectName(s jobspec.Spec) string {
	if s.Project == "" {
		return p.DefaultProject
	}
	return s.Project
}

// ProjectOf returns the project's settings; an unlisted project gets share
// 1, weight 1 and no quota (projects are open: listing one only changes its
// settings).
func (p *Policy) ProjectOf(s jobspec.Spec) Project {
	name := p.ProjectName(s)
	if pr, ok := p.Projects[name]; ok {
		return *pr
	}
	return Project{Name: name, Share: 1, Weight: 1}
}

// CheckSpec reports a spec that this policy cannot honour (an unknown
// tier), as a *jobspec.MetaError naming the key.
func (p *Policy) CheckSpec(s jobspec.Spec) error {
	if p.TierOf(s) == nil {
		return &jobspec.MetaError{Key: jobspec.MetaTier, Value: s.Tier, Reason: fmt.Sprintf("unknown tier (policy tiers: %s)", joinKeys(p.Tiers))}
	}
	return nil
}

// SpecError is every problem of a job's impact meta under this policy:
// parseErr, what jobspec.ParseMeta (and ParseGroupMeta) found, together
// with an unknown tier, which only the policy can tell. s is the Spec the
// parse returned (on a parse error, zero but for its tier). nil when there
// is none.
func (p *Policy) SpecError(s jobspec.Spec, parseErr error) error {
	if parseErr == nil {
		return p.CheckSpec(s)
	}
	if s.Tier == "" {
		return parseErr
	}
	return jobspec.JoinMetaErrors(parseErr, p.CheckSpec(s))
}

// IsPreemptible resolves a spec's preemptibility: the job's own answer, else
// its tier's default.
func (p *Policy) IsPreemptible(s jobspec.Spec) bool {
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
func (p *Policy) Impact(s jobspec.Spec) float64 {
	t := p.TierOf(s)
	if t == nil {
		return 0
	}
	return t.Weight * p.ProjectOf(s).Weight
}

// MinRuntime is how long a job is protected from preemption after it
// starts: the larger of the policy's and the job's.
func (p *Policy) MinRuntime(s jobspec.Spec) time.Duration {
	return max(p.Preemption.MinRuntime, s.MinRuntime)
}

// MinRuntimeSource says, for explanations, where MinRuntime(s) comes from:
// "impact_min_runtime 30m0s" when the job's own value decides, else "the
// policy's preemption min_runtime 10m0s".
func (p *Policy) MinRuntimeSource(s jobspec.Spec) string {
	if s.MinRuntime > 0 && s.MinRuntime >= p.Preemption.MinRuntime {
		return fmt.Sprintf("%s %s", jobspec.MetaMinRuntime, s.MinRuntime)
	}
	return fmt.Sprintf("the policy's preemption min_runtime %s", p.Preemption.MinRuntime)
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
