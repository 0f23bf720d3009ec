package nomadfake

import (
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// selectNode is the fake's scheduler for one allocation of a group: the
// first node (by name) in the job's pool that passes the job's, group's
// and tasks' constraints, distinct_hosts, CPU/memory, and every task's
// device requests (each from one device group, as Nomad does). Among
// nodes, higher device-affinity scores win.
func (s *Server) selectNode(job *api.Job, tg *api.TaskGroup, planned []placement) (*placement, *api.AllocationMetric) {
	metric := &api.AllocationMetric{
		NodePool: *job.NodePool, NodesAvailable: map[string]int{},
		ConstraintFiltered: map[string]int{}, DimensionExhausted: map[string]int{},
	}
	nodes := make([]*api.Node, 0, len(s.nodes))
	for _, n := range s.nodes {
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(a, b int) bool {
		if nodes[a].Name != nodes[b].Name {
			return nodes[a].Name < nodes[b].Name
		}
		return nodes[a].ID < nodes[b].ID
	})
	var cons []*api.Constraint
	cons = append(cons, job.Constraints...)
	cons = append(cons, tg.Constraints...)
	for _, t := range tg.Tasks {
		cons = append(cons, t.Constraints...)
	}
	var best *placement
	bestScore := -1.0
	for _, n := range nodes {
		if *job.NodePool != "all" && n.NodePool != *job.NodePool {
			continue
		}
		metric.NodesInPool++
		if n.Status != "ready" || n.SchedulingEligibility != "eligible" || !dcMatch(job.Datacenters, n.Datacenter) {
			continue
		}
		metric.NodesAvailable[n.Datacenter]++
		metric.NodesEvaluated++
		if failed := s.checkConstraints(job, tg, n, cons, planned); failed != "" {
			metric.NodesFiltered++
			metric.ConstraintFiltered[failed]++
			continue
		}
		devs, score, dim := s.fitNode(job, tg, n, planned)
		if dim != "" {
			metric.NodesExhausted++
			metric.DimensionExhausted[dim]++
			continue
		}
		if score > bestScore {
			best = &placement{tg: *tg.Name, node: n, devices: devs}
			bestScore = score
		}
	}
	if best == nil {
		return nil, metric
	}
	return best, metric
}

func dcMatch(dcs []string, dc string) bool {
	for _, p := range dcs {
		if ok, _ := path.Match(p, dc); ok {
			return true
		}
	}
	return false
}

// checkConstraints returns the first constraint the node fails, as Nomad
// names it in ConstraintFiltered, or "".
func (s *Server) checkConstraints(job *api.Job, tg *api.TaskGroup, n *api.Node, cons []*api.Constraint, planned []placement) string {
	for _, c := range cons {
		if c.Operand == "distinct_hosts" {
			if c.RTarget == "false" {
				continue
			}
			if s.jobOnNode(job, *tg.Name, n.ID, planned) {
				return "distinct_hosts"
			}
			continue
		}
		lval, lok := resolveNode(c.LTarget, n)
		rval, rok := resolveNode(c.RTarget, n)
		if !checkOp(c.Operand, lval, lok, rval, rok) {
			return c.LTarget + " " + c.Operand + " " + c.RTarget
		}
	}
	return ""
}

func (s *Server) jobOnNode(job *api.Job, tg, nodeID string, planned []placement) bool {
	for _, p := range planned {
		if p.node.ID == nodeID && p.tg == tg {
			return true
		}
	}
	for _, a := range s.allocs {
		if a.NodeID == nodeID && a.JobID == *job.ID && a.Namespace == *job.Namespace && a.TaskGroup == tg &&
			a.DesiredStatus == "run" && !terminal(a) {
			return true
		}
	}
	return false
}

func resolveNode(target string, n *api.Node) (string, bool) {
	if !strings.HasPrefix(target, "${") || !strings.HasSuffix(target, "}") {
		return target, true
	}
	t := target[2 : len(target)-1]
	switch {
	case t == "node.unique.id":
		return n.ID, true
	case t == "node.unique.name":
		return n.Name, true
	case t == "node.datacenter":
		return n.Datacenter, true
	case t == "node.class":
		return n.NodeClass, true
	case t == "node.pool":
		return n.NodePool, true
	case strings.HasPrefix(t, "attr."):
		v, ok := n.Attributes[strings.TrimPrefix(t, "attr.")]
		return v, ok
	case strings.HasPrefix(t, "meta."):
		v, ok := n.Meta[strings.TrimPrefix(t, "meta.")]
		return v, ok
	}
	return "", false
}

func checkOp(op, l string, lok bool, r string, rok bool) bool {
	switch op {
	case "is_set":
		return lok
	case "is_not_set":
		return !lok
	}
	if !lok || !rok {
		return false
	}
	switch op {
	case "", "=", "==", "is":
		return l == r
	case "!=", "not":
		return l != r
	case "set_contains_any":
		have := splitSet(l)
		for x := range splitSet(r) {
			if have[x] {
				return true
			}
		}
		return false
	case "set_contains", "set_contains_all":
		have := splitSet(l)
		for x := range splitSet(r) {
			if !have[x] {
				return false
			}
		}
		return true
	case "regexp":
		re, err := regexp.Compile(r)
		return err == nil && re.MatchString(l)
	case "<", "<=", ">", ">=":
		lf, e1 := strconv.ParseFloat(l, 64)
		rf, e2 := strconv.ParseFloat(r, 64)
		if e1 != nil || e2 != nil {
			return cmp(op, strings.Compare(l, r))
		}
		switch {
		case lf < rf:
			return cmp(op, -1)
		case lf > rf:
			return cmp(op, 1)
		}
		return cmp(op, 0)
	}
	return false
}

func cmp(op string, c int) bool {
	switch op {
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	}
	return c >= 0
}

func splitSet(s string) map[string]bool {
	out := map[string]bool{}
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out[x] = true
		}
	}
	return out
}

// fitNode checks CPU, memory and devices of the group on the node, given
// live allocations and planned placements. It returns the devices chosen
// per task, an affinity score, or the exhausted dimension.
func (s *Server) fitNode(job *api.Job, tg *api.TaskGroup, n *api.Node, planned []placement) (map[string][]*api.AllocatedDeviceResource, float64, string) {
	usedDev, cpu, mem := s.nodeUsage(job, n, planned)
	if nr := n.NodeResources; nr != nil {
		if nr.Cpu.CpuShares > 0 && cpu+groupCPU(job, *tg.Name) > nr.Cpu.CpuShares {
			return nil, 0, "cpu"
		}
		if nr.Memory.MemoryMB > 0 && mem+groupMem(job, *tg.Name) > nr.Memory.MemoryMB {
			return nil, 0, "memory"
		}
	}
	out := map[string][]*api.AllocatedDeviceResource{}
	score := 0.0
	for _, t := range tg.Tasks {
		if t.Resources == nil {
			continue
		}
		for _, req := range t.Resources.Devices {
			best, bestScore, bestIDs := pickDeviceGroup(req, n, usedDev)
			if best == nil {
				return nil, 0, "devices: " + req.Name
			}
			for _, id := range bestIDs {
				usedDev[id] = true
			}
			score += bestScore
			out[t.Name] = append(out[t.Name], &api.AllocatedDeviceResource{
				Vendor: best.Vendor, Type: best.Type, Name: best.Name, DeviceIDs: append([]string(nil), bestIDs...),
			})
		}
	}
	return out, score, ""
}

// nodeUsage is what the node's live allocations and the planned
// placements on it take: device instances, CPU and memory.
func (s *Server) nodeUsage(job *api.Job, n *api.Node, planned []placement) (usedDev map[string]bool, cpu, mem int64) {
	usedDev = map[string]bool{}
	for _, a := range s.allocs {
		if a.NodeID != n.ID || terminal(a) || a.AllocatedResources == nil {
			continue
		}
		for _, t := range a.AllocatedResources.Tasks {
			cpu += t.Cpu.CpuShares
			mem += t.Memory.MemoryMB
			for _, d := range t.Devices {
				for _, id := range d.DeviceIDs {
					usedDev[id] = true
				}
			}
		}
	}
	for _, p := range planned {
		if p.node.ID != n.ID {
			continue
		}
		for _, ds := range p.devices {
			for _, d := range ds {
				for _, id := range d.DeviceIDs {
					usedDev[id] = true
				}
			}
		}
		cpu += groupCPU(job, p.tg)
		mem += groupMem(job, p.tg)
	}
	return usedDev, cpu, mem
}

// pickDeviceGroup chooses, for one device request, the node's device
// group that matches it (name, constraints, allowed instance IDs) with
// enough free healthy instances and the best affinity score, and the
// first free instances of it; nil when none fits.
func pickDeviceGroup(req *api.RequestedDevice, n *api.Node, usedDev map[string]bool) (*api.NodeDeviceResource, float64, []string) {
	want := uint64(1)
	if req.Count != nil {
		want = *req.Count
	}
	var best *api.NodeDeviceResource
	bestScore := -1.0
	var bestIDs []string
	if n.NodeResources == nil {
		return nil, 0, nil
	}
	for _, g := range n.NodeResources.Devices {
		if !deviceNameMatch(req.Name, g) || !deviceConstraintsOK(req.Constraints, g) {
			continue
		}
		var free []string
		for _, inst := range g.Instances {
			if inst.Healthy && !usedDev[inst.ID] && instanceIDOK(req.Constraints, inst.ID, g) {
				free = append(free, inst.ID)
			}
		}
		if uint64(len(free)) < want {
			continue
		}
		sc := 0.0
		for _, af := range req.Affinities {
			l, lok := deviceTarget(af.LTarget, g)
			r, rok := deviceTarget(af.RTarget, g)
			if deviceCheck(af.Operand, l, lok, r, rok) && af.Weight != nil {
				sc += float64(*af.Weight)
			}
		}
		if sc > bestScore {
			best, bestScore, bestIDs = g, sc, free[:want]
		}
	}
	return best, bestScore, bestIDs
}

func groupCPU(job *api.Job, tg string) int64 {
	var sum int64
	for _, g := range job.TaskGroups {
		if *g.Name == tg {
			for _, t := range g.Tasks {
				if t.Resources != nil && t.Resources.CPU != nil {
					sum += int64(*t.Resources.CPU)
				}
			}
		}
	}
	return sum
}

func groupMem(job *api.Job, tg string) int64 {
	var sum int64
	for _, g := range job.TaskGroups {
		if *g.Name == tg {
			for _, t := range g.Tasks {
				if t.Resources != nil && t.Resources.MemoryMB != nil {
					sum += int64(*t.Resources.MemoryMB)
				}
			}
		}
	}
	return sum
}

func deviceNameMatch(name string, g *api.NodeDeviceResource) bool {
	parts := strings.Split(name, "/")
	switch len(parts) {
	case 1:
		return parts[0] == g.Type
	case 2:
		return parts[0] == g.Vendor && parts[1] == g.Type
	case 3:
		return parts[0] == g.Vendor && parts[1] == g.Type && parts[2] == g.Name
	}
	return false
}

func deviceConstraintsOK(cons []*api.Constraint, g *api.NodeDeviceResource) bool {
	for _, c := range cons {
		l, lok := deviceTarget(c.LTarget, g)
		r, rok := deviceTarget(c.RTarget, g)
		if !deviceCheck(c.Operand, l, lok, r, rok) {
			return false
		}
	}
	return true
}

// instanceIDOK applies a request's ${device.ids} constraints to one
// instance, as Nomad does after the group-level check: the side that is
// not ${device.ids} is resolved on the group (a literal list, normally)
// and compared with the instance's ID alone, so a set_contains_any list
// of IDs admits exactly those instances. Either side may hold the
// attribute.
func instanceIDOK(cons []*api.Constraint, id string, g *api.NodeDeviceResource) bool {
	for _, c := range cons {
		var other string
		switch {
		case c.LTarget == "${device.ids}":
			other = c.RTarget
		case c.RTarget == "${device.ids}":
			other = c.LTarget
		default:
			continue
		}
		target, ok := deviceTarget(other, g)
		if !deviceCheck(c.Operand, target, ok, typed{kind: "string", s: id}, true) {
			return false
		}
	}
	return true
}

// typed is an attribute value with its kind, compared as Nomad does: a
// literal is parsed as int, then float, then bool, then string, and values
// of different kinds never compare equal.
type typed struct {
	kind string // "num", "bool", "string"
	num  float64
	b    bool
	s    string
}

func parseLiteral(v string) typed {
	if i, err := strconv.ParseInt(v, 10, 64); err == nil {
		return typed{kind: "num", num: float64(i)}
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return typed{kind: "num", num: f}
	}
	if b, err := strconv.ParseBool(v); err == nil {
		return typed{kind: "bool", b: b}
	}
	return typed{kind: "string", s: v}
}

func attrTyped(a *api.Attribute) typed {
	switch {
	case a.IntVal != nil:
		return typed{kind: "num", num: float64(*a.IntVal)}
	case a.FloatVal != nil:
		return typed{kind: "num", num: *a.FloatVal}
	case a.BoolVal != nil:
		return typed{kind: "bool", b: *a.BoolVal}
	case a.StringVal != nil:
		return typed{kind: "string", s: *a.StringVal}
	}
	return typed{kind: "string"}
}

func deviceTarget(target string, g *api.NodeDeviceResource) (typed, bool) {
	if !strings.HasPrefix(target, "${") || !strings.HasSuffix(target, "}") {
		return parseLiteral(target), true
	}
	t := target[2 : len(target)-1]
	switch {
	case t == "device.ids":
		ids := make([]string, len(g.Instances))
		for i, inst := range g.Instances {
			ids[i] = inst.ID
		}
		return typed{kind: "string", s: strings.Join(ids, ",")}, true
	case t == "device.model":
		return typed{kind: "string", s: g.Name}, true
	case t == "device.vendor":
		return typed{kind: "string", s: g.Vendor}, true
	case t == "device.type":
		return typed{kind: "string", s: g.Type}, true
	case strings.HasPrefix(t, "device.attr."):
		a, ok := g.Attributes[strings.TrimPrefix(t, "device.attr.")]
		if !ok || a == nil {
			return typed{}, false
		}
		return attrTyped(a), true
	}
	return typed{}, false
}

func deviceCheck(op string, l typed, lok bool, r typed, rok bool) bool {
	switch op {
	case "is_set":
		return lok
	case "is_not_set":
		return !lok
	}
	if !lok || !rok || l.kind != r.kind {
		return false
	}
	c := 0
	switch l.kind {
	case "num":
		switch {
		case l.num < r.num:
			c = -1
		case l.num > r.num:
			c = 1
		}
	case "bool":
		if l.b != r.b {
			c = 1
		}
	default:
		c = strings.Compare(l.s, r.s)
	}
	switch op {
	case "", "=", "==", "is":
		return c == 0
	case "!=", "not":
		return c != 0
	case "<", "<=", ">", ">=":
		return l.kind != "bool" && cmp(op, c)
	case "regexp":
		re, err := regexp.Compile(r.s)
		return l.kind == "string" && err == nil && re.MatchString(l.s)
	case "set_contains_any":
		// Nomad compares the two sides as comma-separated sets of
		// strings: true when any element of the right is in the left.
		if l.kind != "string" {
			return false
		}
		in := map[string]bool{}
		for _, e := range strings.Split(l.s, ",") {
			in[strings.TrimSpace(e)] = true
		}
		for _, e := range strings.Split(r.s, ",") {
			if in[strings.TrimSpace(e)] {
				return true
			}
		}
		return false
	}
	return false
}
