package topology

import (
	"fmt"
	"sort"

	"github.com/impact-sched/nomad-impact/plugin/units"
)

// Attribute is a typed device attribute, shaped like Nomad's (one of the
// value pointers set, Unit only for numbers), so that a Nomad adapter can
// copy api.Attribute into it field by field without this package importing
// nomad/api.
type Attribute struct {
	Float  *float64
	Int    *int64
	String *string
	Bool   *bool
	Unit   string
}

// Int returns an int attribute, with an optional unit.
func Int(v int64, unit string) Attribute { return Attribute{Int: &v, Unit: unit} }

// Float returns a float attribute, with an optional unit.
func Float(v float64, unit string) Attribute { return Attribute{Float: &v, Unit: unit} }

// String returns a string attribute.
func String(v string) Attribute { return Attribute{String: &v} }

// Bool returns a bool attribute.
func Bool(v bool) Attribute { return Attribute{Bool: &v} }

// Validate checks the rules Nomad's client enforces on device attributes:
// exactly one value, a unit only on numbers and only a known one. A
// fingerprint with one bad attribute makes Nomad kill the plugin.
func (a Attribute) Validate() error {
	n := 0
	for _, set := range []bool{a.Float != nil, a.Int != nil, a.String != nil, a.Bool != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("attribute must have exactly one value, has %d", n)
	}
	if a.Unit == "" {
		return nil
	}
	if a.Int == nil && a.Float == nil {
		return fmt.Errorf("unit %q on a non-numeric attribute", a.Unit)
	}
	if !units.Known(a.Unit) {
		return fmt.Errorf("unknown unit %q", a.Unit)
	}
	return nil
}

// Attribute names. See doc.go for what each one means.
const (
	AttrVersion       = "topology_version"
	AttrGroupBy       = "group_by"
	AttrIsland        = "island"
	AttrIslandSize    = "island_size"
	AttrNUMA          = "numa"
	AttrNVLink        = "nvlink"
	AttrNVSwitch      = "nvswitch"
	AttrNodeGPUs      = "node_gpus"
	AttrNodeIslands   = "node_islands"
	AttrNodeNUMANodes = "node_numa_nodes"

	instPrefix = "gpu."
	instIndex  = "index"
	instIsland = "island"
	instNUMA   = "numa"
	instParent = "parent"
)

// Version is the topology encoding published in AttrVersion.
const Version = 1

// InstanceAttr returns the name of a per-instance attribute:
// "gpu.<ID>.<field>".
func InstanceAttr(id, field string) string { return instPrefix + id + "." + field }

// Encode returns the topology attributes of one device group: the
// group-wide facts usable in constraints (island, numa, nvlink...), the
// node-wide facts, and one set of per-instance facts for each member, so
// that the union over a node's groups is its full topology.
func (t Topology) Encode(g Group, by GroupBy) map[string]Attribute {
	attrs := map[string]Attribute{
		AttrVersion:       Int(Version, ""),
		AttrGroupBy:       String(string(by)),
		AttrNVSwitch:      Bool(t.NVSwitch),
		AttrNodeGPUs:      Int(int64(t.physicalCount()), ""),
		AttrNodeIslands:   Int(int64(len(t.Islands)), ""),
		AttrNodeNUMANodes: Int(int64(len(t.NUMANodes())), ""),
		AttrNVLink:        Bool(t.connected(g.Members)),
	}
	if g.Island != Unknown {
		attrs[AttrIsland] = Int(int64(g.Island), "")
		attrs[AttrIslandSize] = Int(int64(t.islandPhysicalSize(g.Island)), "")
	}
	if g.NUMA != Unknown {
		attrs[AttrNUMA] = Int(int64(g.NUMA), "")
	}
	for _, id := range g.Members {
		p, ok := t.GPU(id)
		if !ok {
			continue
		}
		attrs[InstanceAttr(id, instIndex)] = Int(int64(p.Index), "")
		attrs[InstanceAttr(id, instIsland)] = Int(int64(p.Island), "")
		attrs[InstanceAttr(id, instNUMA)] = Int(int64(p.NUMA), "")
		if p.Parent != "" {
			attrs[InstanceAttr(id, instParent)] = String(p.Parent)
		}
	}
	return attrs
}

func (t Topology) physicalCount() int {
	n := 0
	for _, g := range t.GPUs {
		if g.Parent == "" {
			n++
		}
	}
	return n
}

func (t Topology) islandPhysicalSize(island int) int {
	n := 0
	for _, g := range t.GPUs {
		if g.Island == island && g.Parent == "" {
			n++
		}
	}
	if n == 0 { // a MIG-only view still has its parents' GPUs
		seen := map[string]bool{}
		for _, g := range t.GPUs {
			if g.Island == island && g.Parent != "" {
				seen[g.Parent] = true
			}
		}
		n = len(seen)
	}
	return n
}

// connected says all members are in one NVLink island (a single GPU is
// trivially connected).
func (t Topology) connected(ids []string) bool {
	return common(t, ids, func(p Placed) int { return p.Island }) != Unknown || len(ids) == 0
}

// DeviceGroup is a device group as found in a Nomad node's
// NodeResources.Devices (api.NodeDeviceResource), in plain types.
type DeviceGroup struct {
	Vendor     string
	Type       string
	Name       string
	Instances  []Instance
	Attributes map[string]Attribute
}

// Instance is one device instance (api.NodeDevice).
type Instance struct {
	ID                string
	Healthy           bool
	HealthDescription string
	// PCIBusID is Locality.PciBusID ("" when Locality is nil).
	PCIBusID string
}

// NodeGPU is one GPU instance of a node with its topology.
type NodeGPU struct {
	ID      string
	Group   string
	Model   string
	Healthy bool
	// HealthDescription says why it is unhealthy.
	HealthDescription string
	PCIBusID          string
	// Known says the instance came with topology attributes (published
	// by impact-gpu). GPUs from another plugin have Known false and
	// Index, Island and NUMA set to Unknown.
	Known  bool
	Index  int
	Island int
	NUMA   int
	// Parent is the physical GPU of a MIG instance.
	Parent string
}

// Node is a node's GPU topology as read back from its device attributes.
type Node struct {
	// GPUs by island, then index, then ID; GPUs with unknown topology last.
	GPUs []NodeGPU
	// Islands maps island ID to its instance IDs (same order as GPUs).
	Islands map[int][]string
	// NVSwitch is true when any group reported an NVSwitch node.
	NVSwitch bool
	// IslandSize is the number of physical GPUs per island.
	IslandSize map[int]int
}

// FromAttributes reads a node's GPU topology back from its device groups.
// Only groups of vendor "nvidia" and type "gpu" are read. Groups published
// by impact-gpu (they carry topology_version) must carry every per-instance
// attribute with the right type; anything else is an error naming the group
// and attribute. GPUs of groups without topology attributes are returned
// with Known false.
func FromAttributes(groups []DeviceGroup) (Node, error) {
	n := Node{Islands: map[int][]string{}, IslandSize: map[int]int{}}
	seen := map[string]string{}
	for _, g := range groups {
		if g.Vendor != "nvidia" || g.Type != "gpu" {
			continue
		}
		model := g.Name
		if a, ok := g.Attributes["model"]; ok && a.String != nil {
			model = *a.String
		}
		va, versioned := g.Attributes[AttrVersion]
		if versioned {
			if va.Int == nil {
				return Node{}, fmt.Errorf("device group %q: attribute %s must be an int", g.Name, AttrVersion)
			}
			if *va.Int != Version {
				return Node{}, fmt.Errorf("device group %q: unsupported %s %d (this reader knows %d)", g.Name, AttrVersion, *va.Int, Version)
			}
			if b, ok := g.Attributes[AttrNVSwitch]; ok {
				if b.Bool == nil {
					return Node{}, fmt.Errorf("device group %q: attribute %s must be a bool", g.Name, AttrNVSwitch)
				}
				n.NVSwitch = n.NVSwitch || *b.Bool
			}
		}
		for _, inst := range g.Instances {
			if inst.ID == "" {
				return Node{}, fmt.Errorf("device group %q: instance with an empty ID", g.Name)
			}
			if other, dup := seen[inst.ID]; dup {
				return Node{}, fmt.Errorf("device group %q: instance %s also in group %q", g.Name, inst.ID, other)
			}
			seen[inst.ID] = g.Name
			gpu := NodeGPU{ID: inst.ID, Group: g.Name, Model: model, Healthy: inst.Healthy,
				HealthDescription: inst.HealthDescription, PCIBusID: inst.PCIBusID,
				Index: Unknown, Island: Unknown, NUMA: Unknown}
			if versioned {
				var err error
				gpu.Known = true
				if gpu.Index, err = intAttr(g, InstanceAttr(inst.ID, instIndex)); err != nil {
					return Node{}, err
				}
				if gpu.Island, err = intAttr(g, InstanceAttr(inst.ID, instIsland)); err != nil {
					return Node{}, err
				}
				if gpu.NUMA, err = intAttr(g, InstanceAttr(inst.ID, instNUMA)); err != nil {
					return Node{}, err
				}
				if gpu.Island < 0 {
					return Node{}, fmt.Errorf("device group %q: attribute %s is negative", g.Name, InstanceAttr(inst.ID, instIsland))
				}
				if a, ok := g.Attributes[InstanceAttr(inst.ID, instParent)]; ok {
					if a.String == nil {
						return Node{}, fmt.Errorf("device group %q: attribute %s must be a string", g.Name, InstanceAttr(inst.ID, instParent))
					}
					gpu.Parent = *a.String
				}
			}
			n.GPUs = append(n.GPUs, gpu)
		}
	}
	sort.SliceStable(n.GPUs, func(i, j int) bool {
		a, b := n.GPUs[i], n.GPUs[j]
		if a.Known != b.Known {
			return a.Known
		}
		if a.Island != b.Island {
			return a.Island < b.Island
		}
		if a.Index != b.Index {
			return a.Index < b.Index
		}
		return a.ID < b.ID
	})
	physical := map[int]map[string]bool{}
	for _, g := range n.GPUs {
		if !g.Known {
			continue
		}
		n.Islands[g.Island] = append(n.Islands[g.Island], g.ID)
		if physical[g.Island] == nil {
			physical[g.Island] = map[string]bool{}
		}
		if g.Parent != "" {
			physical[g.Island][g.Parent] = true
		} else {
			physical[g.Island][g.ID] = true
		}
	}
	for id, set := range physical {
		n.IslandSize[id] = len(set)
	}
	return n, nil
}

func intAttr(g DeviceGroup, key string) (int, error) {
	a, ok := g.Attributes[key]
	if !ok {
		return 0, fmt.Errorf("device group %q: missing attribute %s", g.Name, key)
	}
	if a.Int == nil {
		return 0, fmt.Errorf("device group %q: attribute %s must be an int", g.Name, key)
	}
	return int(*a.Int), nil
}
