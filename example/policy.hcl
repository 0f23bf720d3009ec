# Impact scheduling policy for nomad-impact (`impact agent -policy policy.hcl`).
#
# Every field is optional: what is left out keeps the built-in default
# (shown in the comments). The file is merged on top of the defaults and the
# result validated; errors name the file, the line and the field.

# Jobs without `impact_tier` / `impact_project` meta get these. Naming them
# keeps the default explicit: an unknown tier in a job is an error, never a
# silent fallback.
default_tier    = "normal"
default_project = "default"

# Tiers, from most to least important, a factor of ten apart so that the
# other terms (fair share up to +-50, deadline up to 50, aging up to 20)
# reorder jobs within a tier but rarely across tiers. `weight` is the
# tier's term in the impact score and its value per GPU when weighing a
# preemption's gain against its cost. `may_preempt` lists the tiers whose
# preemptible jobs this tier may stop. `preemptible` is the default for
# jobs of the tier that do not set `impact_preemptible`.
# `max_gpu_hours_lost_per_hour` (default 0) gives the preemptions ordered
# by the tier's jobs a budget of their own (GPU-hours of victims' work lost
# over any sliding hour), counted apart from the shared budget of the
# `preemption` block, which the tiers without one share. Give it to a tier
# that preempts often, so that its preemptions cannot spend what a higher
# tier's urgent ones need.
tier "critical" {
  weight      = 10000
  may_preempt = ["high", "normal", "scavenger"]
  preemptible = false
}

tier "high" {
  weight      = 1000
  may_preempt = ["normal", "scavenger"]
  preemptible = false
}

# Normal jobs preempting scavengers have 32 GPU-hours lost per hour of
# their own: critical and high keep the whole shared 64.
tier "normal" {
  weight                      = 100
  may_preempt                 = ["scavenger"]
  preemptible                 = true
  max_gpu_hours_lost_per_hour = 32
}

# Scavenger work fills idle GPUs and gives them back on demand. A hung
# scavenger gang (every member's GPUs idle) is stopped with its checkpoint
# signal and queued again, at most twice, then stopped for good.
tier "scavenger" {
  weight      = 10
  preemptible = true
  idle {
    action       = "requeue"
    max_requeues = 2
  }
}

# Projects are charged for GPU-hours. `share` is the relative entitlement
# (normalised over the projects with work in the cluster); `weight`
# multiplies the impact of the project's jobs; `gpu_quota` caps the GPUs the
# project may hold at once (0 = no cap). Unlisted projects get share 1,
# weight 1, no quota.
project "default" {
  share = 1
}

project "olmo" {
  share     = 3
  weight    = 1.5
  gpu_quota = 256
}

project "tulu" {
  share = 2
}

project "interns" {
  share     = 1
  weight    = 0.5
  gpu_quota = 32
}

# Aging: + weight_per_hour per hour waited, up to max, so nothing starves.
aging {
  weight_per_hour = 0.2 # default 0.2
  max             = 20  # default 20
}

# Fair share: + weight x (entitled - used fraction of GPU-hours), usage
# decayed with half_life, so last month matters less than yesterday.
fair_share {
  half_life = "24h" # default "24h"
  weight    = 50    # default 50
}

# Deadline urgency: + weight x urgency, rising from 0 at `horizon` before
# `impact_deadline` to 1 at the deadline.
deadline {
  weight  = 50    # default 50
  horizon = "24h" # default "24h"
}

# Shortest first: + weight x 1h / (1h + impact_walltime) (a job without a
# walltime counts as one of an hour), the whole weight once the job is
# overdue: waited more than overdue_share of what the oldest job of its
# tier waiting in its pool has. Within a tier the overdue jobs go first,
# first come, first served (the oldest is always overdue, so the head of
# a tier's queue is first come, first served), then the rest shortest
# first: they decide which jobs go past a head that cannot start yet and
# which of several start when many GPUs free at once. The median wait
# falls and the longest stay near first come, first served. Off
# here (weight 0); a weight under the smallest gap between tier weights
# keeps it within a tier. The simulator's policy runs it at 0.9
# (example/sim/policy.hcl, measured there).
shortest_first {
  weight        = 0    # default 0 (off)
  overdue_share = 0.75 # default 0.75
}

# Preemption: victims are whole gangs of preemptible jobs, past their minimum
# runtime, of tiers the preemptor may preempt; a preemption happens only when
# its gain (preemptor impact x GPUs x gain_horizon) exceeds its cost
# (victims' impact x (GPU-hours lost since their last checkpoint + restart
# cost)), and within the limits below. Nomad does not report checkpoints:
# a job that saves its work regularly should say how often in its meta
# (impact_checkpoint_interval = "30m"), otherwise all the work since its
# start counts as lost, which makes it an expensive (rarely chosen) victim.
preemption {
  enabled                     = true
  max_gpu_hours_lost_per_hour = 64    # over any sliding hour, shared by the tiers without their own; 0 = no cap
  min_runtime                 = "10m" # a job's impact_min_runtime may raise it
  restart_cost                = "5m"  # per GPU, added to the work lost
  gain_horizon                = "1h"
  max_per_cycle               = 8     # jobs that may preempt in one cycle
  # The top tier's preemption is worth the wait it saves: its victims free
  # their GPUs only after their grace, and it starts on whatever frees
  # first. So its gain is weighed by the chance that running work ending
  # on its own (at the pace of the last hour's ends in the pool, a job's
  # allocations ending together counting as one end of all their GPUs)
  # frees room for it before then; once it has waited a grace, it
  # preempts.
  weigh_ends = true
  # A preemption whose preemptor no longer waits (it started on GPUs that
  # freed meanwhile, or left the queue) is withdrawn while its victims'
  # grace lasts: they run on. A job that keeps working after its checkpoint
  # signal loses nothing; one that exits on it (impact_requeue_exit_code)
  # is requeued as before.
  withdraw = true
}

# Backfill: the first `reservations` blocked jobs of the queue hold a
# reservation on the GPUs they will get, once running work ends (by its
# impact_walltime) or once the reserving job may preempt it (it counts
# such work as freed then); later jobs use reserved GPUs only if they end
# (impact_walltime) before it is needed, or are preemptible by the
# reserving job (and preemption is enabled: otherwise it could never take
# them back).
#
# reserve_tiers (default none): a blocked job of these tiers that can
# neither start nor preempt its way in holds a reservation wherever it
# stands in the queue, not counted against `reservations`. A critical job
# as wide as a node, in a pool where every node holds work it may not
# preempt, then drains the node whose unpreemptible work ends soonest
# instead of waiting for a node to free by chance while each freed GPU
# goes to narrower jobs behind it. Where the tier uses a pool's headroom
# with an idle_budget (below), the budget pays for the reserved GPUs no
# job backfills as for the headroom's own idle ones
# (impact_headroom_idle_reserved_gpus{pool}), and while it is spent the
# tier's jobs reserve there only within `reservations`, like any job
# (`impact explain` says why one holds none).
#
# gather (default false): a blocked gang of several allocations that gets
# no reservation holds, in queue order, the free GPUs where its
# allocations fit now, one allocation at a time, as plain Nomad places a
# job's allocations; it starts once all of them fit. Without it such a
# gang starts only when all of its nodes are free at once, which a busy
# pool of smaller jobs never leaves. Held GPUs idle, as the placed
# allocations of Nomad's partial placement would: no later job backfills
# them, not even work the gang may preempt (such work could be too young
# or too costly to preempt when the gang needed it). A gang as wide as
# its pool holds each node as it frees until it starts, as plain Nomad's
# partial placement would (a gang wider than the pool is parked and holds
# nothing).
backfill {
  enabled       = true
  reservations  = 1
  gather        = false
  reserve_tiers = []
}

# Learned walltimes (off by default): a job that declares no
# impact_walltime leaves the engine blind to when it ends: waiting, it may
# backfill reserved GPUs only if the reserving job may preempt it;
# running, a reservation behind it has no time. With learn = true the
# engine learns the run times of finished jobs (allocations that ran to
# their end on their own; stopped, preempted, failed or lost ones teach
# nothing), from the runs that ended within the last `window` of the
# finest class with at least `min_samples` of them: the same project,
# tier and GPUs per allocation, else project and tier, else tier. A run
# time is the whole job's: a job resumed from a checkpoint counts the work
# its earlier runs saved (impact_progress) with its last run, and a job
# with saved work is estimated to need the estimate less it. A
# waiting job without a walltime is estimated to run the `quantile` of
# them: it backfills when that ends before the reservation is needed, and
# a learned headroom counts it for that long.
# With `running = true` too, a running job without one is estimated to end
# early, at the (1 - quantile) quantile of the runs of its class longer
# than it has run so far, which times reservations behind it. Estimates
# never stop a job; `impact explain` says "estimated" where one was used.
walltime {
  learn       = false
  running     = false # default false; needs learn
  quantile    = 0.9   # default 0.9, in (0, 1]
  min_samples = 20    # default 20
  window      = "72h" # default "72h"
}

# Defragmenting preemption (off by default): a waiting job for which the
# pool has free GPUs enough, but not where it could use them (an 8-GPU job
# beside nodes with 7 free GPUs whose 8th holds a small job), may stop
# small preemptible jobs that its tier's may_preempt would not let it stop
# (its own tier's too), each only if it can be placed again at once on
# GPUs free elsewhere: it is bound to those GPUs and restarts there once
# stopped, losing the work since its last checkpoint and its restart.
# Gain (over gain_horizon), cost, minimum runtime and the hourly budget of
# work lost are counted as for any preemption; plans and metrics show it as
# a preemption whose victim has moved_to set. Moves are searched last, once
# every waiting job was placed where it fits: a move only fills GPUs that
# no job behind it could use this cycle.
defragment {
  enabled         = false
  max_victim_gpus = 2    # a victim holds at most this many GPUs, in one allocation
  max_per_cycle   = 2    # jobs that may defragment in one cycle
  gain_horizon    = "0s" # 0 = the preemption block's gain_horizon
}

# Gangs: a running gang with a member missing (lost with its node, failed,
# stopped by someone, on a node that is down or draining, or replaced by
# Nomad with a member of a later generation) for longer than this grace is
# stopped whole, with its checkpoint signal and grace, and requeued whole:
# never a half-placed gang, never a replacement waiting at a barrier for
# ever. 0 turns the watch off.
gangs {
  missing_member_grace = "2m" # default "2m"
}

# The utilization layer: a running job whose GPUs' mean utilisation stays
# below `threshold` percent for `duration` (no sample missing in between:
# missing stats never count as idle) is idle; one whose every allocation is
# idle at once is hung. `action`: "report" (show and log only),
# "preemptible" (an idle job may be preempted by waiting work of its tier or
# a heavier one, costed as losing nothing since it went idle; its grace and
# checkpoint signal are kept), "requeue" (a hung job is stopped with its
# checkpoint signal and queued again, at most `max_requeues` times, then
# stopped for good). Jobs opt out with meta impact_idle = "ignore" unless
# `allow_opt_out` is false. A tier's own idle block overrides the fields it
# writes.
idle {
  threshold     = 5     # default 5
  duration      = "30m" # default "30m"
  action        = "report"
  max_requeues  = 2
  allow_opt_out = true
}

# Headroom (optional, one block per node pool): keep part of the pool free
# of non-preemptible work of every tier but `tiers`. Those GPUs may hold
# preemptible work, which a job of `tiers` preempts at once (its minimum
# runtime does not protect it from them), so urgent work starts within a
# cycle even when long non-preemptible jobs fill the cluster. The headroom
# is kept on ceil(size / node GPUs) nodes: whole nodes, and on the last of
# them only what is left of the size (a headroom smaller than a node keeps
# just its GPUs; the node's others take work the headroom keeps out only
# when no other node fits it, so that the node stays clearable by
# preemption), so an urgent job up to the headroom's size finds room in
# one place; preemptible work of the other tiers goes there first when it
# fits, leaving the rest of the pool to what the headroom keeps out. A
# headroom smaller than a node does not keep out a job that needs a whole
# node (no node could hold it beside the kept part): it may take the
# headroom's node, and the headroom forms again on the next one free
# enough of other work.
# Size: `gpus = N`, `share = 0.1` of the pool, or
# `learn = true`: the mean GPUs the tiers' jobs of the last `window` held
# (GPUs x walltime; without one, its estimate when the walltime block
# learns, else an hour) plus the largest of them, at
# least `min_gpus`, at most `max_share` of the pool. `idle_budget` (a
# share of the pool, default 0: none) bounds what the headroom costs in
# occupancy: the pool's free GPUs, up to the headroom's size, may idle
# while work it keeps out waits (and would fit them) at most that share
# of the pool's GPUs on average, unspent allowance carried for at most
# a `window`; once it has idled more, the headroom yields (keeps nothing, the kept-out work starts)
# until the allowance catches up. The same account pays for the GPUs the
# reserve tiers' reservations hold idle (backfill reserve_tiers, for the
# tiers that use the headroom), which yield with it. Waiting jobs kept out say so in
# `impact explain`; impact_headroom_gpus{pool} and
# impact_headroom_held_gpus{pool,holder} show its size and what holds it,
# impact_headroom_idle_kept_gpus{pool} what it idles,
# impact_headroom_idle_reserved_gpus{pool} what the reserve tiers'
# reservations idle on its account,
# impact_headroom_idle_credit_gpu_hours{pool},
# impact_headroom_yielded{pool} and impact_headroom_yields_total{pool}
# its idle budget.
# `loan_grace` (a duration; default unset: no loan) lends the headroom's
# nodes on short notice: a job of `tiers` preempts the preemptible work
# running there before other work it could stop, and stops it after
# loan_grace (or the victim's own impact_grace, if shorter) instead of
# its impact_grace, so it starts seconds after the decision rather than a
# grace later, with no GPU kept idle. The borrowers pay: a task that saves
# on its checkpoint signal has only loan_grace to do so (Nomad's
# kill_timeout still applies to the stop), else it loses what it did
# since its last checkpoint. `impact explain` tells such a job at its
# admission that it runs on loan, with the grace it may be stopped
# after, and its stop's reason says it was on loan
# (impact_preemptions_on_loan_total{tier} counts such stops). On the
# simulator's robustness suite it meets about a quarter of the critical
# gains a preemption's minute missed, and the lower tiers pay for it in
# more checks than it meets (example/sim/README.md, "Twenty-fourth
# pass").
# `take_back` (a duration; default unset: nothing taken back) lets a job
# of `tiers` take back, at once, GPUs anywhere in the pool that
# preemptible work of the other tiers started on less than take_back
# ago: a preemption chooses such work before other work it could stop
# and stops it without its impact_grace. Where work ends often, the GPUs
# an urgent job needs were given a moment earlier to a job it would have
# gone ahead of; taking them back starts it a cycle later instead of a
# grace later, and the victim loses at most take_back of work (it has run
# no longer) and queues again. `impact explain` tells a preemptible job
# at its admission that it may be taken back, and for how long; the
# stop's reason says it was (impact_preemptions_taken_back_total{tier}
# counts such stops). The simulator's policy takes back work younger
# than 15m: on its robustness suite the critical gains failing fall from
# 83 to 33 over four seeds, the lower tiers' checks failing rise from 55
# to 63 (example/sim/README.md, "Twenty-fifth pass").
# `take_back_unsaved` (a duration; default unset) takes back the same
# way preemptible work of any age whose work since its last checkpoint
# is less than it: the last checkpoint its impact_checkpoint_interval
# makes expected, or its start when it declares none. Such a victim
# loses at most that much work (if it checkpoints on that interval); its
# grace
# would have bought it the save of those few minutes and cost the urgent
# job a grace. Where work runs long in a small pool and little of it is
# young, this is what a job of `tiers` can start on at once. A job that
# declares no impact_checkpoint_interval is taken back by it only while
# it has run less than take_back_unsaved.
# The simulator's policy sets 3m (example/sim/README.md, "Twenty-sixth
# pass").
#
# headroom "gpu" {
#   tiers             = ["critical"]
#   learn             = true
#   window            = "24h"
#   min_gpus          = 8
#   max_share         = 0.1
#   idle_budget       = 0.004
#   take_back         = "15m"
#   take_back_unsaved = "3m"
# }
