# A Nomad client agent with the impact-gpu device plugin.
#
# Install: put the impact-gpu binary (make build: bin/plugins/impact-gpu) into
# plugin_dir. The plugin block's label must be the binary's file name.
# Jobs then ask for GPUs as usual:
#
#   resources {
#     device "nvidia/gpu" {
#       count = 4
#       # optional: constraint/affinity on ${device.attr.island},
#       # ${device.attr.numa}, ${device.attr.memory}, ... (see device/doc.go)
#     }
#   }

data_dir   = "/opt/nomad/data"
plugin_dir = "/opt/nomad/plugins"
bind_addr  = "127.0.0.1"

client {
  enabled = true

  options = {
    # Skip the cloud metadata fingerprinters off-cloud: each probes a
    # link-local address and delays the node's start-up.
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}

plugin "impact-gpu" {
  config {
    # Every setting is optional; these are the defaults.
    enabled            = true
    backend            = "nvml"   # or "fake" (needs fake_topology)
    group_by           = "model"  # "model", "island" or "numa": "model" with the
                                  # impact agent (any count places; the agent pins
                                  # the GPUs it chose); "island"/"numa" only for
                                  # clusters without it (asks larger than an
                                  # island/NUMA node then never place)
    fingerprint_period = "1m"     # re-scan period; health events are immediate
    ignored_gpu_ids    = []       # GPU or MIG UUIDs to hide from Nomad

    # Without GPUs (development, CI, demos): a topology file from
    # example/topologies/; append lines such as "xid gpu3 79" to its
    # control file to inject faults.
    # backend       = "fake"
    # fake_topology = "/etc/nomad.d/topologies/two-islands-8x-a100.hcl"
  }
}

# Nomad's own NVIDIA plugin (nomad-device-nvidia) must not be installed
# next to this one: both would report the same GPUs.
