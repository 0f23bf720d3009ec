# A preemptible sweep for trying ordering and preemption on the `make dev`
# node: `count` allocations of 4 GPUs (one NVLink island each; the default 2
# fill the node), whose task prints "checkpoint" on its checkpoint signal.
#
#   nomad job run example/jobs/sweep.nomad.hcl                  # scavenger, 8 GPUs
#   nomad job run -var tier=normal -var count=1 example/jobs/sweep.nomad.hcl
#   nomad job run example/jobs/urgent.nomad.hcl                 # critical: preempts it
variable "count" {
  type    = number
  default = 2
}

variable "tier" {
  type    = string
  default = "scavenger" # or normal, high, critical (example/policy.hcl)
}

job "sweep" {
  type      = "batch"
  node_pool = "impact-queue"

  meta {
    impact_tier              = var.tier
    impact_checkpoint_signal = "SIGUSR1"
    impact_grace             = "10s"
  }

  group "g" {
    count = var.count

    task "t" {
      driver = "raw_exec" # make dev enables it
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'echo checkpoint' USR1; while true; do sleep 1; done"]
      }
      resources {
        cpu    = 100
        memory = 64
        device "nvidia/gpu" {
          count = 4
        }
      }
    }
  }
}
