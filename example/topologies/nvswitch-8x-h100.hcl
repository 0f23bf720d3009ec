# An HGX H100 node: 8 GPUs on NVSwitches (one NVLink island), 4 per NUMA node.
# Every GPU has 18 NVLink 4 links to the switches (900 GB/s).
driver_version      = "550.54.15"
cuda_driver_version = 12040

gpu "gpu0" {
  index              = 0
  uuid               = "GPU-27ab272b-86ba-8db9-cf4b-a784fa16372b"
  model              = "NVIDIA H100 80GB HBM3"
  memory_mib         = 81559
  pci_bus_id         = "00000000:18:00.0"
  numa_node          = 0
  compute_capability = "9.0"
  power_limit_w      = 700
  pcie_generation    = 5
  pcie_width         = 16
}

gpu "gpu1" {
  index              = 1
  uuid               = "GPU-0239c456-b3ab-7e57-266f-c69fecb63c39"
  model              = "NVIDIA H100 80GB HBM3"
  memory_mib         = 81559
  pci_bus_id         = "00000000:2A:00.0"
  numa_node          = 0
  compute_capability = "9.0"
  power_limit_w      = 700
  pcie_generation    = 5
  pcie_width         = 16
}

gpu "gpu2" {
  index              = 2
  uuid               = "GPU-3a41703b-67e8-014d-092d-04eeeaea8f08"
  model              = "NVIDIA H100 80GB HBM3"
  memory_mib         = 81559
  pci_bus_id         = "00000000:3A:00.0"
  numa_node          = 0
  compute_capability = "9.0"
  power_limit_w      = 700
  pcie_generation    = 5
  pcie_width         = 16
}

gpu "gpu3" {
  index              = 3
  uuid               = "GPU-0ba8fb78-2cf8-2bb9-f017-c817bf4f2339"
  model              = "NVIDIA H100 80GB HBM3"
  memory_mib         = 81559
  pci_bus_id         = "00000000:5D:00.0"
  numa_node          = 0
  compute_capability = "9.0"
  power_limit_w      = 700
  pcie_generation    = 5
  pcie_width         = 16
}

gpu "gpu4" {
  index              = 4
  uuid               = "GPU-2d16108a-95a5-c184-c2b5-b38a7e9c20c8"
  model              = "NVIDIA H100 80GB HBM3"
  memory_mib         = 81559
  pci_bus_id         = "00000000:9A:00.0"
  numa_node          = 1
  compute_capability = "9.0"
  power_limit_w      = 700
  pcie_generation    = 5
  pcie_width         = 16
}

gpu "gpu5" {
  index              = 5
  uuid               = "GPU-d189c9b7-83ff-d4b7-bcd6-4c9038af8d07"
  model              = "NVIDIA H100 80GB HBM3"
  memory_mib         = 81559
  pci_bus_id         = "00000000:AB:00.0"
  numa_node          = 1
  compute_capability = "9.0"
  power_limit_w      = 700
  pcie_generation    = 5
  pcie_width         = 16
}

gpu "gpu6" {
  index              = 6
  uuid               = "GPU-b0bc9500-76b8-c9ff-d511-3af550291a24"
  model              = "NVIDIA H100 80GB HBM3"
  memory_mib         = 81559
  pci_bus_id         = "00000000:BA:00.0"
  numa_node          = 1
  compute_capability = "9.0"
  power_limit_w      = 700
  pcie_generation    = 5
  pcie_width         = 16
}

gpu "gpu7" {
  index              = 7
  uuid               = "GPU-056d6070-c2ea-8d47-449e-cef9cac72301"
  model              = "NVIDIA H100 80GB HBM3"
  memory_mib         = 81559
  pci_bus_id         = "00000000:DB:00.0"
  numa_node          = 1
  compute_capability = "9.0"
  power_limit_w      = 700
  pcie_generation    = 5
  pcie_width         = 16
}

nvswitch {
  links_per_gpu = 18
}
