package nomadfake

import (
	"fmt"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/device/topology"
)

// TopologyNode builds a ready client node in pool whose GPUs (islands x
// perIsland, model "H100") are published as impact-gpu does: one device
// group per NVLink island, with the topology attributes of
// device/topology. GPU IDs are "<name>-gpu<i>".
func TopologyNode(id, name, pool string, islands, perIsland int) (*api.Node, error) {
	return TopologyNodeBy(id, name, pool, islands, perIsland, topology.ByIsland)
}

// TopologyNodeBy is TopologyNode with impact-gpu's group_by setting: by
// island (one device group per island), by model (one group holding every
// GPU, as Nomad's own NVIDIA plugin makes) or by NUMA node.
func TopologyNodeBy(id, name, pool string, islands, perIsland int, by topology.GroupBy) (*api.Node, error) {
	var gpus []topology.GPU
	var links []topology.Link
	for i := 0; i < islands*perIsland; i++ {
		gpus = append(gpus, topology.GPU{ID: fmt.Sprintf("%s-gpu%d", name, i), Index: i, Model: "H100", NUMA: i / perIsland})
	}
	for a := 0; a < len(gpus); a++ {
		for b := a + 1; b < len(gpus); b++ {
			same := a/perIsland == b/perIsland
			links = append(links, topology.Link{A: gpus[a].ID, B: gpus[b].ID, NVLinkP2P: same, NVLinks: map[bool]int{true: 4}[same]})
		}
	}
	t, err := topology.Build(gpus, links, false)
	if err != nil {
		return nil, fmt.Errorf("topology for %s: %w", name, err)
	}
	n := GPUNode(id, name, pool, nil, nil)
	for _, g := range t.Groups(by) {
		dg := &api.NodeDeviceResource{Vendor: "nvidia", Type: "gpu", Name: g.Name, Attributes: map[string]*api.Attribute{}}
		for k, a := range t.Encode(g, by) {
			dg.Attributes[k] = &api.Attribute{FloatVal: a.Float, IntVal: a.Int, StringVal: a.String, BoolVal: a.Bool, Unit: a.Unit}
		}
		for _, m := range g.Members {
			dg.Instances = append(dg.Instances, &api.NodeDevice{ID: m, Healthy: true})
		}
		n.NodeResources.Devices = append(n.NodeResources.Devices, dg)
	}
	return n, nil
}
