# Distributed training in Docker containers: 2 nodes x 4 GPUs, admitted
# whole by the impact scheduler and started together with the rendezvous env,
# like distributed-training.nomad.hcl but with the image's own Python and
# torch instead of the client's (example/README.md, "Docker and other
# drivers").
#
# How the pieces fit:
#   - task "gang" (prestart, raw_exec): `impact-exec gang-join` joins the
#     job's gang at the impact agent with its "impact" workload identity,
#     waits until both allocations have joined, writes WORLD_SIZE, RANK,
#     NODE_RANK, NNODES, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
#     MASTER_PORT, IMPACT_GANG_ID and IMPACT_GANG_EPOCH to
#     ${NOMAD_ALLOC_DIR}/impact/gang.env and exits 0. Nomad starts the main
#     task only then. It needs the impact-exec binary on every GPU client
#     (var.impact_exec) and raw_exec enabled there; with exec instead, put
#     the binary where the exec chroot has it (/usr/local/bin).
#   - task "trainer" (docker): its template reads that file and sets the
#     container's env from it (env = true). The GPUs are Nomad's device
#     reservation from impact-gpu: NVIDIA_VISIBLE_DEVICES and
#     CUDA_VISIBLE_DEVICES name exactly the GPUs the scheduler pinned, and
#     Nomad's docker driver runs the container with its nvidia_runtime
#     (the NVIDIA container toolkit's "nvidia" by default) to expose them.
#   - preemption: the impact agent sends impact_checkpoint_signal to the
#     allocation's tasks (Nomad's docker driver: to the container's PID 1)
#     and stops them impact_grace later. torchrun handles SIGTERM and passes
#     it to its workers; train.py saves and exits 75 on it (see --help).
#     "exec" makes torchrun PID 1: a shell left as PID 1 would get the
#     signal instead and, without a trap, ignore it.
#   - a failed member (its container exits non-zero, its node is lost): the
#     impact agent stops the other member with the checkpoint signal and
#     requeues the gang whole (example/README.md, "Preemption and exit
#     codes").
#   - exit codes: 75 requeues; 0 completes the job. torchrun exits 1 when
#     its workers exit 75, and only impact-exec turns that back into 75
#     (IMPACT_REQUEUE_FILE): here the job is still requeued, counted as
#     "stopped" rather than "requeued".
#
# Run (from the repository root; point the variables at your nodes):
#       nomad job run -var impact_exec=$PWD/bin/plugins/impact-exec \
#         -var rendezvous=http://127.0.0.1:4680 example/jobs/docker-gang.nomad.hcl
variable "impact_exec" {
  type        = string
  default     = "/opt/nomad/plugins/impact-exec"
  description = "impact-exec on every GPU client (make build: bin/plugins/impact-exec)"
}

variable "rendezvous" {
  type        = string
  default     = "http://127.0.0.1:4680"
  description = "the impact agent's address as the GPU clients reach it (IMPACT_ADDR)"
}

variable "image" {
  type        = string
  default     = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
  description = "any image with python3 and torch (torchrun)"
}

job "docker-train" {
  type      = "batch"
  node_pool = "impact-queue"

  meta {
    impact_tier              = "normal"
    impact_preemptible       = "true"
    impact_checkpoint_signal = "SIGTERM"
    impact_grace             = "2m"
    impact_requeue_exit_code = "75"
    impact_topology          = "nvlink"
    impact_pool              = "gpu"
  }

  group "workers" {
    count = 2

    constraint {
      distinct_hosts = true
    }

    # Rank 0's "rdzv" port is MASTER_ADDR:MASTER_PORT (host networking).
    network {
      port "rdzv" {}
    }

    # The impact scheduler, not Nomad, decides what runs again: a member is
    # never restarted or rescheduled alone.
    restart {
      attempts = 0
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

    # Checkpoints on storage every GPU client mounts at the same path,
    # declared there as a host volume (as for distributed-training.nomad.hcl:
    # client { host_volume "checkpoints" { path = "/mnt/checkpoints" } });
    # the docker driver mounts it into the container (volume_mount below).
    volume "checkpoints" {
      type      = "host"
      source    = "checkpoints"
      read_only = false
    }

    task "gang" {
      lifecycle {
        hook    = "prestart"
        sidecar = false
      }

      driver = "raw_exec"

      config {
        command = var.impact_exec
        # ${node.unique.id}: NODE_RANK and NNODES count nodes.
        args = ["gang-join", "-addr", var.rendezvous, "-port-label", "rdzv",
        "-node-id", "${node.unique.id}", "-timeout", "15m"]
      }

      # gang-join presents this identity; the agent accepts it only for this
      # allocation's member of this job's gang.
      identity {
        name = "impact"
        aud  = ["impact"]
        file = true
        ttl  = "1h"
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }

    task "trainer" {
      driver       = "docker"
      kill_signal  = "SIGTERM"
      kill_timeout = "60s"

      config {
        image        = var.image
        network_mode = "host"
        command      = "/bin/sh"
        # $VAR (no braces): expanded by the container's shell from the env
        # the template below set; ${...} would be Nomad's interpolation.
        args = ["-c", <<-EOT
          exec torchrun \
            --nnodes="$WORLD_SIZE" --node_rank="$RANK" --nproc_per_node=4 \
            --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" \
            --max_restarts=0 --monitor_interval=1 \
            /local/train.py --checkpoint-dir "/mnt/checkpoints/$NOMAD_NAMESPACE/$NOMAD_JOB_ID" \
            --steps 100000 --checkpoint-every 500
        EOT
        ]
      }

      volume_mount {
        volume      = "checkpoints"
        destination = "/mnt/checkpoints"
      }

      # The rendezvous env: gang-join wrote it before this task starts.
      template {
        source      = "../alloc/impact/gang.env"
        destination = "local/gang.env"
        env         = true
      }

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

        device "nvidia/gpu" {
          count = 4
        }
      }
    }
  }
}
