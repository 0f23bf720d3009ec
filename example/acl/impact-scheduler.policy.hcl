# Minimal Nomad ACL policy for `impact agent`.
#
#   nomad acl policy apply -description "impact scheduler" \
#     impact-scheduler example/acl/impact-scheduler.policy.hcl
#   nomad acl token create -name impact-scheduler -policy impact-scheduler
#
# Give the token's secret ID to the agent as NOMAD_TOKEN (or nomad.token in
# its config). Replace "default" with the namespace(s) whose jobs the
# scheduler manages; the parking pool name must match parking_pool.

# The event stream watches every namespace (namespace=*), and Nomad checks
# such a subscription against each namespace that exists: without read-job
# in all of them, one new namespace makes Nomad refuse the stream and the
# agent sees nothing. Read only; what the agent may change is below.
namespace "*" {
  capabilities = ["list-jobs", "read-job"]
}

namespace "default" {
  capabilities = [
    # Resync lists the jobs (with their meta) to rebuild the model.
    "list-jobs",
    # Read a job before re-registering it (its JobModifyIndex for
    # EnforceIndex), its allocations and evaluations; also what lets the
    # event stream deliver the Job, Evaluation and Allocation topics.
    "read-job",
    # Admit and park: re-register the job with a new node pool and node pins
    # (always with EnforceIndex, so a concurrent user update wins).
    "submit-job",
    # Preempt: send the checkpoint signal to a victim's allocations and stop
    # them (POST /v1/client/allocation/<id>/signal, /v1/allocation/<id>/stop).
    "alloc-lifecycle",
  ]

  variables {
    # Each job's explanation (nomad/jobs/<job>/impact): state, position,
    # score terms, reason. destroy: deleted when the job leaves the queue
    # for good; list: stale ones swept when an agent starts to lead. The
    # agent only rewrites or deletes Variables it wrote (written_by).
    path "nomad/jobs/*" {
      capabilities = ["read", "write", "list", "destroy"]
    }
    # The leader lock (impact/leader, Variables lock API) and durable state
    # (impact/state/...: fair-share usage, admission intents, preemption
    # records, idle requeue counts); destroy removes finished intents and
    # emptied requeue counts. Must match ha.state_prefix.
    path "impact/*" {
      capabilities = ["read", "write", "list", "destroy"]
    }
  }
}

# Nodes with their GPUs (device attributes from impact-gpu: islands, NUMA,
# health) are the capacity the scheduler places on; the Node event topic and
# node listing need read, and so does the GPU utilisation poll
# (GET /v1/client/stats?node_id=..., device_stats in impact.hcl). It never
# changes nodes.
node {
  policy = "read"
}

# Start-up creates the parking pool if it is missing: write on that pool
# only. Other pools (the targets of admitted jobs) are only read.
node_pool "impact-queue" {
  policy = "write"
}

node_pool "*" {
  policy = "read"
}
