// Package device is impact-gpu, the Nomad device plugin for NVIDIA GPUs:
// it fingerprints the node's GPUs and their topology, reports their health
// and stats, and tells the client how to give a task its GPUs. README.md in
// this directory is the reference for operators and job authors: device
// groups and which group_by to choose, attributes, health, stats, what a
// reservation gives a task, running it. The binary is cmd/impact-gpu.
//
// # Layout
//
//	device.go       Plugin: the device plugin service, its RPCs, config changes, Shutdown
//	config.go       the plugin block's config {} and its defaults
//	monitor.go      monitor: owns the backend; scans, health events, snapshots
//	state.go        the snapshot: device groups in plain types (buildSnapshot)
//	fingerprint.go  groups -> the Fingerprint wire message
//	health.go       health: per-device health from events and scans (pure)
//	stats.go        Stats from the backend, per physical GPU
//	reserve.go      Reserve: visibility variables, device nodes, MIG capabilities
//	gpu/            the backends: NVML (gpu/nvml) and a fake topology file (gpu/fake)
//	topology/       islands, NUMA, group_by, and the topology attributes
//
// # Rules
//
//   - A backend produces plain structs; a change rebuilds the device groups
//     with buildSnapshot (pure), and the Fingerprint stream sends a full new
//     set only when the groups differ. Stats and Reserve read the same
//     snapshot.
//   - Nothing touches NVML until an RPC needs it: Nomad also runs the plugin
//     in processes that only validate the config.
//   - The monitor owns the backend: a different config stops it (closing the
//     backend) and open streams carry on with the next one; after Shutdown
//     they end with Unavailable.
//   - Facts the backend cannot read are left out rather than guessed.
//   - Health lives in memory: a restarted plugin starts healthy.
package device
