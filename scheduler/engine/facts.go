package engine

// The spec facts: what the policy says of every job of one tier and
// project, worked out once per engine and found by where the job's
// interned names lie.

import (
	"unsafe"

	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// specFacts is what the policy derives from the fields of a spec it
// resolves tier and project from (specKey); the same for every job with
// those fields, so worked out once per engine, not once per job.
type specFacts struct {
	bad         string // CheckSpec's error, "" when valid
	tier        string
	project     string
	proj        int32
	impact      float64
	quota       int
	preemptible bool
	// idle is the tier's idle policy.
	idle policy.Idle
}

// specKey is every field of a spec that TierOf, ProjectName, ProjectOf,
// CheckSpec, Impact and IsPreemptible read.
type specKey struct {
	tier, project       string
	preemptibleSet, pre bool
}

const maxSpecFacts = 4096

// factSlots is the number of recent answers specFacts keeps by where
// a spec's tier and project names lie (factSlot).
const factSlots = 256

// factSlot is one of specFacts' recent answers: the spec's key and its
// facts.
type factSlot struct {
	k specKey
	f *specFacts
}

// slotOf is the slot of a key among factSlots: a hash of where its
// names lie in memory, not of their bytes. Tier and project names are
// interned when metadata is parsed, so every job of a tier and project
// shares them: a cold cycle's 15,000 jobs find their facts without
// hashing a name (the map's look-up was a third of refreshing the
// queue).
func slotOf(k *specKey) int {
	h := uint64(uintptr(unsafe.Pointer(unsafe.StringData(k.tier))))*0x9e3779b97f4a7c15 ^
		uint64(uintptr(unsafe.Pointer(unsafe.StringData(k.project))))*0xc2b2ae3d27d4eb4f
	if k.preemptibleSet {
		h ^= 1 << 62
		if k.pre {
			h ^= 1 << 61
		}
	}
	return int(h >> 56)
}

// sameNames: a and b are one key whose names lie at the same place.
func sameNames(a, b *specKey) bool {
	return unsafe.StringData(a.tier) == unsafe.StringData(b.tier) && len(a.tier) == len(b.tier) &&
		unsafe.StringData(a.project) == unsafe.StringData(b.project) && len(a.project) == len(b.project) &&
		a.preemptibleSet == b.preemptibleSet && a.pre == b.pre
}

func (c *cycle) specFacts(s *policy.Spec) *specFacts {
	qc := &c.e.queue
	k := specKey{s.Tier, s.Project, s.PreemptibleSet, s.Preemptible}
	slot := &qc.factSlots[slotOf(&k)]
	if slot.f != nil && sameNames(&slot.k, &k) {
		return slot.f
	}
	if f, ok := qc.facts[k]; ok {
		*slot = factSlot{k, f}
		return f
	}
	f := &specFacts{project: c.pol.ProjectName(*s)}
	f.proj = qc.project(f.project)
	if err := c.pol.CheckSpec(*s); err != nil {
		f.bad = "bad impact metadata: " + err.Error()
	} else {
		f.tier = c.pol.TierOf(*s).Name
		f.impact = c.pol.Impact(*s)
		f.preemptible = c.pol.IsPreemptible(*s)
		f.quota = c.pol.ProjectOf(*s).GPUQuota
		f.idle = c.pol.IdleFor(*s)
	}
	if qc.facts == nil || len(qc.facts) >= maxSpecFacts {
		qc.facts = map[specKey]*specFacts{} // bounded: tiers and projects are few, typos are not
	}
	*slot = factSlot{k, f}
	qc.facts[k] = f
	return f
}
