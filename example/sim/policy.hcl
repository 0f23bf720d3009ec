# The policy `impact sim` runs the impact engine with (built in; pass
# --impact-policy FILE to use another). Same format and tiers as
# example/policy.hcl; the tiers match the simulator's synthesized labels.
#
# Tuned for the simulated Philly scenario (jobs checkpoint every 30 minutes):
# preemption is cheap only right after a victim's checkpoint, so a short
# gain horizon makes the engine pick victims that lose little, and a 30
# minute minimum runtime keeps a restarted job from being stopped again
# before it has saved anything (15 minutes was measured too: no gain on the
# standard scenario, and more waits above nomad-native's on the
# robustness suite).
default_tier    = "normal"
default_project = "default"

tier "critical" {
  weight      = 1000
  may_preempt = ["high", "normal", "scavenger"]
  preemptible = false
}

tier "high" {
  weight      = 100
  may_preempt = ["normal", "scavenger"]
  preemptible = false
}

# Normal work may stop scavenger work, which is what packs whole nodes for
# multi-GPU jobs when single-GPU jobs have fragmented the cluster.
tier "normal" {
  weight      = 10
  may_preempt = ["scavenger"]
  preemptible = true
}

tier "scavenger" {
  weight      = 1
  preemptible = true
}

aging {
  weight_per_hour = 1
  max             = 50
}

fair_share {
  half_life = "24h"
  weight    = 8
}

# Gain of a preemption = preemptor impact x GPUs x gain_horizon; cost =
# victims' impact x (GPU-hours since their last checkpoint + restart_cost).
preemption {
  enabled                     = true
  max_gpu_hours_lost_per_hour = 64
  min_runtime                 = "30m"
  restart_cost                = "2m"
  gain_horizon                = "1m"
  max_per_cycle               = 2
}

backfill {
  enabled      = true
  reservations = 1
}

# The utilization layer: a job whose GPUs' mean utilisation stays below 5%
# for 30 minutes is idle; one whose every member is idle is hung, and is
# stopped with its checkpoint signal and queued again (at most twice). It
# acts only under the simulator's idleness model (impact sim --hang-share).
idle {
  threshold    = 5
  duration     = "30m"
  action       = "requeue"
  max_requeues = 2
}

# Headroom for urgent work: part of the pool is kept free of
# non-preemptible work of the other tiers (it may hold preemptible work,
# which goes there first and which a critical job preempts at once,
# minimum runtime or not), so a critical job starts within a cycle even
# when long non-preemptible work fills the cluster. Its size is learned
# from the critical jobs of the last day (their mean occupancy plus the
# largest one), at least one node, at most a tenth of the pool; it is
# kept as whole nodes.
headroom "gpu" {
  tiers     = ["critical"]
  learn     = true
  window    = "24h"
  min_gpus  = 8
  max_share = 0.1
}
