// Package nvml is the GPU backend over NVIDIA's NVML (github.com/NVIDIA/go-nvml),
// the only package of the project that imports it.
//
// NVML is loaded with dlopen at the first call, so the binary runs on
// machines without the NVIDIA driver: there Init fails with
// ERROR_LIBRARY_NOT_FOUND and every scan reports gpu.ErrUnavailable (the
// plugin then reports no devices and logs why). No NVML function other
// than Init is ever called before Init succeeded, and calls that older
// drivers may lack (nvmlDeviceGetNumaNodeId, nvmlDeviceGetP2PStatus,
// nvmlDeviceGetNvLinkRemoteDeviceType) are looked up first: calling a
// missing symbol kills the process in the dynamic linker.
//
// go-nvml needs cgo; without it (or off Linux) this package builds a stub
// whose scans report gpu.ErrUnavailable.
//
// Topology: NVLink islands come from pairwise NVLink P2P status (which also
// holds through NVSwitches, where the remote end of every link is a switch)
// and from the remote PCI bus ids of direct links; the PCIe level from the
// common ancestor; the NUMA node from NVML where the GPU is a NUMA node
// itself, else from sysfs.
//
// Health: XID, double-bit ECC and GPU-unavailable events from an NVML event
// set; MIG-scoped XIDs are attributed to their MIG instance.
package nvml
