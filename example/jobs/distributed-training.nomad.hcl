# Distributed training on impact-scheduled GPUs: 2 nodes x 4 NVLink-connected GPUs.
#
# How the pieces fit (see example/README.md, "How a job opts in"):
#   - node_pool = "impact-queue": the job is parked on submission; the impact
#     scheduler admits it (moves it to meta impact_pool, pins its nodes) when
#     its turn comes and the whole gang fits.
#   - device "nvidia/gpu": GPUs from the impact-gpu device plugin; one device
#     block per task, so CUDA_VISIBLE_DEVICES holds exactly the 4 given GPUs
#     (Nomad takes them from one device group = one NVLink island).
#   - ui: Nomad's UI shows a parked batch job as "Failed" (none of its
#     allocations is placed yet); the description says what that means and
#     the link opens the impact agent's page of the job (place in the queue,
#     why it waits, score terms). Point the URL at your agent (http.ui_url;
#     127.0.0.1:4680 is make dev's, IMPACT_LISTEN's default).
#   - driver "impact-exec": holds each member at the gang barrier until both
#     allocations are placed, then starts the command with WORLD_SIZE, RANK,
#     NODE_RANK, NNODES, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
#     MASTER_PORT set (rank 0's "rdzv" port); it authenticates with the
#     task's "impact" workload identity (the identity block below). When a member fails or is
#     preempted, the others get impact_checkpoint_signal, then
#     impact_grace later their kill signal, so the gang is requeued whole.
#   - exit codes (the preemption outcome contract): on impact_checkpoint_signal
#     train.py (yours) should save a checkpoint and exit 75 (impact_requeue_exit_code):
#     the job goes back to the queue and resumes (--resume) when admitted
#     again. Exit 0 means the work is done: the job completes, never re-run.
#
# Run:  nomad job run example/jobs/distributed-training.nomad.hcl
#       impact explain llm-pretrain
job "llm-pretrain" {
  type      = "batch"
  node_pool = "impact-queue"

  meta {
    impact_tier              = "high"
    impact_project           = "olmo"
    impact_deadline          = "2026-12-05T00:00:00Z"
    impact_preemptible       = "true"
    impact_checkpoint_signal = "SIGUSR1"
    impact_grace             = "5m"
    impact_requeue_exit_code = "75"
    impact_min_runtime       = "30m"
    impact_walltime          = "6h"
    impact_topology          = "nvlink"
    impact_pool              = "gpu"
  }

  ui {
    description = "Queued by the impact scheduler until the whole gang fits; it holds no GPUs while it waits, which Nomad shows as not placed (Failed). Its place in the queue and why: the impact link."
    link {
      label = "Queue position and why (impact)"
      url   = "http://127.0.0.1:4680/ui/job/default/llm-pretrain"
    }
  }

  group "workers" {
    count = 2

    # One member per node; the impact scheduler also pins the chosen nodes.
    constraint {
      distinct_hosts = true
    }

    network {
      port "rdzv" {}
    }

    # A failed member is not restarted alone: the gang stops together and
    # the impact scheduler requeues it whole.
    restart {
      attempts = 0
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

    task "trainer" {
      driver       = "impact-exec"
      kill_signal  = "SIGTERM"
      kill_timeout = "60s"

      config {
        command = "/bin/sh"
        # $VAR (no braces) is expanded by the shell at start, after the
        # barrier; ${...} would be interpolated by Nomad before it.
        args = ["-c", <<-EOT
          exec torchrun \
            --nnodes="$NNODES" --node_rank="$NODE_RANK" --nproc_per_node=4 \
            --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" \
            local/train.py --checkpoint-dir "$NOMAD_ALLOC_DIR/data/ckpt" --resume
        EOT
        ]

        gang {
          # Whole job (both allocations); the size is explicit so the job
          # also runs against a standalone `impact-exec gang-server`.
          size       = 2
          timeout    = "15m"
          port_label = "rdzv"
          # checkpoint_signal / grace default to the impact_* meta above.
        }
      }

      # The task's workload identity for the impact rendezvous: Nomad
      # writes it to secrets/nomad_impact.jwt and renews it; impact-exec
      # presents it on every call, and the agent accepts it only for this
      # allocation's own member of this job's gang.
      identity {
        name = "impact"
        aud  = ["impact"]
        file = true
        ttl  = "1h"
      }

      artifact {
        source      = "https://example.org/olmo/train.py"
        destination = "local/"
      }

      resources {
        cpu    = 16000
        memory = 65536

        device "nvidia/gpu" {
          count = 4

          # Keep all four GPUs of a member on one NVLink island.
          constraint {
            attribute = "${device.attr.island_size}"
            operator  = ">="
            value     = "4"
          }
        }
      }
    }
  }
}
