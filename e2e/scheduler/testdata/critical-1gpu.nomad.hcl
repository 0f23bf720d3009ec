# A 1-GPU critical job (TestNoJobHoldsThePool).
job "critical-1gpu" {
  type = "batch"
  node_pool = "impact-queue"
  meta {
    impact_tier = "critical"
  }
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args = ["-c", "sleep 120"]
      }
      resources {
        cpu = 100
        memory = 64
        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}
