# Nomad ACL policy for people and tools that use the impact agent's API.
#
#   nomad acl policy apply -description "impact users of namespace default" \
#     impact-user example/acl/impact-user.policy.hcl
#   nomad acl token create -name alice -policy impact-user
#   export NOMAD_TOKEN=<secret ID>      # then: impact queue, impact explain JOB
#
# The impact agent asks Nomad, with the caller's token, what it may do;
# the token never gains the agent's own privileges. Replace "default" with
# the namespaces the holder works in.

namespace "default" {
  capabilities = [
    # `impact queue` lists, and `impact explain` explains, the jobs of the
    # namespaces where the token may read-job (others are left out / 403).
    "read-job",
    # PUT /v1/gang/<namespace>:<job>/stop (ask a gang to checkpoint and
    # stop) needs submit-job in the gang's namespace: the holder could stop
    # the job in Nomad anyway. Leave it out for read-only users.
    "submit-job",
  ]
}
