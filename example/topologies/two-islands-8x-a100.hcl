# An 8-GPU node whose NVLinks form two 4-GPU islands (gpu0-3 and gpu4-7),
# one per NUMA node, without NVSwitch: every GPU has 4 NVLink 3 links to each
# of its 3 island peers (12 links, 600 GB/s). Across islands GPUs meet over PCIe only.
# Events can be injected by appending lines to two-islands.ctl (see device/gpu/fake).
driver_version      = "550.54.15"
cuda_driver_version = 12040
control_file        = "two-islands.ctl"

gpu "gpu0" {
  index              = 0
  uuid               = "GPU-c5abe051-2342-3bac-254d-7342bc636e3b"
  model              = "NVIDIA A100-SXM4-80GB"
  memory_mib         = 81920
  pci_bus_id         = "00000000:07:00.0"
  numa_node          = 0
  compute_capability = "8.0"
  power_limit_w      = 400
  pcie_generation    = 4
  pcie_width         = 16
}

gpu "gpu1" {
  index              = 1
  uuid               = "GPU-45d200ea-6b70-1952-1687-a9fab9fc72f8"
  model              = "NVIDIA A100-SXM4-80GB"
  memory_mib         = 81920
  pci_bus_id         = "00000000:0F:00.0"
  numa_node          = 0
  compute_capability = "8.0"
  power_limit_w      = 400
  pcie_generation    = 4
  pcie_width         = 16
}

gpu "gpu2" {
  index              = 2
  uuid               = "GPU-897363ee-c0ec-4e62-78d8-2ed31de461b2"
  model              = "NVIDIA A100-SXM4-80GB"
  memory_mib         = 81920
  pci_bus_id         = "00000000:47:00.0"
  numa_node          = 0
  compute_capability = "8.0"
  power_limit_w      = 400
  pcie_generation    = 4
  pcie_width         = 16
}

gpu "gpu3" {
  index              = 3
  uuid               = "GPU-2cfd228b-3ba1-854c-d23e-0b25a68381e2"
  model              = "NVIDIA A100-SXM4-80GB"
  memory_mib         = 81920
  pci_bus_id         = "00000000:4E:00.0"
  numa_node          = 0
  compute_capability = "8.0"
  power_limit_w      = 400
  pcie_generation    = 4
  pcie_width         = 16
}

gpu "gpu4" {
  index              = 4
  uuid               = "GPU-95481809-6d37-87b7-bb06-42f1e19812ab"
  model              = "NVIDIA A100-SXM4-80GB"
  memory_mib         = 81920
  pci_bus_id         = "00000000:87:00.0"
  numa_node          = 1
  compute_capability = "8.0"
  power_limit_w      = 400
  pcie_generation    = 4
  pcie_width         = 16
}

gpu "gpu5" {
  index              = 5
  uuid               = "GPU-fabd7575-d325-17aa-a8d9-c0121ecffbac"
  model              = "NVIDIA A100-SXM4-80GB"
  memory_mib         = 81920
  pci_bus_id         = "00000000:90:00.0"
  numa_node          = 1
  compute_capability = "8.0"
  power_limit_w      = 400
  pcie_generation    = 4
  pcie_width         = 16
}

gpu "gpu6" {
  index              = 6
  uuid               = "GPU-5b28945f-f4d3-aba5-bff7-b86b3e1f7e0f"
  model              = "NVIDIA A100-SXM4-80GB"
  memory_mib         = 81920
  pci_bus_id         = "00000000:B7:00.0"
  numa_node          = 1
  compute_capability = "8.0"
  power_limit_w      = 400
  pcie_generation    = 4
  pcie_width         = 16
}

gpu "gpu7" {
  index              = 7
  uuid               = "GPU-acdb88c9-aa7a-387b-35b0-1f98def96006"
  model              = "NVIDIA A100-SXM4-80GB"
  memory_mib         = 81920
  pci_bus_id         = "00000000:BD:00.0"
  numa_node          = 1
  compute_capability = "8.0"
  power_limit_w      = 400
  pcie_generation    = 4
  pcie_width         = 16
}

nvlink {
  gpus  = ["gpu0", "gpu1", "gpu2", "gpu3"]
  links = 4
}

nvlink {
  gpus  = ["gpu4", "gpu5", "gpu6", "gpu7"]
  links = 4
}
