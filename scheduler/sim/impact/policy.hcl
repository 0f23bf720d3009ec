# The policy `impact sim` runs the impact engine with (built in; pass
# --impact-policy FILE to use another). Same format as example/policy.hcl.
# Tiers match the simulator's synthesized labels.
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

# Normal work does not preempt: preemption is for the two top tiers, so the
# bulk of the queue never churns the cluster.
tier "normal" {
  weight      = 10
  may_preempt = []
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

preemption {
  enabled                     = true
  max_gpu_hours_lost_per_hour = 16
  min_runtime                 = "10m"
  restart_cost                = "2m"
  gain_horizon                = "1h"
  max_per_cycle               = 8
}

backfill {
  enabled      = true
  reservations = 1
}
