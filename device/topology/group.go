package topology

import (
	"fmt"
	"sort"
)

// GroupBy says how GPUs are cut into Nomad device groups. Nomad gives every
// instance of one `device` block from a single group, so the grouping is
// what makes Nomad's own placement topology-aware.
type GroupBy string

// Grouping choices.
const (
	// ByIsland makes one group per NVLink island (and model): a request
	// for up to an island's size lands inside one island, and a larger
	// one never places (Nomad does not span groups).
	ByIsland GroupBy = "island"
	// ByNUMA makes one group per NUMA node (and model).
	ByNUMA GroupBy = "numa"
	// ByModel makes one group per model, like Nomad's own NVIDIA plugin:
	// any count up to the node's GPUs of that model places; which GPUs is
	// Nomad's choice unless the job pins instance IDs (the impact
	// scheduler pins the GPUs it chose). The default.
	ByModel GroupBy = "model"
)

// ParseGroupBy validates a group_by value; "" means ByModel.
func ParseGroupBy(s string) (GroupBy, error) {
	switch GroupBy(s) {
	case "":
		return ByModel, nil
	case ByIsland, ByNUMA, ByModel:
		return GroupBy(s), nil
	default:
		return "", fmt.Errorf("group_by %q: must be one of %q, %q or %q", s, ByIsland, ByNUMA, ByModel)
	}
}

// Group is one device group: GPUs of one model that share the grouping key.
type Group struct {
	// Name is the Nomad device name: the model, plus " (island N)" or
	// " (numa N)" unless grouping by model.
	Name  string
	Model string
	// Members are instance IDs in NVLink-friendly order.
	Members []string
	// Island is the common island of all members, or Unknown if they
	// span several.
	Island int
	// NUMA is the common NUMA node of all members, or Unknown if they
	// span several or it is not known.
	NUMA int
}

// Groups cuts the topology's GPUs into device groups, ordered by name.
func (t Topology) Groups(by GroupBy) []Group {
	type key struct {
		model string
		n     int
	}
	members := map[key][]string{}
	var keys []key
	for _, g := range t.GPUs {
		k := key{model: g.Model}
		switch by {
		case ByNUMA:
			k.n = g.NUMA
		case ByModel:
			k.n = 0
		default:
			k.n = g.Island
		}
		if _, ok := members[k]; !ok {
			keys = append(keys, k)
		}
		members[k] = append(members[k], g.ID)
	}
	out := make([]Group, 0, len(keys))
	for _, k := range keys {
		ids := t.Order(members[k])
		grp := Group{Model: k.model, Members: ids, Island: common(t, ids, func(p Placed) int { return p.Island }),
			NUMA: common(t, ids, func(p Placed) int { return p.NUMA })}
		switch by {
		case ByNUMA:
			if k.n == Unknown {
				grp.Name = fmt.Sprintf("%s (numa unknown)", k.model)
			} else {
				grp.Name = fmt.Sprintf("%s (numa %d)", k.model, k.n)
			}
		case ByModel:
			grp.Name = k.model
		default:
			grp.Name = fmt.Sprintf("%s (island %d)", k.model, k.n)
		}
		out = append(out, grp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func common(t Topology, ids []string, f func(Placed) int) int {
	v := Unknown
	for i, id := range ids {
		g, _ := t.GPU(id)
		if i == 0 {
			v = f(g)
		} else if f(g) != v {
			return Unknown
		}
	}
	return v
}
