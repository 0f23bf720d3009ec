# Distributed training on impact-scheduled GPUs: 2 nodes x 4 NVLink-connected GPUs.
#
# How the pieces fit (see example/README.md, "How a job opts in"):
#   - node_pool = "impact-queue": the job is parked on submission; the impact
#     scheduler admits it (moves it to meta impact_pool, pins its nodes) when
#     its turn comes and the whole gang fits.
#   - device "nvidia/gpu": GPUs from the impact-gpu device plugin; one device
#     block per task, so CUDA_VISIBLE_DEVICES holds exactly the 4 given GPUs.
#     impact_topology = "nvlink" keeps each member's 4 GPUs in one NVLink
#     island: the scheduler picks them from the per-GPU topology and pins
#     exactly those. No device constraint is needed for that, and
#     ${device.attr.island_size} would be wrong with impact-gpu's default
#     group_by = "model": the attribute is set only on a device group that
#     lies in one island (group_by = "island"), so such a constraint matches
#     no GPU and the scheduler parks the job saying so.
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
#     train.py (beside this file) finishes the step in flight, saves a
#     checkpoint and exits 75 (impact_requeue_exit_code): the job goes back to
#     the queue and resumes from that checkpoint when admitted again. Exit 0
#     means the work is done: the job completes, never re-run. torchrun turns
#     its workers' 75 into 1; train.py writes IMPACT_REQUEUE_FILE first, so
#     impact-exec reports 75 all the same (driver/README.md, "Exit codes").
#   - checkpoints: on storage every client mounts at the same path
#     (/mnt/checkpoints here: NFS, Lustre, a parallel file system), never
#     under NOMAD_ALLOC_DIR: a requeued job runs in new allocations, with new
#     alloc dirs. See example/README.md, "PyTorch on impact".
#
# Run (from the repository root: file("example/jobs/train.py") below is read
# relative to the directory the CLI runs in):
#       nomad job run example/jobs/distributed-training.nomad.hcl
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

    # The checkpoint directory is a Nomad host volume that every GPU client
    # declares on the same shared storage:
    #   client { host_volume "checkpoints" { path = "/mnt/checkpoints" } }
    # impact-exec runs tasks without filesystem isolation (like raw_exec),
    # so it mounts nothing: the task uses the path itself (below), and this
    # block only keeps the job off clients that lack the storage. CSI
    # volumes need a driver that mounts them; they do not work here.
    volume "checkpoints" {
      type      = "host"
      source    = "checkpoints"
      read_only = false
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
        #
        # One torchrun per allocation, 4 workers each. impact-exec's RANK
        # and WORLD_SIZE count allocations, so they are torchrun's
        # --node_rank and --nnodes (NODE_RANK/NNODES count hosts: two
        # allocations on one host would share a node rank); torchrun then
        # sets every worker's RANK (node_rank x 4 + local rank), WORLD_SIZE
        # (8) and LOCAL_RANK itself.
        # --max_restarts=0: a worker that exits (75 after a checkpoint) ends
        #   the member, never restarted in place by torchrun.
        # --monitor_interval=1: how often torchrun looks at its workers.
        # --redirects=1 --tee=1: Debian's torchrun 1.13.1 on Python 3.11
        #   crashes at start without them (its Std.from_str("0") is None).
        # "exec": the shell becomes torchrun, the main process that
        #   checkpoint_signal_to = "children" spares.
        # torchrun, python3: found in the PATH the task inherits from the
        # Nomad client; give absolute paths (a venv's bin/) otherwise.
        args = ["-c", <<-EOT
          exec torchrun \
            --nnodes="$WORLD_SIZE" --node_rank="$RANK" --nproc_per_node=4 \
            --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" \
            --max_restarts=0 --monitor_interval=1 \
            --redirects=1 --tee=1 --log_dir="$NOMAD_TASK_DIR/torchrun" \
            local/train.py --checkpoint-dir "/mnt/checkpoints/$NOMAD_NAMESPACE/$NOMAD_JOB_ID" \
            --steps 100000 --checkpoint-every 500
        EOT
        ]

        gang {
          # Whole job (both allocations); the size is explicit so the job
          # also runs against a standalone `impact-exec gang-server`.
          size       = 2
          timeout    = "15m"
          port_label = "rdzv"
          # checkpoint_signal / grace default to the impact_* meta above.
          # torchrun has no SIGUSR1 handler: signalled itself it would die
          # at once and take its workers with it before they saved. So the
          # signal goes to its workers only; once they have exited,
          # torchrun gets the kill signal (driver/README.md, "The checkpoint
          # signal"). The alternative: impact_checkpoint_signal = "SIGTERM"
          # with checkpoint_signal_to = "main" (torchrun forwards SIGTERM).
          checkpoint_signal_to = "children"
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

      # gloo and NCCL open connections of their own between the nodes, on
      # ports they pick, over the interface they pick: set it when the
      # default route's interface is not the one the nodes reach each other
      # on (MASTER_ADDR must be routable from every node, see
      # advertise_addr / port_label in driver/README.md).
      # env {
      #   GLOO_SOCKET_IFNAME = "eth0"
      #   NCCL_SOCKET_IFNAME = "eth0"
      # }

      # The trainer ships with the job: file() reads it when the job is
      # submitted, relative to the directory `nomad job run` runs in (so run
      # it from the repository root). Delimiters no Python code uses, so the
      # template copies it verbatim.
      template {
        data            = file("example/jobs/train.py")
        destination     = "local/train.py"
        left_delimiter  = "[[impact-template:"
        right_delimiter = ":impact-template]]"
        change_mode     = "noop"
      }

      resources {
        cpu    = 16000
        memory = 65536

        # One island per member comes from impact_topology = "nvlink".
        device "nvidia/gpu" {
          count = 4
        }
      }
    }
  }
}
