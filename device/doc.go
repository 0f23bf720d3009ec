// Package device is impact-gpu, the Nomad device plugin for NVIDIA GPUs:
// it fingerprints the node's GPUs and their topology, reports their health
// and stats, and tells the client how to give a task its GPUs.
//
// # Design
//
// A backend (device/gpu: NVML, or a fake topology file) produces plain
// structs. A monitor scans it every fingerprint_period and applies health
// events as they arrive (XIDs, ECC errors, GPUs lost or back); each change
// rebuilds the device groups (buildSnapshot, pure), and the Fingerprint
// stream sends a full new set only when the groups differ. Stats and
// Reserve read the same snapshot. Nothing touches NVML until an RPC needs
// it, because Nomad also runs the plugin in processes that only validate
// the config. The monitor owns the backend: a different config stops it
// (closing the backend) and open streams carry on with the next one;
// after Shutdown they end with Unavailable.
//
// # Device groups
//
// Vendor "nvidia", type "gpu", one group per model (the default), NVLink
// island or NUMA node (config group_by; see device/topology). Nomad takes
// all instances of one device block from a single group, so the grouping
// decides which asks can be placed at all. Which to choose:
//
//   - "model" (default), with the impact scheduler: any count up to the
//     node's GPUs of one model places (a whole-node count = 8 on a node of
//     two 4-GPU islands included). The scheduler reads the per-instance
//     topology attributes, chooses the GPUs itself (one NVLink island where
//     the job asks impact_topology = "nvlink", best fit so 2 + 2 + 4 share
//     an 8-GPU node) and pins exactly those instances on admission.
//   - "island", for clusters without the impact scheduler: Nomad alone
//     then lands an ask of up to an island's size in one island; an ask
//     larger than an island never places, and GPUs free in two islands
//     cannot serve one ask. The impact scheduler knows this rule and never
//     admits such an ask (its explanation names group_by).
//   - "numa", for PCIe-only nodes without the impact scheduler where NUMA
//     locality matters: an ask of up to a NUMA node's GPUs stays on one.
//
// On an NVSwitch node (one island) "model" and "island" coincide. Instance
// IDs are GPU UUIDs (MIG instances: MIG UUIDs, grouped as "<model> MIG
// <profile>" whatever group_by says, so one block never mixes whole GPUs
// and MIG instances); locality carries the PCI bus id.
//
// # Attributes
//
// Hardware attributes (besides the topology ones of device/topology):
//
//	model                string  product name (the group name adds the island/NUMA suffix)
//	memory               int     MiB; the smallest member's
//	compute_capability   float   e.g. 9.0
//	driver_version       string  e.g. "550.54.15"
//	cuda_version         string  e.g. "12.4" (match with version/regexp operators)
//	cuda_driver_version  int     NVML encoding, e.g. 12040
//	power_limit          int     W, power management limit
//	pcie_generation      int     maximum link generation
//	pcie_width           int     maximum link width (lanes)
//	pci_bandwidth        int     MB/s, one direction, generation x width
//	nvlink_links         int     active NVLink links per GPU
//	nvlink_bandwidth     int     GB/s, bidirectional, per GPU
//	mig_profile          string  MIG groups only, e.g. "1g.10gb"
//	mig_parent_model     string  MIG groups only
//
// Facts the backend cannot read are left out rather than guessed.
//
// # Health
//
// A critical XID (anything but the application XIDs 13, 31, 43, 45, 68,
// 109) or an uncorrectable ECC error marks the GPU unhealthy with a
// description; a GPU that disappears stays in the fingerprint, unhealthy,
// so Nomad stops placing on it; a GPU that comes back (reset) or that the
// backend reports recovered is healthy again. MIG instances follow their
// parent. Health lives in memory: a restarted plugin starts healthy.
//
// # Stats
//
// Per physical GPU: "GPU utilization" (%, the summary), "Memory
// utilization" (%), "Memory state" (MiB used/total), "Power usage" (W,
// over the power limit), "Temperature" (C), "ECC errors corrected" and
// "ECC errors uncorrected" (#). Unreadable values are "N/A".
//
// # Reserve
//
// NVIDIA_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES list the UUIDs island by
// island, following NVLink links inside an island (Nomad hands them over in
// arbitrary order). Nomad reserves each device block apart and merges the
// variables last-wins, so a task with several GPU device blocks would see
// only the last block's GPUs there: each reservation also sets
// IMPACT_GPU_BLOCK_<first UUID> (BlockEnvKey) to its list, and impact-exec
// sets both visibility variables to the union of those (other drivers
// leave the last block's list; the impact scheduler warns when it admits
// such a task). /dev/nvidia<minor>, /dev/nvidiactl, /dev/nvidia-uvm and
// /dev/nvidia-uvm-tools are passed when they exist. A MIG instance also
// gets the capability nodes of its GPU and compute instance,
// /dev/nvidia-caps/nvidia-cap<N> with N the "DeviceFileMinor" of
// /proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<GI>/access and
// .../gi<GI>/ci<CI>/access (not the MIG config/monitor capabilities, which
// tasks do not need); a missing proc file or node is logged and left out,
// a malformed one fails the reservation naming the file. Unknown or
// repeated IDs are an InvalidArgument error naming them.
//
// # Running it
//
// Nomad starts the binary from its plugin_dir (see example/agent.hcl); run
// by hand it prints how to install it and exits 1.
package device
