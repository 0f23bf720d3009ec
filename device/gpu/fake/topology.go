package fake

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/impact-sched/nomad-impact/device/gpu"
	"github.com/impact-sched/nomad-impact/internal/hclfile"
)

// fileSpec is the HCL schema of a topology file; see the package doc.
type fileSpec struct {
	DriverVersion     *string      `hcl:"driver_version,optional"`
	CUDADriverVersion *int         `hcl:"cuda_driver_version,optional"`
	ControlFile       *string      `hcl:"control_file,optional"`
	GPUs              []gpuSpec    `hcl:"gpu,block"`
	NVLinks           []nvlinkSpec `hcl:"nvlink,block"`
	NVSwitches        []switchSpec `hcl:"nvswitch,block"`
	Events            []eventSpec  `hcl:"event,block"`
	Stats             []statsSpec  `hcl:"stats,block"`
}

type gpuSpec struct {
	Label             string    `hcl:"name,label"`
	UUID              string    `hcl:"uuid"`
	Model             string    `hcl:"model"`
	MemoryMiB         int       `hcl:"memory_mib"`
	Index             *int      `hcl:"index,optional"`
	Minor             *int      `hcl:"minor,optional"`
	PCIBusID          *string   `hcl:"pci_bus_id,optional"`
	NUMANode          *int      `hcl:"numa_node,optional"`
	ComputeCapability *string   `hcl:"compute_capability,optional"`
	PowerLimitW       *int      `hcl:"power_limit_w,optional"`
	PCIeGeneration    *int      `hcl:"pcie_generation,optional"`
	PCIeWidth         *int      `hcl:"pcie_width,optional"`
	MIG               []migSpec `hcl:"mig,block"`
	Body              hcl.Body  `hcl:",body"`
}

type migSpec struct {
	Profile         string   `hcl:"profile,label"`
	UUID            string   `hcl:"uuid"`
	MemoryMiB       int      `hcl:"memory_mib"`
	GPUInstance     *int     `hcl:"gpu_instance,optional"`
	ComputeInstance *int     `hcl:"compute_instance,optional"`
	Body            hcl.Body `hcl:",body"`
}

type nvlinkSpec struct {
	GPUs  []string `hcl:"gpus"`
	Links *int     `hcl:"links,optional"`
	Body  hcl.Body `hcl:",body"`
}

type switchSpec struct {
	GPUs        []string `hcl:"gpus,optional"`
	LinksPerGPU *int     `hcl:"links_per_gpu,optional"`
	Body        hcl.Body `hcl:",body"`
}

type eventSpec struct {
	After   string   `hcl:"after"`
	GPU     string   `hcl:"gpu"`
	XID     *int     `hcl:"xid,optional"`
	Lost    *bool    `hcl:"lost,optional"`
	Recover *bool    `hcl:"recover,optional"`
	Body    hcl.Body `hcl:",body"`
}

type statsSpec struct {
	GPU            string   `hcl:"gpu,label"`
	Utilization    *int     `hcl:"utilization,optional"`
	MemoryUtil     *int     `hcl:"memory_utilization,optional"`
	MemoryUsedMiB  *int     `hcl:"memory_used_mib,optional"`
	PowerW         *float64 `hcl:"power_w,optional"`
	TemperatureC   *int     `hcl:"temperature_c,optional"`
	ECCCorrected   *int     `hcl:"ecc_corrected,optional"`
	ECCUncorrected *int     `hcl:"ecc_uncorrected,optional"`
	Body           hcl.Body `hcl:",body"`
}

// Topology is a parsed topology file.
type Topology struct {
	// Path is the file it was read from.
	Path      string
	Inventory gpu.Inventory
	// Labels maps each GPU's label to its UUID.
	Labels map[string]string
	// ControlFile is the absolute path of the control file, or "".
	ControlFile string
	// Events are the scripted events, in file order.
	Events []Scripted
	// Stats are the initial stats per GPU UUID.
	Stats map[string]StatsUpdate
}

// Scripted is an event block: an action at an offset from backend start.
type Scripted struct {
	After  time.Duration
	Action Action
}

var (
	gpuUUID = regexp.MustCompile(`^GPU-[0-9A-Za-z-]+$`)
	migUUID = regexp.MustCompile(`^MIG-[0-9A-Za-z/-]+$`)
	busID   = regexp.MustCompile(`^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$`)
	ccForm  = regexp.MustCompile(`^[0-9]+\.[0-9]+$`)
)

// LoadTopology reads and validates a topology file. Errors name the file,
// and the block and field at fault.
func LoadTopology(path string) (*Topology, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("fake topology: %w", err)
	}
	return ParseTopology(path, src)
}

// ParseTopology parses topology source; path names it in errors and is the
// base for a relative control_file.
func ParseTopology(path string, src []byte) (*Topology, error) {
	var spec fileSpec
	if _, err := hclfile.Decode(src, path, &spec); err != nil {
		return nil, fmt.Errorf("fake topology: %w", err)
	}
	t, err := build(path, &spec)
	if err != nil {
		return nil, fmt.Errorf("fake topology %s: %w", path, err)
	}
	return t, nil
}

// build validates a decoded topology file block by block (gpu, nvlink and
// nvswitch, event, stats, each with its own helper) into a Topology.
func build(path string, spec *fileSpec) (*Topology, error) {
	t := &Topology{Path: path, Labels: map[string]string{}, Stats: map[string]StatsUpdate{}}
	inv := &t.Inventory
	inv.DriverVersion = "550.54.15"
	if spec.DriverVersion != nil {
		inv.DriverVersion = *spec.DriverVersion
	}
	inv.CUDADriverVersion = 12040
	if spec.CUDADriverVersion != nil {
		if *spec.CUDADriverVersion < 1000 {
			return nil, fmt.Errorf("cuda_driver_version %d: want the NVML encoding major*1000+minor*10, e.g. 12040", *spec.CUDADriverVersion)
		}
		inv.CUDADriverVersion = *spec.CUDADriverVersion
	}
	if spec.ControlFile != nil && *spec.ControlFile != "" {
		cf := *spec.ControlFile
		if !filepath.IsAbs(cf) {
			cf = filepath.Join(filepath.Dir(path), cf)
		}
		t.ControlFile = cf
	}
	if len(spec.GPUs) == 0 {
		return nil, fmt.Errorf("no gpu blocks")
	}
	uuids := map[string]string{}
	indexes := map[int]string{}
	for i, g := range spec.GPUs {
		if err := t.addGPU(i, g, uuids, indexes); err != nil {
			return nil, err
		}
	}
	if err := buildLinks(t, spec); err != nil {
		return nil, err
	}
	for i, e := range spec.Events {
		if err := t.addEvent(i, e); err != nil {
			return nil, err
		}
	}
	for _, st := range spec.Stats {
		if err := t.addStats(st); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// addGPU validates one gpu block (the i-th) and adds the device; uuids and
// indexes record what earlier blocks used, to catch duplicates.
func (t *Topology) addGPU(i int, g gpuSpec, uuids map[string]string, indexes map[int]string) error {
	where := fmt.Sprintf("line %d: gpu %q", hclfile.Line(g.Body), g.Label)
	// who names this GPU to a later block that reuses its UUID or index.
	who := fmt.Sprintf("gpu %q (line %d)", g.Label, hclfile.Line(g.Body))
	if _, dup := t.Labels[g.Label]; dup {
		return fmt.Errorf("%s: label used twice", where)
	}
	if !gpuUUID.MatchString(g.UUID) {
		return fmt.Errorf("%s: uuid %q must look like GPU-<hex and dashes>", where, g.UUID)
	}
	if other, dup := uuids[g.UUID]; dup {
		return fmt.Errorf("%s: uuid %s also used by %s", where, g.UUID, other)
	}
	uuids[g.UUID] = who
	if g.Model == "" {
		return fmt.Errorf("%s: model is empty", where)
	}
	if g.MemoryMiB <= 0 {
		return fmt.Errorf("%s: memory_mib must be positive, got %d", where, g.MemoryMiB)
	}
	d := gpu.Device{UUID: g.UUID, Index: i, Model: g.Model, MemoryMiB: uint64(g.MemoryMiB),
		PowerLimitW: gpu.Unknown, PCIeGeneration: gpu.Unknown, PCIeWidth: gpu.Unknown, NUMANode: gpu.Unknown}
	if g.Index != nil {
		if *g.Index < 0 {
			return fmt.Errorf("%s: index must not be negative", where)
		}
		d.Index = *g.Index
	}
	if other, dup := indexes[d.Index]; dup {
		return fmt.Errorf("%s: index %d also used by %s", where, d.Index, other)
	}
	indexes[d.Index] = who
	d.Minor = d.Index
	if g.Minor != nil {
		d.Minor = *g.Minor
	}
	d.PCIBusID = fmt.Sprintf("00000000:%02X:00.0", 0x10+d.Index)
	if g.PCIBusID != nil {
		if !busID.MatchString(*g.PCIBusID) {
			return fmt.Errorf("%s: pci_bus_id %q must look like 00000000:3B:00.0", where, *g.PCIBusID)
		}
		d.PCIBusID = *g.PCIBusID
	}
	if g.NUMANode != nil {
		if *g.NUMANode < 0 {
			return fmt.Errorf("%s: numa_node must not be negative (leave it out when unknown)", where)
		}
		d.NUMANode = *g.NUMANode
	}
	if g.ComputeCapability != nil {
		if !ccForm.MatchString(*g.ComputeCapability) {
			return fmt.Errorf("%s: compute_capability %q must look like 9.0", where, *g.ComputeCapability)
		}
		d.ComputeCapability = *g.ComputeCapability
	}
	for name, p := range map[string]struct {
		src *int
		dst *int
	}{"power_limit_w": {g.PowerLimitW, &d.PowerLimitW}, "pcie_generation": {g.PCIeGeneration, &d.PCIeGeneration}, "pcie_width": {g.PCIeWidth, &d.PCIeWidth}} {
		if p.src != nil {
			if *p.src <= 0 {
				return fmt.Errorf("%s: %s must be positive, got %d", where, name, *p.src)
			}
			*p.dst = *p.src
		}
	}
	for j, m := range g.MIG {
		mw := fmt.Sprintf("line %d: gpu %q mig %q", hclfile.Line(m.Body), g.Label, m.Profile)
		mwho := fmt.Sprintf("gpu %q mig %q (line %d)", g.Label, m.Profile, hclfile.Line(m.Body))
		if !migUUID.MatchString(m.UUID) {
			return fmt.Errorf("%s: uuid %q must look like MIG-<hex and dashes>", mw, m.UUID)
		}
		if other, dup := uuids[m.UUID]; dup {
			return fmt.Errorf("%s: uuid %s also used by %s", mw, m.UUID, other)
		}
		uuids[m.UUID] = mwho
		if m.MemoryMiB <= 0 || m.MemoryMiB > g.MemoryMiB {
			return fmt.Errorf("%s: memory_mib must be in 1..%d, got %d", mw, g.MemoryMiB, m.MemoryMiB)
		}
		inst := gpu.MIGInstance{UUID: m.UUID, Profile: m.Profile, GPUInstanceID: j + 1, MemoryMiB: uint64(m.MemoryMiB)}
		if m.GPUInstance != nil {
			inst.GPUInstanceID = *m.GPUInstance
		}
		if m.ComputeInstance != nil {
			inst.ComputeInstanceID = *m.ComputeInstance
		}
		d.MIG = append(d.MIG, inst)
	}
	d.MIGEnabled = len(d.MIG) > 0
	t.Labels[g.Label] = g.UUID
	t.Inventory.Devices = append(t.Inventory.Devices, d)
	return nil
}

// addEvent validates the i-th event block and schedules it.
func (t *Topology) addEvent(i int, e eventSpec) error {
	where := fmt.Sprintf("line %d: event %d (gpu %q)", hclfile.Line(e.Body), i+1, e.GPU)
	after, err := time.ParseDuration(e.After)
	if err != nil || after < 0 {
		return fmt.Errorf("%s: after %q must be a non-negative duration like 30s", where, e.After)
	}
	uuid, err := t.Resolve(e.GPU)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	n := 0
	a := Action{UUID: uuid}
	if e.XID != nil {
		n++
		a.Kind, a.XID = ActXID, *e.XID
		if a.XID <= 0 {
			return fmt.Errorf("%s: xid must be positive, got %d", where, a.XID)
		}
	}
	if e.Lost != nil && *e.Lost {
		n++
		a.Kind = ActLost
	}
	if e.Recover != nil && *e.Recover {
		n++
		a.Kind = ActRecover
	}
	if n != 1 {
		return fmt.Errorf("%s: set exactly one of xid, lost = true or recover = true", where)
	}
	t.Events = append(t.Events, Scripted{After: after, Action: a})
	return nil
}

// addStats validates a stats block and sets its GPU's initial stats.
func (t *Topology) addStats(s statsSpec) error {
	uuid, err := t.Resolve(s.GPU)
	if err != nil {
		return fmt.Errorf("line %d: stats %q: %w", hclfile.Line(s.Body), s.GPU, err)
	}
	u := StatsUpdate{Utilization: s.Utilization, MemoryUtil: s.MemoryUtil, MemoryUsedMiB: s.MemoryUsedMiB,
		PowerW: s.PowerW, TemperatureC: s.TemperatureC, ECCCorrected: s.ECCCorrected, ECCUncorrected: s.ECCUncorrected}
	if err := u.validate(); err != nil {
		return fmt.Errorf("line %d: stats %q: %w", hclfile.Line(s.Body), s.GPU, err)
	}
	t.Stats[uuid] = u
	return nil
}

func buildLinks(t *Topology, spec *fileSpec) error {
	inv := &t.Inventory
	type pair struct{ a, b string }
	links := map[pair]*gpu.Link{}
	var order []pair
	get := func(a, b string) *gpu.Link {
		if b < a {
			a, b = b, a
		}
		p := pair{a, b}
		if l, ok := links[p]; ok {
			return l
		}
		l := &gpu.Link{A: a, B: b}
		links[p] = l
		order = append(order, p)
		return l
	}
	linkCount := map[string]int{}
	for i, nv := range spec.NVLinks {
		where := fmt.Sprintf("line %d: nvlink block %d", hclfile.Line(nv.Body), i+1)
		ids, err := t.resolveAll(nv.GPUs)
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if len(ids) < 2 {
			return fmt.Errorf("%s: gpus must name at least two GPUs", where)
		}
		n := 1
		if nv.Links != nil {
			if *nv.Links <= 0 {
				return fmt.Errorf("%s: links must be positive, got %d", where, *nv.Links)
			}
			n = *nv.Links
		}
		for a := range ids {
			for b := a + 1; b < len(ids); b++ {
				l := get(ids[a], ids[b])
				l.NVLinks += n
				l.NVLinkP2P = true
				linkCount[ids[a]] += n
				linkCount[ids[b]] += n
			}
		}
	}
	for i, sw := range spec.NVSwitches {
		where := fmt.Sprintf("line %d: nvswitch block %d", hclfile.Line(sw.Body), i+1)
		var ids []string
		if len(sw.GPUs) == 0 {
			for _, d := range inv.Devices {
				ids = append(ids, d.UUID)
			}
		} else {
			var err error
			if ids, err = t.resolveAll(sw.GPUs); err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
		}
		n := 18
		if sw.LinksPerGPU != nil {
			if *sw.LinksPerGPU <= 0 {
				return fmt.Errorf("%s: links_per_gpu must be positive, got %d", where, *sw.LinksPerGPU)
			}
			n = *sw.LinksPerGPU
		}
		for a := range ids {
			linkCount[ids[a]] += n
			for b := a + 1; b < len(ids); b++ {
				get(ids[a], ids[b]).NVLinkP2P = true
			}
		}
		inv.NVSwitch = true
	}
	// Every pair gets its PCIe level: same NUMA node -> NODE, else SYS.
	for a := range inv.Devices {
		for b := a + 1; b < len(inv.Devices); b++ {
			da, db := inv.Devices[a], inv.Devices[b]
			l := get(da.UUID, db.UUID)
			l.PCIe = gpu.LevelSystem
			if da.NUMANode != gpu.Unknown && da.NUMANode == db.NUMANode {
				l.PCIe = gpu.LevelNode
			}
		}
	}
	for _, p := range order {
		inv.Links = append(inv.Links, *links[p])
	}
	for i := range inv.Devices {
		d := &inv.Devices[i]
		d.NVLinkLinks = linkCount[d.UUID]
		major := 0
		if d.ComputeCapability != "" {
			major, _ = strconv.Atoi(strings.SplitN(d.ComputeCapability, ".", 2)[0])
		}
		d.NVLinkBandwidthGBps = d.NVLinkLinks * gpu.NVLinkLinkGBps(major)
	}
	return nil
}

func (t *Topology) resolveAll(refs []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, r := range refs {
		id, err := t.Resolve(r)
		if err != nil {
			return nil, err
		}
		if seen[id] {
			return nil, fmt.Errorf("GPU %q listed twice", r)
		}
		seen[id] = true
		out = append(out, id)
	}
	return out, nil
}

// Resolve maps a GPU reference (label, UUID, MIG UUID or index) to a UUID.
func (t *Topology) Resolve(ref string) (string, error) {
	if id, ok := t.Labels[ref]; ok {
		return id, nil
	}
	for _, d := range t.Inventory.Devices {
		if d.UUID == ref || strconv.Itoa(d.Index) == ref {
			return d.UUID, nil
		}
		for _, m := range d.MIG {
			if m.UUID == ref {
				return m.UUID, nil
			}
		}
	}
	return "", fmt.Errorf("unknown GPU %q (want a gpu label, UUID or index)", ref)
}
