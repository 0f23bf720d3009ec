// Package preempt chooses victims: the cheapest set of whole running gangs
// whose GPUs let a waiting job's gang fit.
//
// It decides only; it never acts. Select works on a placement.State inside
// the caller's transaction: on success the victims' GPUs are released and
// the preemptor's placed, so the caller can weigh the result (gain against
// cost, the policy's limits) and roll it back. Which gangs may be victims at
// all (preemptible, of a tier the preemptor may preempt, past their minimum
// runtime, not already stopping) is the caller's policy: Select only sees
// the candidates it is given, so nothing else can ever be chosen.
//
// Cost is the caller's: typically the victim's impact x (GPU-hours of work
// lost since its last checkpoint + restart cost). See WorkLost.
package preempt
