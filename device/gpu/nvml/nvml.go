//go:build linux && cgo

package nvml

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	nv "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/device/gpu"
)

// Backend reads GPUs through NVML.
type Backend struct {
	lib    nv.Interface
	logger hclog.Logger
	// sysfsRoot is where /sys is: the NUMA node of a PCIe GPU is read from
	// <sysfsRoot>/bus/pci/devices/<bus id>/numa_node.
	sysfsRoot string
	// eventWait is how long one wait for NVML events blocks.
	eventWait time.Duration

	mu     sync.Mutex
	inited bool
	// handles caches device handles by UUID from the last scan (NVML
	// handles stay valid until Shutdown).
	handles map[string]nv.Device
	// migs maps a parent UUID to its MIG instances from the last scan,
	// to attribute MIG-scoped XID events.
	migs map[string][]gpu.MIGInstance
}

var _ gpu.Backend = (*Backend)(nil)

// New returns a Backend over the system's libnvidia-ml. Nothing is loaded
// until the first call; when the library is absent every scan reports
// gpu.ErrUnavailable.
func New(logger hclog.Logger) gpu.Backend {
	return newWithLibrary(nv.New(), logger)
}

// newWithLibrary returns a Backend over any nvml.Interface (the package's
// tests pass go-nvml's mocks, and set their own sysfs root and waits).
func newWithLibrary(lib nv.Interface, logger hclog.Logger) *Backend {
	return &Backend{lib: lib, logger: logger.Named("nvml"), sysfsRoot: "/sys", eventWait: time.Second,
		handles: map[string]nv.Device{}, migs: map[string][]gpu.MIGInstance{}}
}

// init loads and initialises NVML once. No NVML function other than Init
// may run before it succeeded: with the library absent, any call dies in
// the dynamic linker, which no recover can catch.
func (b *Backend) init() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inited {
		return nil
	}
	ret := b.lib.Init()
	switch ret {
	case nv.SUCCESS:
		b.inited = true
		return nil
	case nv.ERROR_LIBRARY_NOT_FOUND:
		return fmt.Errorf("%w: libnvidia-ml.so.1 not found (is the NVIDIA driver installed?): %s", gpu.ErrUnavailable, ret.Error())
	case nv.ERROR_DRIVER_NOT_LOADED:
		return fmt.Errorf("%w: NVIDIA kernel driver not loaded: %s", gpu.ErrUnavailable, ret.Error())
	default:
		return fmt.Errorf("nvml init: %s", ret.Error())
	}
}

// has reports whether the loaded library exports a symbol. Newer NVML
// calls are looked up before use: calling one an older driver lacks kills
// the process.
func (b *Backend) has(symbol string) bool {
	ext := b.lib.Extensions()
	return ext != nil && ext.LookupSymbol(symbol) == nil
}

// scanned is one device during a scan.
type scanned struct {
	dev    gpu.Device
	handle nv.Device
	// lanes counts direct NVLink links by the remote end's bus id.
	lanes map[string]int
}

// Inventory scans the GPUs, their NVLinks and pairwise topology.
func (b *Backend) Inventory(ctx context.Context) (gpu.Inventory, error) {
	if err := b.init(); err != nil {
		return gpu.Inventory{}, err
	}
	var inv gpu.Inventory
	if v, ret := b.lib.SystemGetDriverVersion(); ret == nv.SUCCESS {
		inv.DriverVersion = v
	}
	if v, ret := b.lib.SystemGetCudaDriverVersion(); ret == nv.SUCCESS {
		inv.CUDADriverVersion = v
	}
	n, ret := b.lib.DeviceGetCount()
	if ret != nv.SUCCESS {
		return gpu.Inventory{}, fmt.Errorf("nvml device count: %s", ret.Error())
	}
	var devs []*scanned
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return gpu.Inventory{}, err
		}
		h, ret := b.lib.DeviceGetHandleByIndex(i)
		if ret != nv.SUCCESS {
			// A GPU that fell off the bus cannot be opened; leaving it
			// out makes the plugin report it lost.
			b.logger.Warn("cannot open GPU; leaving it out", "index", i, "error", ret.Error())
			continue
		}
		s, nvswitch, err := b.readDevice(h, i)
		if err != nil {
			b.logger.Warn("cannot read GPU; leaving it out", "index", i, "error", err)
			continue
		}
		inv.NVSwitch = inv.NVSwitch || nvswitch
		devs = append(devs, s)
	}
	handles := map[string]nv.Device{}
	migs := map[string][]gpu.MIGInstance{}
	for _, s := range devs {
		inv.Devices = append(inv.Devices, s.dev)
		handles[s.dev.UUID] = s.handle
		migs[s.dev.UUID] = s.dev.MIG
	}
	inv.Links = b.links(devs)
	b.mu.Lock()
	b.handles, b.migs = handles, migs
	b.mu.Unlock()
	return inv, nil
}

// readDevice reads one GPU. Only the UUID is required; every other fact
// that the driver does not support is left Unknown.
func (b *Backend) readDevice(h nv.Device, i int) (*scanned, bool, error) {
	uuid, ret := h.GetUUID()
	if ret != nv.SUCCESS {
		return nil, false, fmt.Errorf("uuid: %s", ret.Error())
	}
	d := gpu.Device{UUID: uuid, Index: i, Minor: gpu.Unknown, PowerLimitW: gpu.Unknown,
		PCIeGeneration: gpu.Unknown, PCIeWidth: gpu.Unknown, NUMANode: gpu.Unknown}
	if v, ret := h.GetIndex(); ret == nv.SUCCESS {
		d.Index = v
	}
	if v, ret := h.GetMinorNumber(); ret == nv.SUCCESS {
		d.Minor = v
	}
	d.Model = "N/A"
	if v, ret := h.GetName(); ret == nv.SUCCESS && v != "" {
		d.Model = v
	}
	if m, ret := h.GetMemoryInfo(); ret == nv.SUCCESS {
		d.MemoryMiB = m.Total / (1 << 20)
	}
	ccMajor := 0
	if major, minor, ret := h.GetCudaComputeCapability(); ret == nv.SUCCESS {
		d.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
		ccMajor = major
	}
	if v, ret := h.GetPowerManagementLimit(); ret == nv.SUCCESS {
		d.PowerLimitW = int(v / 1000)
	}
	if v, ret := h.GetMaxPcieLinkGeneration(); ret == nv.SUCCESS {
		d.PCIeGeneration = v
	}
	if v, ret := h.GetMaxPcieLinkWidth(); ret == nv.SUCCESS {
		d.PCIeWidth = v
	}
	if pci, ret := h.GetPciInfo(); ret == nv.SUCCESS {
		d.PCIBusID = BusID(pci)
	}
	d.NUMANode = b.numaNode(h, d.PCIBusID)
	s := &scanned{dev: d, handle: h, lanes: map[string]int{}}
	nvswitch := b.readNVLinks(s)
	s.dev.NVLinkBandwidthGBps = s.dev.NVLinkLinks * gpu.NVLinkLinkGBps(ccMajor)
	b.readMIG(s)
	return s, nvswitch, nil
}

// BusID converts NVML's NUL-terminated bus id; when the driver leaves it
// empty it is rebuilt from the domain/bus/device numbers.
func BusID(pci nv.PciInfo) string {
	var sb strings.Builder
	for _, c := range pci.BusId {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	if sb.Len() > 0 {
		return sb.String()
	}
	if pci.Domain == 0 && pci.Bus == 0 && pci.Device == 0 {
		return ""
	}
	return fmt.Sprintf("%08X:%02X:%02X.0", pci.Domain, pci.Bus, pci.Device)
}

// numaNode asks NVML (coherent systems such as GH200, where GPUs are NUMA
// nodes themselves) and falls back to sysfs, which knows it for PCIe GPUs.
func (b *Backend) numaNode(h nv.Device, busID string) int {
	if b.has("nvmlDeviceGetNumaNodeId") {
		if v, ret := h.GetNumaNodeId(); ret == nv.SUCCESS && v >= 0 {
			return v
		}
	}
	if busID == "" {
		return gpu.Unknown
	}
	raw, err := os.ReadFile(filepath.Join(b.sysfsRoot, "bus", "pci", "devices", SysfsBusID(busID), "numa_node"))
	if err != nil {
		return gpu.Unknown
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || v < 0 {
		return gpu.Unknown
	}
	return v
}

// SysfsBusID turns "00000000:3B:00.0" into sysfs's "0000:3b:00.0".
func SysfsBusID(busID string) string {
	id := strings.ToLower(busID)
	if dom, rest, ok := strings.Cut(id, ":"); ok && len(dom) > 4 {
		id = dom[len(dom)-4:] + ":" + rest
	}
	return id
}

// readNVLinks counts active links and notes where each one goes. It
// returns true when a link ends at an NVSwitch.
func (b *Backend) readNVLinks(s *scanned) bool {
	hasType := b.has("nvmlDeviceGetNvLinkRemoteDeviceType")
	nvswitch := false
	for l := 0; l < nv.NVLINK_MAX_LINKS; l++ {
		state, ret := s.handle.GetNvLinkState(l)
		if ret == nv.ERROR_NOT_SUPPORTED || ret == nv.ERROR_INVALID_ARGUMENT {
			break // no NVLink, or no more links
		}
		if ret != nv.SUCCESS || state != nv.FEATURE_ENABLED {
			continue
		}
		s.dev.NVLinkLinks++
		if hasType {
			if t, ret := s.handle.GetNvLinkRemoteDeviceType(l); ret == nv.SUCCESS && t == nv.NVLINK_DEVICE_TYPE_SWITCH {
				nvswitch = true
				continue
			}
		}
		if pci, ret := s.handle.GetNvLinkRemotePciInfo(l); ret == nv.SUCCESS {
			if id := BusID(pci); id != "" {
				s.lanes[strings.ToUpper(id)]++
			}
		}
	}
	return nvswitch
}

// readMIG lists the MIG instances of a GPU in MIG mode.
func (b *Backend) readMIG(s *scanned) {
	cur, _, ret := s.handle.GetMigMode()
	if ret != nv.SUCCESS || cur != nv.DEVICE_MIG_ENABLE {
		return
	}
	s.dev.MIGEnabled = true
	n, ret := s.handle.GetMaxMigDeviceCount()
	if ret != nv.SUCCESS {
		b.logger.Warn("MIG enabled but instances cannot be listed", "gpu", s.dev.UUID, "error", ret.Error())
		return
	}
	for j := 0; j < n; j++ {
		m, ret := s.handle.GetMigDeviceHandleByIndex(j)
		if ret == nv.ERROR_NOT_FOUND || ret == nv.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nv.SUCCESS {
			b.logger.Warn("cannot open MIG instance", "gpu", s.dev.UUID, "slot", j, "error", ret.Error())
			continue
		}
		uuid, ret := m.GetUUID()
		if ret != nv.SUCCESS {
			continue
		}
		inst := gpu.MIGInstance{UUID: uuid}
		if v, ret := m.GetGpuInstanceId(); ret == nv.SUCCESS {
			inst.GPUInstanceID = v
		} else {
			inst.IDsUnknown = true
		}
		if v, ret := m.GetComputeInstanceId(); ret == nv.SUCCESS {
			inst.ComputeInstanceID = v
		} else {
			inst.IDsUnknown = true
		}
		if mem, ret := m.GetMemoryInfo(); ret == nv.SUCCESS {
			inst.MemoryMiB = mem.Total / (1 << 20)
		}
		if name, ret := m.GetName(); ret == nv.SUCCESS {
			if _, p, ok := strings.Cut(name, " MIG "); ok {
				inst.Profile = p
			}
		}
		if inst.Profile == "" {
			inst.Profile = fmt.Sprintf("%dgb", (inst.MemoryMiB+512)/1024)
		}
		s.dev.MIG = append(s.dev.MIG, inst)
	}
}

// links computes the pairwise facts: direct NVLink counts (from the remote
// bus ids), NVLink P2P (which also holds through NVSwitches) and the
// closest common PCIe ancestor.
func (b *Backend) links(devs []*scanned) []gpu.Link {
	hasP2P := b.has("nvmlDeviceGetP2PStatus")
	var out []gpu.Link
	for i := range devs {
		for j := i + 1; j < len(devs); j++ {
			a, c := devs[i], devs[j]
			l := gpu.Link{A: a.dev.UUID, B: c.dev.UUID}
			l.NVLinks = a.lanes[strings.ToUpper(c.dev.PCIBusID)]
			if n := c.lanes[strings.ToUpper(a.dev.PCIBusID)]; n > l.NVLinks {
				l.NVLinks = n
			}
			if hasP2P {
				if st, ret := a.handle.GetP2PStatus(c.handle, nv.P2P_CAPS_INDEX_NVLINK); ret == nv.SUCCESS && st == nv.P2P_STATUS_OK {
					l.NVLinkP2P = true
				}
			}
			if l.NVLinks > 0 {
				l.NVLinkP2P = true
			}
			if lvl, ret := a.handle.GetTopologyCommonAncestor(c.handle); ret == nv.SUCCESS {
				l.PCIe = pcieLevel(lvl)
			}
			out = append(out, l)
		}
	}
	return out
}

func pcieLevel(l nv.GpuTopologyLevel) gpu.PCIeLevel {
	switch l {
	case nv.TOPOLOGY_INTERNAL, nv.TOPOLOGY_SINGLE:
		return gpu.LevelSingle
	case nv.TOPOLOGY_MULTIPLE:
		return gpu.LevelMultiple
	case nv.TOPOLOGY_HOSTBRIDGE:
		return gpu.LevelHostBridge
	case nv.TOPOLOGY_NODE:
		return gpu.LevelNode
	case nv.TOPOLOGY_SYSTEM:
		return gpu.LevelSystem
	}
	return gpu.LevelUnknown
}

func (b *Backend) handle(uuid string) (nv.Device, bool) {
	b.mu.Lock()
	h, ok := b.handles[uuid]
	b.mu.Unlock()
	if ok {
		return h, true
	}
	h, ret := b.lib.DeviceGetHandleByUUID(uuid)
	return h, ret == nv.SUCCESS
}

// Stats samples utilisation, memory, power, temperature and ECC counts.
// A reading the GPU does not support is marked absent.
func (b *Backend) Stats(ctx context.Context, uuids []string) ([]gpu.Stats, error) {
	if err := b.init(); err != nil {
		return nil, err
	}
	now := time.Now()
	var out []gpu.Stats
	for _, id := range uuids {
		h, ok := b.handle(id)
		if !ok {
			continue
		}
		s := gpu.Stats{UUID: id, Time: now}
		if u, ret := h.GetUtilizationRates(); ret == nv.SUCCESS {
			s.HasUtilization, s.UtilizationPct, s.MemoryUtilizationPct = true, int(u.Gpu), int(u.Memory)
		}
		if m, ret := h.GetMemoryInfo(); ret == nv.SUCCESS {
			s.HasMemory, s.MemoryUsedMiB, s.MemoryTotalMiB = true, m.Used/(1<<20), m.Total/(1<<20)
		}
		if p, ret := h.GetPowerUsage(); ret == nv.SUCCESS {
			s.HasPower, s.PowerW = true, float64(p)/1000
		}
		if t, ret := h.GetTemperature(nv.TEMPERATURE_GPU); ret == nv.SUCCESS {
			s.HasTemperature, s.TemperatureC = true, int(t)
		}
		c, ret1 := h.GetTotalEccErrors(nv.MEMORY_ERROR_TYPE_CORRECTED, nv.VOLATILE_ECC)
		u, ret2 := h.GetTotalEccErrors(nv.MEMORY_ERROR_TYPE_UNCORRECTED, nv.VOLATILE_ECC)
		if ret1 == nv.SUCCESS && ret2 == nv.SUCCESS {
			s.HasECC, s.ECCCorrected, s.ECCUncorrected = true, c, u
		}
		out = append(out, s)
	}
	return out, nil
}

// Event masks the health watch registers (those a GPU supports).
const healthEvents = nv.EventTypeXidCriticalError | nv.EventTypeDoubleBitEccError | nv.EventTypeGpuUnavailableError

// allInstances is NVML's "whole GPU" value for the instance ids of an event.
const allInstances = 0xFFFFFFFF

// WatchHealth registers for XID, double-bit ECC and GPU-unavailable events
// on the GPUs of the last scan and delivers them until ctx ends.
func (b *Backend) WatchHealth(ctx context.Context, events chan<- gpu.HealthEvent) error {
	if err := b.init(); err != nil {
		<-ctx.Done() // nothing to watch; the scans report the cause
		return nil
	}
	set, ret := b.lib.EventSetCreate()
	if ret != nv.SUCCESS {
		return fmt.Errorf("nvml event set: %s", ret.Error())
	}
	defer set.Free()
	b.mu.Lock()
	handles := make(map[string]nv.Device, len(b.handles))
	for k, v := range b.handles {
		handles[k] = v
	}
	b.mu.Unlock()
	registered := 0
	for uuid, h := range handles {
		supported, ret := h.GetSupportedEventTypes()
		if ret != nv.SUCCESS {
			b.logger.Warn("GPU reports no event support; XIDs will not be seen", "gpu", uuid, "error", ret.Error())
			continue
		}
		if ret := h.RegisterEvents(uint64(healthEvents)&supported, set); ret != nv.SUCCESS {
			b.logger.Warn("cannot register for events; XIDs will not be seen", "gpu", uuid, "error", ret.Error())
			continue
		}
		registered++
	}
	b.logger.Debug("watching health events", "gpus", registered)
	wait := uint32(b.eventWait / time.Millisecond)
	for ctx.Err() == nil {
		data, ret := set.Wait(wait)
		if ret == nv.ERROR_TIMEOUT {
			continue
		}
		if ret != nv.SUCCESS {
			return fmt.Errorf("nvml event wait: %s", ret.Error())
		}
		ev, ok := b.toEvent(data)
		if !ok {
			continue
		}
		select {
		case events <- ev:
		case <-ctx.Done():
		}
	}
	return nil
}

// toEvent converts NVML event data; MIG-scoped XIDs are attributed to the
// MIG instance they name.
func (b *Backend) toEvent(data nv.EventData) (gpu.HealthEvent, bool) {
	if data.Device == nil {
		return gpu.HealthEvent{}, false
	}
	uuid, ret := data.Device.GetUUID()
	if ret != nv.SUCCESS {
		b.logger.Warn("event for a GPU without a readable UUID", "error", ret.Error())
		return gpu.HealthEvent{}, false
	}
	ev := gpu.HealthEvent{UUID: uuid, Time: time.Now()}
	switch data.EventType {
	case nv.EventTypeXidCriticalError:
		ev.Kind, ev.XID = gpu.EventXID, int(data.EventData)
	case nv.EventTypeDoubleBitEccError:
		ev.Kind = gpu.EventECC
	case nv.EventTypeGpuUnavailableError:
		ev.Kind = gpu.EventLost
		ev.Detail = "NVML reports the GPU unavailable"
	default:
		return gpu.HealthEvent{}, false
	}
	if data.GpuInstanceId != allInstances {
		b.mu.Lock()
		for _, m := range b.migs[uuid] {
			if !m.IDsUnknown && uint32(m.GPUInstanceID) == data.GpuInstanceId && (data.ComputeInstanceId == allInstances || uint32(m.ComputeInstanceID) == data.ComputeInstanceId) {
				ev.UUID = m.UUID
				break
			}
		}
		b.mu.Unlock()
	}
	return ev, true
}

// Close shuts NVML down if it was initialised.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.inited {
		return nil
	}
	b.inited = false
	if ret := b.lib.Shutdown(); ret != nv.SUCCESS {
		return fmt.Errorf("nvml shutdown: %s", ret.Error())
	}
	return nil
}
