package trace

import (
	"fmt"
	"hash/fnv"
	"math"
	"strings"
)

// Tier names used by the simulator, most important first. They match the
// tiers of the example policy (example/sim/policy.hcl).
var Tiers = []string{"critical", "high", "normal", "scavenger"}

// TierShares are the shares of jobs given each tier by Synthesize, in the
// order of Tiers.
var TierShares = []float64{0.05, 0.15, 0.50, 0.30}

// TierPreemptible is each tier's default preemptibility (order of Tiers).
var TierPreemptible = []bool{false, false, true, true}

// UnknownWalltime is the walltime of a job whose user gave none: the
// cluster's default limit, a week, as Slurm applies its partition's
// MaxTime. The baselines see a week; the impact adapter passes no
// impact_walltime for it, as a live job without one (the engine then
// knows the job's end is unknown).
const UnknownWalltime = 7 * 24 * 3600

// Walltime estimates are duration x a factor drawn uniformly from
// [WalltimeMinFactor, WalltimeMaxFactor), rounded up to a whole minute:
// users ask for more time than they need, never less.
const (
	WalltimeMinFactor = 1.0
	WalltimeMaxFactor = 3.0
	// DefaultProjects is how many projects generic rows without one are
	// spread over.
	DefaultProjects = 8
)

// LabelRule is the written rule Synthesize applies, for the report.
func LabelRule(seed int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Labels missing from the trace are synthesized from seed %d, per job, from a hash of (seed, job id), "+
		"so a job keeps its labels whatever window is simulated. ", seed)
	b.WriteString("Tier: ")
	for i, t := range Tiers {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.0f%%", t, TierShares[i]*100)
	}
	b.WriteString(" of jobs, independent of size and project. Preemptible: ")
	for i, t := range Tiers {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %v", t, TierPreemptible[i])
	}
	fmt.Fprintf(&b, ". Walltime estimate: duration x U[%.0f, %.0f), rounded up to a minute. ", WalltimeMinFactor, WalltimeMaxFactor)
	fmt.Fprintf(&b, "Project: the Philly virtual cluster; a generic row without one gets project p0..p%d by hash.", DefaultProjects-1)
	return b.String()
}

// Synthesize fills every missing label of jobs in place and checks the
// labels the trace gave: an unknown tier is an error naming the line (Read
// already refuses, or skips, a generic row with one; this catches jobs
// built otherwise).
func Synthesize(jobs []Job, source string, seed int64) error {
	for i := range jobs {
		j := &jobs[i]
		if j.Tier == "" {
			j.Tier = pickTier(unit(seed, j.ID, "tier"))
		} else if tierIndex(j.Tier) < 0 {
			return &RowError{File: source, Line: j.Line, Col: j.tierCol, Column: "tier",
				Err: unknownTier(j.Tier)}
		}
		if j.Preemptible == nil {
			p := TierPreemptible[tierIndex(j.Tier)]
			j.Preemptible = &p
		}
		if j.Walltime == 0 {
			f := WalltimeMinFactor + (WalltimeMaxFactor-WalltimeMinFactor)*unit(seed, j.ID, "walltime")
			w := int64(math.Ceil(float64(j.Duration)*f/60)) * 60
			j.Walltime = max(w, j.Duration)
		}
		if j.Project == "" {
			j.Project = fmt.Sprintf("p%d", int(unit(seed, j.ID, "project")*DefaultProjects))
		}
	}
	return nil
}

func unknownTier(t string) error {
	return fmt.Errorf("unknown tier %q (want one of %s)", t, strings.Join(Tiers, ", "))
}

func tierIndex(t string) int {
	for i, n := range Tiers {
		if n == t {
			return i
		}
	}
	return -1
}

func pickTier(u float64) string {
	acc := 0.0
	for i, s := range TierShares {
		acc += s
		if u < acc {
			return Tiers[i]
		}
	}
	return Tiers[len(Tiers)-1]
}

// unit maps (seed, id, purpose) to a uniform number in [0, 1) with FNV-1a
// followed by a splitmix64 finaliser: stable across runs, platforms and the
// order of the rows.
func unit(seed int64, id, purpose string) float64 {
	h := fnv.New64a()
	var sb [8]byte
	for i := range sb {
		sb[i] = byte(uint64(seed) >> (8 * i))
	}
	h.Write(sb[:])
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write([]byte(purpose))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / float64(1<<53)
}
