package sim

import (
	"errors"
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/gocty"
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
var clusterSchema = &hcl.BodySchema{
	Blocks: []hcl.BlockHeaderSchema{{Type: "node_group", LabelNames: []string{"name"}}},
}

// groupFields are a node_group's attributes: required ones first.
var groupFields = map[string]bool{"count": true, "gpus": true, "islands": false, "rack_size": false}

// ParseClusterHCL reads a cluster file (see example/sim/cluster.hcl).
// Errors name the file, line and attribute.
func ParseClusterHCL(src []byte, filename string) (ClusterSpec, error) {
	p := hclparse.NewParser()
	f, diags := p.ParseHCL(src, filename)
	if diags.HasErrors() {
		return ClusterSpec{}, fmt.Errorf("cluster file: %w", diags)
	}
	content, diags := f.Body.Content(clusterSchema)
	if diags.HasErrors() {
		return ClusterSpec{}, fmt.Errorf("cluster file: %w", diags)
	}
	if len(content.Blocks) == 0 {
		return ClusterSpec{}, fmt.Errorf("cluster file %s: no node_group block", filename)
	}
	var c ClusterSpec
	rackBase := 0
	for _, blk := range content.Blocks {
		g := struct {
			Name string
			Body hcl.Body
		}{blk.Labels[0], blk.Body}
		attrs, diags := g.Body.JustAttributes()
		if diags.HasErrors() {
			return ClusterSpec{}, fmt.Errorf("cluster file: node_group %q: %w", g.Name, diags)
		}
		vals := map[string]int{"islands": 1, "rack_size": 0}
		for name, a := range attrs {
			if _, ok := groupFields[name]; !ok {
				return ClusterSpec{}, fmt.Errorf("%s: node_group %q: unknown attribute %q (want count, gpus, islands, rack_size)", a.Range, g.Name, name)
			}
			var v int
			cv, diags := a.Expr.Value(nil)
			if diags.HasErrors() || cv.Type() != cty.Number || gocty.FromCtyValue(cv, &v) != nil {
				return ClusterSpec{}, fmt.Errorf("%s: node_group %q: %s must be a whole number", a.Range, g.Name, name)
			}
			if v <= 0 {
				return ClusterSpec{}, fmt.Errorf("%s: node_group %q: %s must be at least 1, got %d", a.Range, g.Name, name, v)
			}
			vals[name] = v
		}
		for name, required := range groupFields {
			if _, ok := attrs[name]; required && !ok {
				return ClusterSpec{}, fmt.Errorf("%s: node_group %q: missing required attribute %q", g.Body.MissingItemRange(), g.Name, name)
			}
		}
		count, gpus, islands, rack := vals["count"], vals["gpus"], vals["islands"], vals["rack_size"]
		if gpus%islands != 0 {
			return ClusterSpec{}, fmt.Errorf("%s: node_group %q: islands (%d) must divide gpus (%d) evenly", attrs["islands"].Range, g.Name, islands, gpus)
		}
		if rack == 0 {
			rack = count
		}
		racks := 0
		for i := 0; i < count; i++ {
			r := i / rack
			racks = max(racks, r+1)
			c.Nodes = append(c.Nodes, NodeSpec{
				Name:    fmt.Sprintf("%s-%03d", g.Name, i),
				GPUs:    gpus,
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
