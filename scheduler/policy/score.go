package policy

import (
	"math"
	"sort"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
)

// Score is the impact score of a waiting job with every term kept, so that
// explain can say why a job is where it is. Total is the sum of the terms.
type Score struct {
	Total float64 `json:"total"`
	// Tier is the tier weight x the project weight.
	Tier float64 `json:"tier"`
	// FairShare is the fair-share weight x the project's deficit (entitled
	// fraction minus used fraction of decayed GPU-hours); negative when the
	// project used more than its share.
	FairShare float64 `json:"fair_share"`
	// Deadline is the deadline weight x urgency.
	Deadline float64 `json:"deadline"`
	// Age is the aging term.
	Age float64 `json:"age"`
	// Short is the shortest-first term (ShortestFirst); Overdue says the
	// job has waited long enough to get its whole weight.
	Short   float64 `json:"short"`
	Overdue bool    `json:"overdue,omitempty"`
}

// Scorer scores waiting jobs at one instant. Build one per cycle with
// NewScorer: the fair-share deficits are computed once, not per job.
type Scorer struct {
	p        *Policy
	now      time.Time
	deficits map[string]float64
}

// NewScorer prepares scoring at now. active lists the projects that have
// work in the cluster (running or waiting): entitlements are normalised
// over them, so an idle project's share is lent to the others.
func (p *Policy) NewScorer(u *Usage, now time.Time, active []string) *Scorer {
	s := &Scorer{p: p, now: now, deficits: make(map[string]float64, len(active))}
	var shareSum, usedSum float64
	used := make(map[string]float64, len(active))
	for _, name := range active {
		if _, dup := used[name]; dup {
			continue
		}
		shareSum += p.projectShare(name)
		v := 0.0
		if u != nil {
			v = u.Get(name, now)
		}
		used[name] = v
		usedSum += v
	}
	for name, v := range used {
		entitled := 0.0
		if shareSum > 0 {
			entitled = p.projectShare(name) / shareSum
		}
		frac := 0.0
		if usedSum > 0 {
			frac = v / usedSum
		}
		s.deficits[name] = entitled - frac
	}
	return s
}

func (p *Policy) projectShare(name string) float64 {
	if pr, ok := p.Projects[name]; ok {
		return pr.Share
	}
	return 1
}

// Deficit is a project's entitled minus used fraction, in [-1, 1]; 0 for a
// project the scorer was not told about.
func (s *Scorer) Deficit(project string) float64 { return s.deficits[project] }

// Waiting is what a score reads of a waiting job besides its tier and
// project.
type Waiting struct {
	Submit, Deadline time.Time
	// Walltime is the run the job is expected to need from its next
	// start: its impact_walltime less the work it saved
	// (jobspec.Spec.Left; 0: none).
	Walltime time.Duration
	// Oldest is the submit time of the oldest job of the same tier waiting
	// in the same pool (zero: the job's own), which says whether the job
	// is overdue (ShortestFirst).
	Oldest time.Time
}

// Score computes the impact score of a job waiting since submit, taken
// as the oldest of its tier in its pool (below an overdue share of 1,
// overdue once it has waited at all).
func (s *Scorer) Score(spec jobspec.Spec, submit time.Time) Score {
	w := Waiting{Submit: submit, Deadline: spec.Deadline, Walltime: spec.Left()}
	return s.ScoreAt(w, s.p.Impact(spec), s.deficits[s.p.ProjectName(spec)])
}

// ScoreAt is Score for a caller that already knows the spec's
// Impact(spec) and its project's Deficit (the engine keeps both per job
// and per project across a cycle's thousands of waiting jobs) and the
// oldest job of its tier in its pool.
func (s *Scorer) ScoreAt(w Waiting, impact, deficit float64) Score {
	p := s.p
	var sc Score
	sc.Tier = impact
	sc.FairShare = p.FairShare.Weight * deficit
	if !w.Deadline.IsZero() && p.Deadline.Horizon > 0 {
		left := w.Deadline.Sub(s.now)
		u := 1 - float64(left)/float64(p.Deadline.Horizon)
		sc.Deadline = p.Deadline.Weight * math.Max(0, math.Min(1, u))
	}
	waited := s.now.Sub(w.Submit)
	if waited > 0 {
		sc.Age = math.Min(p.Aging.Max, p.Aging.WeightPerHour*waited.Hours())
	}
	if sf := p.ShortestFirst; sf.Weight > 0 {
		sc.Overdue = w.overdue(s.now, sf.OverdueShare)
		sc.Short = sf.Weight
		if !sc.Overdue {
			wall := w.Walltime
			if wall <= 0 {
				wall = ShortestFirstReference
			}
			sc.Short *= float64(ShortestFirstReference) / float64(ShortestFirstReference+wall)
		}
	}
	sc.Total = sc.Tier + sc.FairShare + sc.Deadline + sc.Age + sc.Short
	return sc
}

// overdue reports whether the job has waited more than share of what the
// oldest job of its tier in its pool has (ShortestFirst). A job that has
// not waited is never overdue.
func (w Waiting) overdue(now time.Time, share float64) bool {
	waited := now.Sub(w.Submit)
	if waited <= 0 {
		return false
	}
	oldest := w.Oldest
	if oldest.IsZero() || oldest.After(w.Submit) {
		oldest = w.Submit
	}
	return float64(waited) > share*float64(now.Sub(oldest))
}

// Usage is per-project GPU-hour usage decayed with a half-life: a GPU-hour
// used one half-life ago counts half. It is the fair-share memory of the
// scheduler; persist it with Values/Restore.
type Usage struct {
	halfLife time.Duration
	at       time.Time
	values   map[string]float64
}

// NewUsage starts empty usage with the given half-life.
func NewUsage(halfLife time.Duration) *Usage {
	return &Usage{halfLife: halfLife, values: map[string]float64{}}
}

// HalfLife returns the decay half-life.
func (u *Usage) HalfLife() time.Duration { return u.halfLife }

func (u *Usage) factor(from, to time.Time) float64 {
	if u.halfLife <= 0 {
		return 1
	}
	return math.Exp2(-float64(to.Sub(from)) / float64(u.halfLife))
}

// rebase moves the reference instant forward to at, decaying all values.
func (u *Usage) rebase(at time.Time) {
	if u.at.IsZero() {
		u.at = at
		return
	}
	if !at.After(u.at) {
		return
	}
	f := u.factor(u.at, at)
	for k, v := range u.values {
		u.values[k] = v * f
	}
	u.at = at
}

// Add charges gpuHours used at instant at to project.
func (u *Usage) Add(project string, gpuHours float64, at time.Time) {
	if gpuHours == 0 {
		return
	}
	u.rebase(at)
	v := gpuHours
	if at.Before(u.at) {
		v *= u.factor(at, u.at)
	}
	u.values[project] += v
}

// AddInterval charges gpus GPUs held over [from, to] to project, decayed
// exactly (each instant counts with its own age), so the result does not
// depend on how often it is called.
func (u *Usage) AddInterval(project string, gpus int, from, to time.Time) {
	if gpus <= 0 || !to.After(from) {
		return
	}
	dt := to.Sub(from)
	var hours float64
	if u.halfLife <= 0 {
		hours = dt.Hours()
	} else {
		// Integral of 2^(-(to-s)/h) over s in [from, to].
		h := u.halfLife.Hours()
		hours = h / math.Ln2 * (1 - math.Exp2(-dt.Hours()/h))
	}
	u.Add(project, float64(gpus)*hours, to)
}

// Get returns the project's decayed usage at instant at.
func (u *Usage) Get(project string, at time.Time) float64 {
	v := u.values[project]
	if v == 0 || u.at.IsZero() {
		return v
	}
	if at.After(u.at) {
		return v * u.factor(u.at, at)
	}
	return v
}

// Values returns every project's decayed usage at instant at.
func (u *Usage) Values(at time.Time) map[string]float64 {
	out := make(map[string]float64, len(u.values))
	for k := range u.values {
		out[k] = u.Get(k, at)
	}
	return out
}

// Projects returns the projects with recorded usage, sorted.
func (u *Usage) Projects() []string {
	out := make([]string, 0, len(u.values))
	for k := range u.values {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Restore replaces the usage with values measured at instant at (from
// durable state, after a restart or a leader change).
func (u *Usage) Restore(values map[string]float64, at time.Time) {
	u.values = make(map[string]float64, len(values))
	for k, v := range values {
		u.values[k] = v
	}
	u.at = at
}

// Clone returns an independent copy.
func (u *Usage) Clone() *Usage {
	c := &Usage{halfLife: u.halfLife, at: u.at, values: make(map[string]float64, len(u.values))}
	for k, v := range u.values {
		c.values[k] = v
	}
	return c
}
