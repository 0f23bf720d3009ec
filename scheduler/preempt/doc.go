// Package preempt holds the victim rules: which running gangs may be
// stopped, at what cost, and which set of them lets a waiting job's gang
// fit.
//
//   - Eligibility and cost (victim.go): Running judges a preemptible gang
//     (past its min runtime, or young where a headroom waives it), Idle an
//     idle one on its tier's preemptible idle action; MayTake says which
//     tiers may take a victim, Movable which victims a defragmenting move
//     may take. Cost is the victim's impact x (GPU-hours of work lost since
//     its last checkpoint + restart cost); see WorkLost.
//   - The search (preempt.go, search.go): Index.Select frees the cheapest
//     whole gangs allocation by allocation; Search makes the set minimal,
//     re-places a gang whole and keeps it only if the job places as an
//     admission would on what it frees; SearchMoves also places each moved
//     victim again on GPUs free elsewhere.
//
// It decides only; it never acts. Everything works on a placement.State
// inside the caller's transaction and leaves it as it was, so the caller
// (the engine) weighs the result (gain against cost, the policy's limits)
// and orders the stops. The search sees only the candidates it is given.
package preempt
