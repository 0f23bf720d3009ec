// Package topology computes a node's GPU topology (NVLink islands, NUMA
// locality), cuts it into Nomad device groups, and encodes it as typed
// device attributes that the impact scheduler reads back with
// FromAttributes. It is pure: no I/O, no NVML, no Nomad imports.
//
// # Islands
//
// An NVLink island is a maximal set of GPUs that reach each other
// peer-to-peer over NVLink, directly or through NVSwitches (union-find over
// the pairwise NVLink P2P facts). A GPU without NVLink is an island of its
// own; an HGX/DGX NVSwitch node is one island. Islands are numbered 0..n-1
// in the order of their lowest GPU index, so the numbers are stable as long
// as the hardware is. A MIG instance belongs to its parent's island.
//
// # Device groups
//
// Nomad gives all instances of one `device` block from one device group
// (vendor/type/name), so the group_by choice decides what Nomad alone
// guarantees:
//
//	model (default)   name "<model>", like Nomad's own NVIDIA plugin: any
//	                  count up to the node's GPUs of the model places; the
//	                  impact scheduler pins the instances it chose
//	island            name "<model> (island N)": a request of up to an
//	                  island's size gets GPUs of one island, a larger one
//	                  never places
//	numa              name "<model> (numa N)", or "(numa unknown)"
//
// GPUs of different models never share a group. MIG instances are grouped
// as models of their own ("<parent model> MIG <profile>").
//
// # Attributes
//
// Constraint literals in Nomad are typed (an int attribute 1 matches value
// "1", a string "1" never does), so every numeric fact is an int attribute.
// Group-wide attributes, usable in constraints and affinities as
// ${device.attr.<name>}:
//
//	topology_version  int     encoding version, currently 1
//	group_by          string  "island", "numa" or "model"
//	island            int     island of every GPU in the group (absent if
//	                          the group spans several islands)
//	island_size       int     physical GPUs in that island (with island)
//	numa              int     NUMA node of every GPU in the group (absent
//	                          if mixed or unknown)
//	nvlink            bool    all GPUs of the group are in one island
//	nvswitch          bool    the node's NVLinks go through NVSwitches
//	node_gpus         int     physical GPUs on the node
//	node_islands      int     islands on the node
//	node_numa_nodes   int     distinct known NUMA nodes of the node's GPUs
//
// Per-instance attributes, one set per instance of the group, keyed by the
// instance ID (GPU or MIG UUID); together over all groups of a node they
// are the node's full topology:
//
//	gpu.<ID>.index    int     NVML index (a MIG instance: its parent's)
//	gpu.<ID>.island   int     island
//	gpu.<ID>.numa     int     NUMA node, -1 when unknown
//	gpu.<ID>.parent   string  MIG instances only: the parent GPU UUID
//
// The instance's PCI bus id is in its locality (Locality.PciBusID), not in
// an attribute. The device package adds the hardware attributes (model,
// memory, compute_capability, driver_version, cuda_version, power_limit,
// pci_bandwidth, pcie_generation, pcie_width, nvlink_bandwidth,
// nvlink_links, mig_profile); see device/README.md.
//
// FromAttributes takes a node's device groups as plain structs (copied from
// api.Node.NodeResources.Devices: Vendor, Type, Name, Instances[].ID,
// Healthy, HealthDescription, Locality.PciBusID, Attributes) and returns the
// GPUs with their islands; groups with topology_version must be complete
// and well typed, and anything wrong is an error naming the group and
// attribute.
package topology
