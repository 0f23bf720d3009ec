# A 4-GPU A100 80GB NVSwitch board where two GPUs are MIG-partitioned:
# gpu0 into seven 1g.10gb instances, gpu1 into two 3g.40gb instances;
# gpu2 and gpu3 are whole GPUs. MIG instances are offered as their own
# models ("NVIDIA A100-SXM4-80GB MIG 1g.10gb", ...), whole GPUs as usual.
driver_version      = "550.54.15"
cuda_driver_version = 12040

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

  mig "1g.10gb" {
    uuid             = "MIG-a4f86984-2e17-dd1d-6f18-37b4125ba52a"
    memory_mib       = 9728
    gpu_instance     = 7
    compute_instance = 0
  }

  mig "1g.10gb" {
    uuid             = "MIG-7432ceee-f703-77b6-344f-9ae75b5afdee"
    memory_mib       = 9728
    gpu_instance     = 8
    compute_instance = 0
  }

  mig "1g.10gb" {
    uuid             = "MIG-0a65c9e8-0839-5442-293e-db3043109596"
    memory_mib       = 9728
    gpu_instance     = 9
    compute_instance = 0
  }

  mig "1g.10gb" {
    uuid             = "MIG-66cacedc-a42e-aa1a-5516-de5201a7a683"
    memory_mib       = 9728
    gpu_instance     = 10
    compute_instance = 0
  }

  mig "1g.10gb" {
    uuid             = "MIG-74c966c9-0aa1-115f-7c3e-22175848dc4d"
    memory_mib       = 9728
    gpu_instance     = 11
    compute_instance = 0
  }

  mig "1g.10gb" {
    uuid             = "MIG-ee8fd150-25b6-2001-da7b-4de00b5224c4"
    memory_mib       = 9728
    gpu_instance     = 12
    compute_instance = 0
  }

  mig "1g.10gb" {
    uuid             = "MIG-23509164-b2c8-a117-71ce-bfc5294b2b88"
    memory_mib       = 9728
    gpu_instance     = 13
    compute_instance = 0
  }
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

  mig "3g.40gb" {
    uuid             = "MIG-f11954ef-5b90-f4ff-f128-710682eec6d3"
    memory_mib       = 40192
    gpu_instance     = 1
    compute_instance = 0
  }

  mig "3g.40gb" {
    uuid             = "MIG-0179bede-2b5d-f2ca-fee8-42517df7cc38"
    memory_mib       = 40192
    gpu_instance     = 2
    compute_instance = 0
  }
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

nvswitch {
  links_per_gpu = 12
}
