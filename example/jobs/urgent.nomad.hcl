# A critical job of one 4-GPU allocation. Submitted while sweep.nomad.hcl
# fills the `make dev` node, it preempts the sweep once the sweep has run
# for the policy's min_runtime: the sweep's tasks get SIGUSR1, 10s later
# they are stopped, and the sweep goes back to pending in the parking pool.
job "urgent" {
  type      = "batch"
  node_pool = "impact-queue"

  meta {
    impact_tier = "critical"
  }

  group "g" {
    task "t" {
      driver = "raw_exec" # make dev enables it
      config {
        command = "/bin/sh"
        args    = ["-c", "sleep 300"]
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
