# A simulated cluster for `impact sim --cluster example/sim/cluster.hcl`.
# Same shape as the standard scenario: 64 nodes of 8 GPUs in two NVLink
# islands of 4, eight nodes to a rack. Add node_group blocks for mixed
# clusters; each group's racks are numbered after the previous group's.
node_group "hgx" {
  count     = 64 # nodes
  gpus      = 8  # GPUs per node
  islands   = 2  # NVLink islands per node (must divide gpus)
  rack_size = 8  # nodes per rack (default: the whole group)
}
