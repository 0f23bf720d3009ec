// Package policy holds what the operator and the job author say about
// importance, and the arithmetic that turns it into an order.
//
// Three things live here, all pure (no I/O beyond reading the policy file,
// no clock reads: every function that needs the time takes it):
//
//   - what a job's spec (jobspec.Spec, its `impact_*` meta as parsed by the
//     jobspec package, which the driver shares) means under this policy:
//     its tier, project, preemptibility and min runtime; CheckSpec adds
//     the one error only the policy can tell (an unknown tier), so the caller
//     can keep the job parked and say everything to fix; nothing is
//     defaulted silently.
//   - Policy, the operator's policy file (tiers, projects, aging, fair-share
//     half-life, preemption limits, shared or per preempting tier,
//     backfill, defragmenting preemptions, headrooms, idle), built with the
//     Default -> Overlay -> Validate pattern. The file is decoded by gohcl
//     struct tags (file.go: each key named once); decode errors and
//     validation errors name the file, line and field.
//   - Score and Usage: the impact score of a waiting job with every term kept
//     for explain, and per-project GPU-hour usage decayed with a half-life,
//     from which the fair-share deficit is computed.
package policy
