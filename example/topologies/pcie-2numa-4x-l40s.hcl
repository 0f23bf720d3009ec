# A PCIe-only inference node: 4 L40S GPUs, no NVLink, two per NUMA node.
# Every GPU is an island of its own; group_by = "numa" keeps a 2-GPU
# request on one socket.
driver_version      = "550.54.15"
cuda_driver_version = 12040

gpu "gpu0" {
  index              = 0
  uuid               = "GPU-ba271350-d212-7d6c-833c-07ac26660703"
  model              = "NVIDIA L40S"
  memory_mib         = 46068
  pci_bus_id         = "00000000:17:00.0"
  numa_node          = 0
  compute_capability = "8.9"
  power_limit_w      = 350
  pcie_generation    = 4
  pcie_width         = 16
}

gpu "gpu1" {
  index              = 1
  uuid               = "GPU-bcdd8047-1792-8d01-2165-908d9b83762d"
  model              = "NVIDIA L40S"
  memory_mib         = 46068
  pci_bus_id         = "00000000:31:00.0"
  numa_node          = 0
  compute_capability = "8.9"
  power_limit_w      = 350
  pcie_generation    = 4
  pcie_width         = 16
}

gpu "gpu2" {
  index              = 2
  uuid               = "GPU-bea41c86-36bd-99d7-24c8-7bf52052c2de"
  model              = "NVIDIA L40S"
  memory_mib         = 46068
  pci_bus_id         = "00000000:B1:00.0"
  numa_node          = 1
  compute_capability = "8.9"
  power_limit_w      = 350
  pcie_generation    = 4
  pcie_width         = 16
}

gpu "gpu3" {
  index              = 3
  uuid               = "GPU-3f00e1e3-1225-e01c-e4da-1282c9cbe22d"
  model              = "NVIDIA L40S"
  memory_mib         = 46068
  pci_bus_id         = "00000000:CA:00.0"
  numa_node          = 1
  compute_capability = "8.9"
  power_limit_w      = 350
  pcie_generation    = 4
  pcie_width         = 16
}
