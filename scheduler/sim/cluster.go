package sim

import (
	"errors"
	"fmt"

	"github.com/hashicorp/hcl/v2"

	"github.com/impact-sched/nomad-impact/internal/hclfile"
)

// NodeSpec describes one simulated node.
type NodeSpec struct {
	Name    string
	GPUs    int
	Islands int // NVLink islands; GPUs split evenly, island of GPU g is g / (GPUs/Islands)
	Rack    string
}

// ClusterSpec is the simulated cluster. All GPUs are healthy for the whole
// run (failures are not modelled).
type ClusterSpec struct {
	Nodes []NodeSpec
}

// GPUs is the cluster's GPU count.
func (c ClusterSpec) GPUs() int {
	n := 0
	for _, s := range c.Nodes {
		n += s.GPUs
	}
	return n
}

// MaxNodeGPUs is the widest node, which decides how jobs become gangs.
func (c ClusterSpec) MaxNodeGPUs() int {
	m := 0
	for _, s := range c.Nodes {
		m = max(m, s.GPUs)
	}
	return m
}

// Validate checks the spec for what the simulator relies on.
func (c ClusterSpec) Validate() error {
	if len(c.Nodes) == 0 {
		return errors.New("cluster has no nodes")
	}
	names := make(map[string]bool, len(c.Nodes))
	for _, n := range c.Nodes {
		if n.GPUs <= 0 {
			return fmt.Errorf("node %q: gpus must be at least 1, got %d", n.Name, n.GPUs)
		}
		if n.Islands <= 0 || n.GPUs%n.Islands != 0 {
			return fmt.Errorf("node %q: islands must divide its %d GPUs evenly, got %d", n.Name, n.GPUs, n.Islands)
		}
		if names[n.Name] {
			return fmt.Errorf("duplicate node name %q", n.Name)
		}
		names[n.Name] = true
	}
	return nil
}

// UniformCluster builds nodes x gpusPerNode GPUs with islandsPerNode NVLink
// islands per node and rackSize nodes per rack (0: one rack).
func UniformCluster(nodes, gpusPerNode, islandsPerNode, rackSize int) (ClusterSpec, error) {
	if nodes <= 0 {
		return ClusterSpec{}, fmt.Errorf("nodes must be at least 1, got %d", nodes)
	}
	if rackSize <= 0 {
		rackSize = nodes
	}
	var c ClusterSpec
	for i := 0; i < nodes; i++ {
		c.Nodes = append(c.Nodes, NodeSpec{
			Name:    fmt.Sprintf("node-%03d", i),
			GPUs:    gpusPerNode,
			Islands: islandsPerNode,
			Rack:    fmt.Sprintf("rack-%02d", i/rackSize),
		})
	}
	return c, c.Validate()
}

// clusterFile is the HCL layout of a simulated cluster:
//
//	node_group "dgx" {
//	  count     = 64
//	  gpus      = 8
//	  islands   = 2
//	  rack_size = 8
//	}
type clusterFile struct {
	Groups []nodeGroupFile `hcl:"node_group,block"`
}

type nodeGroupFile struct {
	Name     string   `hcl:"name,label"`
	Count    int      `hcl:"count"`
	GPUs     int      `hcl:"gpus"`
	Islands  *int     `hcl:"islands,optional"`
	RackSize *int     `hcl:"rack_size,optional"`
	Body     hcl.Body `hcl:",body"`
}

// ParseClusterHCL reads a cluster file (see example/sim/cluster.hcl).
// Errors name the file, line and attribute.
func ParseClusterHCL(src []byte, filename string) (ClusterSpec, error) {
	var f clusterFile
	if _, err := hclfile.Decode(src, filename, &f); err != nil {
		return ClusterSpec{}, fmt.Errorf("cluster file: %w", err)
	}
	if len(f.Groups) == 0 {
		return ClusterSpec{}, fmt.Errorf("cluster file %s: no node_group block", filename)
	}
	var c ClusterSpec
	rackBase := 0
	for _, g := range f.Groups {
		key := fmt.Sprintf("node_group %q", g.Name)
		islands, rack := 1, 0
		if g.Islands != nil {
			islands = *g.Islands
		}
		if g.RackSize != nil {
			rack = *g.RackSize
		}
		for _, a := range []struct {
			name string
			v    int
			set  bool
		}{{"count", g.Count, true}, {"gpus", g.GPUs, true}, {"islands", islands, g.Islands != nil}, {"rack_size", rack, g.RackSize != nil}} {
			if a.set && a.v <= 0 {
				return ClusterSpec{}, hclfile.Errorf(g.Body, key, a.name, "must be at least 1, got %d", a.v)
			}
		}
		if g.GPUs%islands != 0 {
			return ClusterSpec{}, hclfile.Errorf(g.Body, key, "islands", "(%d) must divide gpus (%d) evenly", islands, g.GPUs)
		}
		if rack == 0 {
			rack = g.Count
		}
		racks := 0
		for i := 0; i < g.Count; i++ {
			r := i / rack
			racks = max(racks, r+1)
			c.Nodes = append(c.Nodes, NodeSpec{
				Name:    fmt.Sprintf("%s-%03d", g.Name, i),
				GPUs:    g.GPUs,
				Islands: islands,
				Rack:    fmt.Sprintf("rack-%02d", rackBase+r),
			})
		}
		rackBase += racks
	}
	if err := c.Validate(); err != nil {
		return ClusterSpec{}, fmt.Errorf("cluster file %s: %w", filename, err)
	}
	return c, nil
}
