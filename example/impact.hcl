# Configuration of `impact agent`, the impact scheduler service
# (`impact agent -config example/impact.hcl`).
#
# Precedence, lowest to highest: built-in defaults < environment (NOMAD_ADDR,
# NOMAD_TOKEN, NOMAD_CACERT, ... as the nomad CLI reads them, and
# CONSUL_HTTP_ADDR / CONSUL_HTTP_TOKEN) < this file (several -config files
# merge in order) < command-line flags. Every setting is optional except
# `policy`; what is left out keeps the default shown. Errors name the file,
# the line and the setting.

# The scheduling policy (tiers, projects, fair share, preemption limits),
# relative to this file.
policy = "policy.hcl"

# Jobs opt in by being submitted to this node pool. It has no nodes: Nomad
# keeps such jobs pending until the scheduler admits them. The agent creates
# it at start-up.
parking_pool = "impact-queue"

# Where an admitted job runs when its meta names no impact_pool.
default_pool = "default"

# trace, debug, info, warn, error. log_json = true writes JSON lines.
log_level = "info"

# Names this agent among several (logs, leader lock holder, Consul service
# ID). Default: the host name.
# name = "impact-1"

nomad {
  # Unset here means NOMAD_ADDR, else http://127.0.0.1:4646. unix:// works
  # too, e.g. Nomad's task API socket when the agent runs as a Nomad job.
  address = "http://127.0.0.1:4646"

  # The ACL token (example/acl/impact-scheduler.policy.hcl has the policy it
  # needs). Prefer NOMAD_TOKEN in the environment to a token in a file.
  # token = ""

  # namespace = "default"   # where managed jobs live
  # region    = ""          # the agent's region

  # TLS to Nomad (mTLS when client_cert/client_key are set).
  # ca_cert         = "/etc/nomad.d/tls/nomad-agent-ca.pem"
  # client_cert     = "/etc/nomad.d/tls/global-cli-nomad.pem"
  # client_key      = "/etc/nomad.d/tls/global-cli-nomad-key.pem"
  # tls_server_name = "server.global.nomad"
}

cycle {
  # A cycle runs at least this often, and shortly after Nomad events.
  interval = "10s"
  # Events arriving within a window are decided on together at its end:
  # four times the last cycle's own cost, at least 20ms, at most this (a
  # small queue is decided on within about 20ms of an event).
  debounce = "500ms"
  # An admitted gang that is not fully running after this long is parked
  # again (the admission is rolled back). One that Nomad cannot place (a
  # blocked evaluation: CPU, memory, a constraint) is parked 30s after
  # admission, whatever this says.
  admission_deadline = "5m"
}

http {
  # The agent's API: /v1/health, /v1/queue, /v1/explain/<job>, /metrics,
  # the pages under /ui/ and the task driver's /v1/gang/. `impact queue` and
  # `impact explain` read it (IMPACT_ADDR). impact-exec on every GPU node
  # must reach it, so in a cluster it listens on a routable address: see
  # `auth` below for who may call what, and serve it over TLS so tokens
  # cannot be read off the wire.
  listen = "127.0.0.1:4680"
  # Address registered in Consul; needed when listen is a wildcard.
  # advertise = "10.0.0.5:4680"
  # Where people open the agent's pages (/ui/: the queue, one page per
  # job); each job's explanation Variable links its page from here.
  # Defaults to http(s)://<advertise, else listen>; set it when the agent is
  # behind a proxy or a DNS name.
  # ui_url = "https://impact.example.com"

  # TLS: https with this certificate and key (read again when they change
  # on disk). Clients verify it with the CA: `impact` with IMPACT_CACERT,
  # impact-exec with rendezvous_ca_cert in its plugin config, Consul's
  # check with its own CA settings.
  # tls_cert = "/etc/impact/tls/impact.pem"
  # tls_key  = "/etc/impact/tls/impact-key.pem"
  # Mutual TLS: every client must present a certificate signed by this CA
  # (`impact`: IMPACT_CLIENT_CERT/IMPACT_CLIENT_KEY; impact-exec:
  # rendezvous_client_cert/rendezvous_client_key; Consul health checks and
  # Prometheus need one too).
  # tls_client_ca = "/etc/impact/tls/clients-ca.pem"
}

auth {
  # Who may read /v1/queue, /v1/explain/<job> and the pages (/ui/; a
  # browser enters its token at /ui/login, kept in an HttpOnly cookie):
  #   "auto"  a Nomad ACL token (X-Nomad-Token or Authorization: Bearer;
  #           the CLI sends IMPACT_TOKEN, else NOMAD_TOKEN) while Nomad has
  #           ACLs enabled, and only the jobs of namespaces the token may
  #           read-job in; anyone while Nomad has ACLs disabled
  #   "token" always a token (refused outright when Nomad has no ACLs)
  #   "open"  anyone who reaches the port
  # /v1/health is always open.
  read = "auto"

  # /metrics: "open" (Prometheus without credentials) or "token" (any valid
  # Nomad ACL token, e.g. in Prometheus' authorization { credentials_file }).
  metrics = "open"

  # /v1/gang/ (the impact-exec rendezvous): "identity" authenticates each
  # member with its task's Nomad workload identity (checked against
  # Nomad's /.well-known/jwks.json) and stop with an ACL token that may
  # submit-job in the gang's namespace. Jobs using the rendezvous need, in
  # each impact-exec task:
  #   identity {
  #     name = "impact"
  #     aud  = ["impact"]     # = identity_audience below
  #     file = true           # secrets/nomad_impact.jwt, renewed by Nomad
  #     ttl  = "1h"
  #   }
  # "open" authenticates nothing and is accepted only with a loopback
  # http.listen (development).
  gang = "identity"

  # The audience (aud) the members' identities must carry.
  identity_audience = "impact"

  # How long Nomad's answer about a token is reused: a revoked token keeps
  # working for at most this long.
  token_cache_ttl = "30s"
}

ha {
  # Run two or more agents: one leads, elected with a Nomad Variables lock
  # under state_prefix. A standby takes over at once when the leader stops
  # cleanly, and after about three lock_ttl when it crashes (the lock must
  # expire). Nomad accepts 10s to 24h.
  lock_ttl     = "15s"
  state_prefix = "impact"
}

device_stats {
  # The utilisation metrics (impact_gpu_utilization_percent{node,gpu,index},
  # impact_gpu_memory_used_mib, impact_node_gpu_utilization_percent,
  # impact_gpus_utilization_percent of allocated GPUs) come from the GPU
  # device stats impact-gpu reports to each Nomad client. Every interval the
  # leading agent (standbys serve no utilisation series) asks Nomad for the
  # stats of each ready node with GPUs
  # (GET /v1/client/stats?node_id=..., which the servers forward to the
  # client; node read in the ACL policy), 8 nodes at a time, each request
  # bounded by node_timeout. A node that does not answer is logged, counted
  # in impact_gpu_stats_errors_total and left out; it never stops
  # scheduling. enabled = false turns the poll off.
  enabled      = true
  interval     = "15s"
  node_timeout = "5s"
}

# Register in Consul as service "impact-scheduler" with an HTTP health check
# on /v1/health (tags "leader" / "standby"). Leave the block out to disable.
# consul {
#   address        = "127.0.0.1:8500"   # or CONSUL_HTTP_ADDR
#   token          = ""                 # or CONSUL_HTTP_TOKEN
#   service_name   = "impact-scheduler"
#   check_interval = "10s"
# }
