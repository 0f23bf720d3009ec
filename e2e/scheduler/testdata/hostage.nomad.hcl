# Issue 36's hostage: example/jobs/distributed-training.nomad.hcl with the
# edits a user makes on one test node (no distinct_hosts, no island
# constraint in the device block, a trivial command, small cpu/memory): a
# 2 x 4-GPU NVLink gang. TestNoJobHoldsThePool runs it as written.
job "gs-nocons" {
  type      = "batch"
  node_pool = "impact-queue"
  meta {
    impact_tier = "high"
    impact_project = "olmo"
    impact_deadline = "2026-12-05T00:00:00Z"
    impact_preemptible = "true"
    impact_checkpoint_signal = "SIGUSR1"
    impact_grace = "5m"
    impact_requeue_exit_code = "75"
    impact_min_runtime = "30m"
    impact_walltime = "6h"
    impact_topology = "nvlink"
    impact_pool = "gpu"
  }
  group "workers" {
    count = 2
    network {
      port "rdzv" {}
    }
    restart {
      attempts = 0
      mode = "fail"
    }
    reschedule {
      attempts = 0
      unlimited = false
    }
    task "trainer" {
      driver = "impact-exec"
      config {
        command = "/bin/sh"
        args = ["-c", "echo rank=$RANK world=$WORLD_SIZE; sleep 30"]
        gang {
          size = 2
          timeout = "15m"
          port_label = "rdzv"
        }
      }
      identity {
        name = "impact"
        aud = ["impact"]
        file = true
        ttl = "1h"
      }
      resources {
        cpu = 100
        memory = 64
        device "nvidia/gpu" {
          count = 4
        }
      }
    }
  }
}
