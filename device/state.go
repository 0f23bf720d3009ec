package device

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/impact-sched/nomad-impact/device/gpu"
	"github.com/impact-sched/nomad-impact/device/topology"
)

// Vendor and device type of every group this plugin reports.
const (
	Vendor     = "nvidia"
	DeviceType = "gpu"
)

// Hardware attribute names (topology attributes are in device/topology).
const (
	AttrModel             = "model"
	AttrMemory            = "memory"
	AttrComputeCapability = "compute_capability"
	AttrDriverVersion     = "driver_version"
	AttrCUDAVersion       = "cuda_version"
	AttrCUDADriverVersion = "cuda_driver_version"
	AttrPowerLimit        = "power_limit"
	AttrPCIeGeneration    = "pcie_generation"
	AttrPCIeWidth         = "pcie_width"
	AttrPCIBandwidth      = "pci_bandwidth"
	AttrNVLinkLinks       = "nvlink_links"
	AttrNVLinkBandwidth   = "nvlink_bandwidth"
	AttrMIGProfile        = "mig_profile"
	AttrMIGParentModel    = "mig_parent_model"
)

// instance is one device instance in a group.
type instance struct {
	ID       string
	Healthy  bool
	Desc     string
	PCIBusID string
}

// group is one device group, in plain types (converted to protobuf at the
// edge).
type group struct {
	Name       string
	Instances  []instance
	Attributes map[string]topology.Attribute
}

// devInfo is what the plugin needs to know about one instance ID.
type devInfo struct {
	// Device is the physical GPU (the parent of a MIG instance).
	Device gpu.Device
	// MIG is set for a MIG instance.
	MIG *gpu.MIGInstance
}

// snapshot is the node's device state at one moment.
type snapshot struct {
	groups []group
	topo   topology.Topology
	// byID maps every reported instance ID to its device.
	byID map[string]devInfo
	// present are the physical GPUs the last scan found (stats are read
	// for those).
	present map[string]bool
}

// nodeState is the input of buildSnapshot: every GPU ever seen (lost ones
// included, with their last known facts).
type nodeState struct {
	driverVersion     string
	cudaDriverVersion int
	nvswitch          bool
	devices           []gpu.Device
	links             []gpu.Link
	present           map[string]bool
}

// migModel is the device model a MIG instance is offered as.
func migModel(parent gpu.Device, m gpu.MIGInstance) string {
	return parent.Model + " MIG " + m.Profile
}

// buildSnapshot computes the device groups: topology, grouping, health and
// attributes. It is pure.
func buildSnapshot(st nodeState, h *health, s settings) (snapshot, error) {
	snap := snapshot{byID: map[string]devInfo{}, present: st.present}
	var tgpus []topology.GPU
	physical := map[string]bool{}
	for _, d := range st.devices {
		if s.ignored[d.UUID] {
			continue
		}
		physical[d.UUID] = true
		if d.MIGEnabled {
			for i := range d.MIG {
				m := d.MIG[i]
				if s.ignored[m.UUID] {
					continue
				}
				snap.byID[m.UUID] = devInfo{Device: d, MIG: &m}
				tgpus = append(tgpus, topology.GPU{ID: m.UUID, Index: d.Index, Model: migModel(d, m), NUMA: d.NUMANode, Parent: d.UUID})
			}
			// The parent is in the topology (MIG instances hang off
			// it) but is not offered itself.
			tgpus = append(tgpus, topology.GPU{ID: d.UUID, Index: d.Index, Model: "", NUMA: d.NUMANode})
			continue
		}
		snap.byID[d.UUID] = devInfo{Device: d}
		tgpus = append(tgpus, topology.GPU{ID: d.UUID, Index: d.Index, Model: d.Model, NUMA: d.NUMANode})
	}
	var links []topology.Link
	for _, l := range st.links {
		if physical[l.A] && physical[l.B] {
			links = append(links, topology.Link{A: l.A, B: l.B, NVLinks: l.NVLinks, NVLinkP2P: l.NVLinkP2P})
		}
	}
	topo, err := topology.Build(tgpus, links, st.nvswitch)
	if err != nil {
		return snapshot{}, fmt.Errorf("topology: %w", err)
	}
	snap.topo = topo
	for _, g := range topo.Groups(s.groupBy) {
		if g.Model == "" { // MIG parents
			continue
		}
		grp := group{Name: g.Name, Attributes: topo.Encode(g, s.groupBy)}
		var devs []devInfo
		for _, id := range g.Members {
			info := snap.byID[id]
			devs = append(devs, info)
			parent := ""
			if info.MIG != nil {
				parent = info.Device.UUID
			}
			healthy, desc := h.status(id, parent)
			grp.Instances = append(grp.Instances, instance{ID: id, Healthy: healthy, Desc: desc, PCIBusID: info.Device.PCIBusID})
		}
		for k, v := range hardwareAttributes(g.Model, devs, st) {
			grp.Attributes[k] = v
		}
		for k, a := range grp.Attributes {
			if err := a.Validate(); err != nil {
				return snapshot{}, fmt.Errorf("device group %q: attribute %s: %w", g.Name, k, err)
			}
		}
		snap.groups = append(snap.groups, grp)
	}
	return snap, nil
}

// hardwareAttributes are the group-wide facts users put in constraints.
// All members share a model; memory is the smallest member's (a
// constraint on it must hold for whichever instance Nomad picks), the rest
// comes from the first member.
func hardwareAttributes(model string, devs []devInfo, st nodeState) map[string]topology.Attribute {
	attrs := map[string]topology.Attribute{AttrModel: topology.String(model)}
	if len(devs) == 0 {
		return attrs
	}
	first := devs[0].Device
	var mem uint64
	for i, d := range devs {
		m := d.Device.MemoryMiB
		if d.MIG != nil {
			m = d.MIG.MemoryMiB
		}
		if i == 0 || m < mem {
			mem = m
		}
	}
	attrs[AttrMemory] = topology.Int(int64(mem), "MiB")
	if devs[0].MIG != nil {
		attrs[AttrMIGProfile] = topology.String(devs[0].MIG.Profile)
		attrs[AttrMIGParentModel] = topology.String(first.Model)
	}
	if cc, err := strconv.ParseFloat(first.ComputeCapability, 64); err == nil && strings.Contains(first.ComputeCapability, ".") {
		attrs[AttrComputeCapability] = topology.Float(cc, "")
	}
	if st.driverVersion != "" {
		attrs[AttrDriverVersion] = topology.String(st.driverVersion)
	}
	if st.cudaDriverVersion > 0 {
		inv := gpu.Inventory{CUDADriverVersion: st.cudaDriverVersion}
		attrs[AttrCUDAVersion] = topology.String(inv.CUDAVersion())
		attrs[AttrCUDADriverVersion] = topology.Int(int64(st.cudaDriverVersion), "")
	}
	if first.PowerLimitW > 0 {
		attrs[AttrPowerLimit] = topology.Int(int64(first.PowerLimitW), "W")
	}
	if first.PCIeGeneration > 0 {
		attrs[AttrPCIeGeneration] = topology.Int(int64(first.PCIeGeneration), "")
	}
	if first.PCIeWidth > 0 {
		attrs[AttrPCIeWidth] = topology.Int(int64(first.PCIeWidth), "")
	}
	if bw := gpu.PCIeBandwidthMBps(first.PCIeGeneration, first.PCIeWidth); bw > 0 {
		attrs[AttrPCIBandwidth] = topology.Int(int64(bw), "MB/s")
	}
	attrs[AttrNVLinkLinks] = topology.Int(int64(first.NVLinkLinks), "")
	if first.NVLinkLinks == 0 || first.NVLinkBandwidthGBps > 0 {
		// Links of a GPU whose generation is unknown have no known speed.
		attrs[AttrNVLinkBandwidth] = topology.Int(int64(first.NVLinkBandwidthGBps), "GB/s")
	}
	return attrs
}

// sortedGroupNames is for logs.
func sortedGroupNames(gs []group) []string {
	out := make([]string, 0, len(gs))
	for _, g := range gs {
		out = append(out, fmt.Sprintf("%s(%d)", g.Name, len(g.Instances)))
	}
	sort.Strings(out)
	return out
}
