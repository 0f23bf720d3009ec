//go:build linux && cgo

package nvml

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	nv "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/device/gpu"
)

// unsupported fills every method the backend may call and the mock leaves
// nil with "not supported", as a GPU lacking the feature answers. (moq
// mocks panic on nil methods, which would hide which calls are made.)
func unsupported(d *mock.Device) {
	ns := nv.ERROR_NOT_SUPPORTED
	if d.GetPowerManagementLimitFunc == nil {
		d.GetPowerManagementLimitFunc = func() (uint32, nv.Return) { return 0, ns }
	}
	if d.GetMaxPcieLinkGenerationFunc == nil {
		d.GetMaxPcieLinkGenerationFunc = func() (int, nv.Return) { return 0, ns }
	}
	if d.GetMaxPcieLinkWidthFunc == nil {
		d.GetMaxPcieLinkWidthFunc = func() (int, nv.Return) { return 0, ns }
	}
	if d.GetNumaNodeIdFunc == nil {
		d.GetNumaNodeIdFunc = func() (int, nv.Return) { return 0, ns }
	}
	if d.GetNvLinkStateFunc == nil {
		d.GetNvLinkStateFunc = func(int) (nv.EnableState, nv.Return) { return 0, ns }
	}
	if d.GetNvLinkRemoteDeviceTypeFunc == nil {
		d.GetNvLinkRemoteDeviceTypeFunc = func(int) (nv.IntNvLinkDeviceType, nv.Return) { return 0, ns }
	}
	if d.GetNvLinkRemotePciInfoFunc == nil {
		d.GetNvLinkRemotePciInfoFunc = func(int) (nv.PciInfo, nv.Return) { return nv.PciInfo{}, ns }
	}
	if d.GetP2PStatusFunc == nil {
		d.GetP2PStatusFunc = func(nv.Device, nv.GpuP2PCapsIndex) (nv.GpuP2PStatus, nv.Return) {
			return nv.P2P_STATUS_NOT_SUPPORTED, nv.SUCCESS
		}
	}
	if d.GetTopologyCommonAncestorFunc == nil {
		d.GetTopologyCommonAncestorFunc = func(nv.Device) (nv.GpuTopologyLevel, nv.Return) { return 0, ns }
	}
	if d.GetMigModeFunc == nil {
		d.GetMigModeFunc = func() (int, int, nv.Return) { return 0, 0, ns }
	}
	if d.GetUtilizationRatesFunc == nil {
		d.GetUtilizationRatesFunc = func() (nv.Utilization, nv.Return) { return nv.Utilization{}, ns }
	}
	if d.GetPowerUsageFunc == nil {
		d.GetPowerUsageFunc = func() (uint32, nv.Return) { return 0, ns }
	}
	if d.GetTemperatureFunc == nil {
		d.GetTemperatureFunc = func(nv.TemperatureSensors) (uint32, nv.Return) { return 0, ns }
	}
	if d.GetTotalEccErrorsFunc == nil {
		d.GetTotalEccErrorsFunc = func(nv.MemoryErrorType, nv.EccCounterType) (uint64, nv.Return) { return 0, ns }
	}
}

func busBytes(s string) [32]int8 {
	var out [32]int8
	for i := 0; i < len(s) && i < 31; i++ {
		out[i] = int8(s[i])
	}
	return out
}

// dgx prepares a dgx mock server: every device gets its bus id filled in
// (the stock mock leaves it empty) and unsupported for the rest.
func dgx(s *server.Server) *server.Server {
	for _, d := range s.Devices {
		sd := d.(*server.Device)
		bus := strings.ToUpper(fmt.Sprintf("0000%s", sd.PciBusID))
		info := nv.PciInfo{BusId: busBytes(bus), PciDeviceId: sd.Config.PciDeviceId}
		sd.GetPciInfoFunc = func() (nv.PciInfo, nv.Return) { return info, nv.SUCCESS }
		unsupported(&sd.Device)
	}
	return s
}

// nvswitch wires an NVSwitch fabric into a dgx server: links per GPU to
// switches and NVLink P2P between all pairs.
func nvswitch(s *server.Server, links int) {
	for _, d := range s.Devices {
		sd := d.(*server.Device)
		sd.GetNvLinkStateFunc = func(l int) (nv.EnableState, nv.Return) {
			if l < links {
				return nv.FEATURE_ENABLED, nv.SUCCESS
			}
			return nv.FEATURE_DISABLED, nv.SUCCESS
		}
		sd.GetNvLinkRemoteDeviceTypeFunc = func(int) (nv.IntNvLinkDeviceType, nv.Return) {
			return nv.NVLINK_DEVICE_TYPE_SWITCH, nv.SUCCESS
		}
		sd.GetP2PStatusFunc = func(other nv.Device, idx nv.GpuP2PCapsIndex) (nv.GpuP2PStatus, nv.Return) {
			if idx == nv.P2P_CAPS_INDEX_NVLINK && other != nv.Device(sd) {
				return nv.P2P_STATUS_OK, nv.SUCCESS
			}
			return nv.P2P_STATUS_NOT_SUPPORTED, nv.SUCCESS
		}
	}
}

func newBackend(lib nv.Interface) *Backend {
	b := newWithLibrary(lib, hclog.NewNullLogger())
	b.sysfsRoot, b.eventWait = "/nonexistent", 10*time.Millisecond
	return b
}

func islandsOf(inv gpu.Inventory) map[string]int {
	// Tiny union-find over NVLink P2P, enough to check backend output.
	parent := map[string]string{}
	for _, d := range inv.Devices {
		parent[d.UUID] = d.UUID
	}
	find := func(x string) string {
		for parent[x] != x {
			x = parent[x]
		}
		return x
	}
	for _, l := range inv.Links {
		if l.NVLinkP2P {
			parent[find(l.B)] = find(l.A)
		}
	}
	roots := map[string]int{}
	for _, d := range inv.Devices {
		roots[find(d.UUID)]++
	}
	out := map[string]int{}
	for r, n := range roots {
		out[r] = n
	}
	return out
}

func TestDGXServers(t *testing.T) {
	cases := []struct {
		name     string
		server   *server.Server
		model    string
		mem      uint64
		cc       string
		links    int
		nvlinkBW int
	}{
		{"dgxa100", dgxa100.New(), "Mock NVIDIA A100-SXM4-40GB", 40960, "8.0", 12, 600},
		{"dgxh100", dgxh100.New(), "NVIDIA H100 80GB HBM3", 81920, "9.0", 18, 900},
		{"dgxh200", dgxh200.New(), "NVIDIA H200 141GB HBM3e", 144384, "9.0", 18, 900},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := dgx(tc.server)
			nvswitch(s, tc.links)
			b := newBackend(s)
			defer b.Close()
			inv, err := b.Inventory(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if inv.DriverVersion != "550.54.15" || inv.CUDAVersion() != "12.4" || !inv.NVSwitch {
				t.Fatalf("driver %q cuda %q nvswitch %v", inv.DriverVersion, inv.CUDAVersion(), inv.NVSwitch)
			}
			if len(inv.Devices) != 8 {
				t.Fatalf("%d devices, want 8", len(inv.Devices))
			}
			for i, d := range inv.Devices {
				if d.Model != tc.model || d.MemoryMiB != tc.mem || d.ComputeCapability != tc.cc || d.Index != i || d.Minor != i {
					t.Fatalf("device %d = %+v", i, d)
				}
				if want := fmt.Sprintf("00000000:%02X:00.0", i); d.PCIBusID != want {
					t.Fatalf("bus id %q, want %q", d.PCIBusID, want)
				}
				if d.NVLinkLinks != tc.links || d.NVLinkBandwidthGBps != tc.nvlinkBW {
					t.Fatalf("nvlink %d links %d GB/s, want %d, %d", d.NVLinkLinks, d.NVLinkBandwidthGBps, tc.links, tc.nvlinkBW)
				}
				if d.NUMANode != gpu.Unknown || d.PowerLimitW != gpu.Unknown {
					t.Fatalf("unsupported facts not Unknown: %+v", d)
				}
			}
			if len(inv.Links) != 28 {
				t.Fatalf("%d links, want 28 pairs", len(inv.Links))
			}
			isl := islandsOf(inv)
			if len(isl) != 1 {
				t.Fatalf("islands %v, want one island of 8", isl)
			}
		})
	}
}

func TestStockMockHasNoNVLink(t *testing.T) {
	b := newBackend(dgx(dgxa100.New()))
	inv, err := b.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(islandsOf(inv)) != 8 || inv.NVSwitch {
		t.Fatalf("without NVLink every GPU must be its own island: %v", islandsOf(inv))
	}
}

// fakeGPU is a hand-built mock GPU with the basics set.
func fakeGPU(i int) *mock.Device {
	uuid := fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", i)
	bus := fmt.Sprintf("00000000:%02X:00.0", 0x10+i)
	d := &mock.Device{
		GetUUIDFunc:                  func() (string, nv.Return) { return uuid, nv.SUCCESS },
		GetIndexFunc:                 func() (int, nv.Return) { return i, nv.SUCCESS },
		GetMinorNumberFunc:           func() (int, nv.Return) { return i, nv.SUCCESS },
		GetNameFunc:                  func() (string, nv.Return) { return "NVIDIA A100-SXM4-80GB", nv.SUCCESS },
		GetMemoryInfoFunc:            func() (nv.Memory, nv.Return) { return nv.Memory{Total: 80 << 30, Used: 1 << 30}, nv.SUCCESS },
		GetCudaComputeCapabilityFunc: func() (int, int, nv.Return) { return 8, 0, nv.SUCCESS },
		GetPciInfoFunc: func() (nv.PciInfo, nv.Return) {
			return nv.PciInfo{BusId: busBytes(bus), Domain: 0, Bus: uint32(0x10 + i)}, nv.SUCCESS
		},
		GetPowerManagementLimitFunc:  func() (uint32, nv.Return) { return 400000, nv.SUCCESS },
		GetMaxPcieLinkGenerationFunc: func() (int, nv.Return) { return 4, nv.SUCCESS },
		GetMaxPcieLinkWidthFunc:      func() (int, nv.Return) { return 16, nv.SUCCESS },
	}
	unsupported(d)
	return d
}

// library wraps mock devices in a mock NVML with the given symbols missing.
func library(devs []*mock.Device, missing ...string) *mock.Interface {
	ext := &mock.ExtendedInterface{LookupSymbolFunc: func(s string) error {
		for _, m := range missing {
			if s == m {
				return errors.New("symbol not found")
			}
		}
		return nil
	}}
	return &mock.Interface{
		InitFunc:                       func() nv.Return { return nv.SUCCESS },
		ShutdownFunc:                   func() nv.Return { return nv.SUCCESS },
		ExtensionsFunc:                 func() nv.ExtendedInterface { return ext },
		SystemGetDriverVersionFunc:     func() (string, nv.Return) { return "560.35.03", nv.SUCCESS },
		SystemGetCudaDriverVersionFunc: func() (int, nv.Return) { return 12060, nv.SUCCESS },
		DeviceGetCountFunc:             func() (int, nv.Return) { return len(devs), nv.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nv.Device, nv.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nv.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nv.SUCCESS
		},
		DeviceGetHandleByUUIDFunc: func(uuid string) (nv.Device, nv.Return) {
			for _, d := range devs {
				if u, _ := d.GetUUID(); u == uuid {
					return d, nv.SUCCESS
				}
			}
			return nil, nv.ERROR_NOT_FOUND
		},
	}
}

// twoIslands wires 8 GPUs as two 4-GPU NVLink meshes: 4 direct links to
// each island peer (12 links per GPU), NODE inside an island, SYS across.
func twoIslands() []*mock.Device {
	devs := make([]*mock.Device, 8)
	for i := range devs {
		devs[i] = fakeGPU(i)
	}
	for i, d := range devs {
		island := i / 4
		var peers []int
		for j := island * 4; j < island*4+4; j++ {
			if j != i {
				peers = append(peers, j)
			}
		}
		d.GetNvLinkStateFunc = func(l int) (nv.EnableState, nv.Return) {
			if l >= nv.NVLINK_MAX_LINKS {
				return 0, nv.ERROR_INVALID_ARGUMENT
			}
			if l < 12 {
				return nv.FEATURE_ENABLED, nv.SUCCESS
			}
			return nv.FEATURE_DISABLED, nv.SUCCESS
		}
		d.GetNvLinkRemoteDeviceTypeFunc = func(int) (nv.IntNvLinkDeviceType, nv.Return) { return nv.NVLINK_DEVICE_TYPE_GPU, nv.SUCCESS }
		d.GetNvLinkRemotePciInfoFunc = func(l int) (nv.PciInfo, nv.Return) {
			return devs[peers[l/4]].GetPciInfo()
		}
		d.GetTopologyCommonAncestorFunc = func(other nv.Device) (nv.GpuTopologyLevel, nv.Return) {
			for j := range devs {
				if nv.Device(devs[j]) == other {
					if j/4 == island {
						return nv.TOPOLOGY_NODE, nv.SUCCESS
					}
					return nv.TOPOLOGY_SYSTEM, nv.SUCCESS
				}
			}
			return 0, nv.ERROR_INVALID_ARGUMENT
		}
	}
	return devs
}

func TestTwoIslandsFromRemotePCI(t *testing.T) {
	devs := twoIslands()
	// An old driver: no P2P status call and no remote device type; the
	// islands must come from the remote bus ids alone, and the missing
	// calls must never be made.
	lib := library(devs, "nvmlDeviceGetP2PStatus", "nvmlDeviceGetNvLinkRemoteDeviceType", "nvmlDeviceGetNumaNodeId")
	for _, d := range devs {
		d.GetP2PStatusFunc = nil
		d.GetNvLinkRemoteDeviceTypeFunc = nil
		d.GetNumaNodeIdFunc = nil
	}
	sysfs := t.TempDir()
	for i := range devs {
		dir := filepath.Join(sysfs, "bus", "pci", "devices", fmt.Sprintf("0000:%02x:00.0", 0x10+i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "numa_node"), []byte(fmt.Sprintf("%d\n", i/4)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b := newWithLibrary(lib, hclog.NewNullLogger())
	b.sysfsRoot = sysfs
	inv, err := b.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if inv.NVSwitch {
		t.Fatal("direct links reported as NVSwitch")
	}
	for i, d := range inv.Devices {
		if d.NUMANode != i/4 || d.NVLinkLinks != 12 || d.NVLinkBandwidthGBps != 600 || d.PowerLimitW != 400 ||
			d.PCIeGeneration != 4 || d.PCIeWidth != 16 || d.MemoryMiB != 81920 {
			t.Fatalf("device %d = %+v", i, d)
		}
	}
	isl := islandsOf(inv)
	if len(isl) != 2 {
		t.Fatalf("islands %v, want 2", isl)
	}
	for _, n := range isl {
		if n != 4 {
			t.Fatalf("islands %v, want 2 of 4", isl)
		}
	}
	for _, l := range inv.Links {
		var a, c int
		fmt.Sscanf(l.A, "GPU-%08d", &a)
		fmt.Sscanf(l.B, "GPU-%08d", &c)
		same := a/4 == c/4
		if same && (l.NVLinks != 4 || l.PCIe != gpu.LevelNode) || !same && (l.NVLinks != 0 || l.PCIe != gpu.LevelSystem) {
			t.Fatalf("link %+v", l)
		}
	}
}

func TestLibraryMissingNeverCallsNVML(t *testing.T) {
	// Only Init is set: any other call would panic on the nil func, as
	// the real library would kill the process.
	lib := &mock.Interface{InitFunc: func() nv.Return { return nv.ERROR_LIBRARY_NOT_FOUND }}
	b := newBackend(lib)
	_, err := b.Inventory(context.Background())
	if !errors.Is(err, gpu.ErrUnavailable) || !strings.Contains(err.Error(), "libnvidia-ml.so.1") {
		t.Fatalf("err = %v, want ErrUnavailable naming the library", err)
	}
	if _, err := b.Stats(context.Background(), []string{"GPU-x"}); !errors.Is(err, gpu.ErrUnavailable) {
		t.Fatalf("stats err = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := b.WatchHealth(ctx, make(chan gpu.HealthEvent)); err != nil {
		t.Fatalf("watch: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if n := len(lib.InitCalls()); n < 2 {
		t.Fatalf("Init called %d times, want a retry per call", n)
	}
}

func TestInitOtherError(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nv.Return { return nv.ERROR_NO_PERMISSION }}
	_, err := newBackend(lib).Inventory(context.Background())
	if err == nil || errors.Is(err, gpu.ErrUnavailable) || !strings.Contains(err.Error(), "nvml init") {
		t.Fatalf("err = %v, want a plain init error", err)
	}
}

func TestBusID(t *testing.T) {
	cases := []struct {
		pci  nv.PciInfo
		want string
	}{
		{nv.PciInfo{BusId: busBytes("00000000:3B:00.0")}, "00000000:3B:00.0"},
		{nv.PciInfo{Domain: 1, Bus: 0x3b, Device: 2}, "00000001:3B:02.0"},
		{nv.PciInfo{}, ""},
	}
	for _, tc := range cases {
		if got := BusID(tc.pci); got != tc.want || strings.ContainsRune(got, 0) {
			t.Errorf("BusID(%+v) = %q, want %q", tc.pci, got, tc.want)
		}
	}
	if got := SysfsBusID("00000000:3B:00.0"); got != "0000:3b:00.0" {
		t.Errorf("SysfsBusID = %q", got)
	}
}

func TestMIGInstances(t *testing.T) {
	parent := fakeGPU(0)
	var children []*mock.Device
	for k := 0; k < 3; k++ {
		uuid := fmt.Sprintf("MIG-%08d-0000-0000-0000-000000000000", k)
		gi := 7 + k
		children = append(children, &mock.Device{
			GetUUIDFunc:              func() (string, nv.Return) { return uuid, nv.SUCCESS },
			GetNameFunc:              func() (string, nv.Return) { return "NVIDIA A100-SXM4-80GB MIG 1g.10gb", nv.SUCCESS },
			GetGpuInstanceIdFunc:     func() (int, nv.Return) { return gi, nv.SUCCESS },
			GetComputeInstanceIdFunc: func() (int, nv.Return) { return 0, nv.SUCCESS },
			GetMemoryInfoFunc:        func() (nv.Memory, nv.Return) { return nv.Memory{Total: 9728 << 20}, nv.SUCCESS },
		})
	}
	parent.GetMigModeFunc = func() (int, int, nv.Return) { return nv.DEVICE_MIG_ENABLE, nv.DEVICE_MIG_ENABLE, nv.SUCCESS }
	parent.GetMaxMigDeviceCountFunc = func() (int, nv.Return) { return 7, nv.SUCCESS }
	parent.GetMigDeviceHandleByIndexFunc = func(j int) (nv.Device, nv.Return) {
		if j < len(children) {
			return children[j], nv.SUCCESS
		}
		return nil, nv.ERROR_NOT_FOUND
	}
	b := newBackend(library([]*mock.Device{parent}))
	inv, err := b.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	d := inv.Devices[0]
	if !d.MIGEnabled || len(d.MIG) != 3 {
		t.Fatalf("MIG %v %+v", d.MIGEnabled, d.MIG)
	}
	if m := d.MIG[1]; m.Profile != "1g.10gb" || m.MemoryMiB != 9728 || m.GPUInstanceID != 8 || !strings.HasPrefix(m.UUID, "MIG-") {
		t.Fatalf("MIG instance %+v", m)
	}
	// A MIG-scoped XID names the instance.
	ev, ok := b.toEvent(nv.EventData{Device: parent, EventType: nv.EventTypeXidCriticalError, EventData: 94, GpuInstanceId: 8, ComputeInstanceId: 0})
	if !ok || ev.UUID != d.MIG[1].UUID || ev.XID != 94 {
		t.Fatalf("event %+v", ev)
	}
	for _, m := range d.MIG {
		if m.IDsUnknown {
			t.Fatalf("instance %s marked IDsUnknown though the driver reported its IDs", m.UUID)
		}
	}
}

func TestMIGInstanceIDsUnreadable(t *testing.T) {
	parent := fakeGPU(0)
	child := &mock.Device{
		GetUUIDFunc:              func() (string, nv.Return) { return "MIG-00000000-0000-0000-0000-000000000009", nv.SUCCESS },
		GetNameFunc:              func() (string, nv.Return) { return "NVIDIA A100-SXM4-80GB MIG 7g.80gb", nv.SUCCESS },
		GetGpuInstanceIdFunc:     func() (int, nv.Return) { return 0, nv.ERROR_NOT_SUPPORTED },
		GetComputeInstanceIdFunc: func() (int, nv.Return) { return 0, nv.SUCCESS },
		GetMemoryInfoFunc:        func() (nv.Memory, nv.Return) { return nv.Memory{Total: 80 << 30}, nv.SUCCESS },
	}
	parent.GetMigModeFunc = func() (int, int, nv.Return) { return nv.DEVICE_MIG_ENABLE, nv.DEVICE_MIG_ENABLE, nv.SUCCESS }
	parent.GetMaxMigDeviceCountFunc = func() (int, nv.Return) { return 1, nv.SUCCESS }
	parent.GetMigDeviceHandleByIndexFunc = func(int) (nv.Device, nv.Return) { return child, nv.SUCCESS }
	b := newBackend(library([]*mock.Device{parent}))
	inv, err := b.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := inv.Devices[0].MIG
	if len(m) != 1 || !m[0].IDsUnknown {
		t.Fatalf("MIG %+v, want one instance with IDsUnknown", m)
	}
	// GI 0 is a real ID; an instance whose ID is unknown must not take
	// the XIDs of GI 0 (they stay on the parent).
	ev, ok := b.toEvent(nv.EventData{Device: parent, EventType: nv.EventTypeXidCriticalError, EventData: 94, GpuInstanceId: 0, ComputeInstanceId: 0})
	if !ok || ev.UUID != inv.Devices[0].UUID {
		t.Fatalf("event %+v, want it on the parent", ev)
	}
}

func TestStatsUnits(t *testing.T) {
	devs := []*mock.Device{fakeGPU(0), fakeGPU(1)}
	devs[0].GetUtilizationRatesFunc = func() (nv.Utilization, nv.Return) { return nv.Utilization{Gpu: 87, Memory: 40}, nv.SUCCESS }
	devs[0].GetPowerUsageFunc = func() (uint32, nv.Return) { return 312500, nv.SUCCESS }
	devs[0].GetTemperatureFunc = func(nv.TemperatureSensors) (uint32, nv.Return) { return 64, nv.SUCCESS }
	devs[0].GetTotalEccErrorsFunc = func(k nv.MemoryErrorType, _ nv.EccCounterType) (uint64, nv.Return) {
		if k == nv.MEMORY_ERROR_TYPE_CORRECTED {
			return 5, nv.SUCCESS
		}
		return 1, nv.SUCCESS
	}
	b := newBackend(library(devs))
	ctx := context.Background()
	if _, err := b.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := b.Stats(ctx, []string{"GPU-00000000-0000-0000-0000-000000000000", "GPU-00000001-0000-0000-0000-000000000000", "GPU-gone"})
	if err != nil || len(st) != 2 {
		t.Fatalf("stats %+v %v", st, err)
	}
	s := st[0]
	if !s.HasUtilization || s.UtilizationPct != 87 || s.MemoryUtilizationPct != 40 || s.PowerW != 312.5 ||
		s.TemperatureC != 64 || s.MemoryUsedMiB != 1024 || s.MemoryTotalMiB != 81920 || s.ECCCorrected != 5 || s.ECCUncorrected != 1 {
		t.Fatalf("stats %+v", s)
	}
	if s := st[1]; s.HasUtilization || s.HasPower || s.HasTemperature || s.HasECC || !s.HasMemory {
		t.Fatalf("unsupported readings not marked absent: %+v", s)
	}
}

func TestWatchHealthXIDs(t *testing.T) {
	devs := twoIslands()
	var mu sync.Mutex
	queue := []nv.EventData{
		{Device: devs[3], EventType: nv.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: allInstances, ComputeInstanceId: allInstances},
		{Device: devs[1], EventType: nv.EventTypeXidCriticalError, EventData: 13, GpuInstanceId: allInstances, ComputeInstanceId: allInstances},
		{Device: devs[5], EventType: nv.EventTypeDoubleBitEccError, GpuInstanceId: allInstances, ComputeInstanceId: allInstances},
		{Device: devs[6], EventType: nv.EventTypeGpuUnavailableError, GpuInstanceId: allInstances, ComputeInstanceId: allInstances},
	}
	set := &mock.EventSet{
		WaitFunc: func(ms uint32) (nv.EventData, nv.Return) {
			mu.Lock()
			defer mu.Unlock()
			if len(queue) == 0 {
				time.Sleep(time.Duration(ms) * time.Millisecond)
				return nv.EventData{}, nv.ERROR_TIMEOUT
			}
			ev := queue[0]
			queue = queue[1:]
			return ev, nv.SUCCESS
		},
		FreeFunc: func() nv.Return { return nv.SUCCESS },
	}
	var registered sync.Map
	for i, d := range devs {
		d.GetSupportedEventTypesFunc = func() (uint64, nv.Return) { return nv.EventTypeAll, nv.SUCCESS }
		d.RegisterEventsFunc = func(mask uint64, _ nv.EventSet) nv.Return {
			registered.Store(i, mask)
			return nv.SUCCESS
		}
	}
	lib := library(devs)
	lib.EventSetCreateFunc = func() (nv.EventSet, nv.Return) { return set, nv.SUCCESS }
	b := newBackend(lib)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := b.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	events := make(chan gpu.HealthEvent)
	done := make(chan error, 1)
	go func() { done <- b.WatchHealth(ctx, events) }()
	want := []struct {
		idx  int
		kind gpu.EventKind
		xid  int
	}{{3, gpu.EventXID, 79}, {1, gpu.EventXID, 13}, {5, gpu.EventECC, 0}, {6, gpu.EventLost, 0}}
	for _, w := range want {
		select {
		case ev := <-events:
			uuid, _ := devs[w.idx].GetUUID()
			if ev.UUID != uuid || ev.Kind != w.kind || ev.XID != w.xid {
				t.Fatalf("event %+v, want %+v", ev, w)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no event within 5s")
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("watch returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not stop")
	}
	n := 0
	registered.Range(func(_, v any) bool {
		n++
		if v.(uint64) != uint64(healthEvents) {
			t.Errorf("registered mask %#x, want %#x", v, uint64(healthEvents))
		}
		return true
	})
	if n != 8 {
		t.Fatalf("registered %d GPUs, want 8", n)
	}
	if len(set.FreeCalls()) != 1 {
		t.Fatalf("event set freed %d times", len(set.FreeCalls()))
	}
}

func TestWatchHealthWaitError(t *testing.T) {
	devs := []*mock.Device{fakeGPU(0)}
	devs[0].GetSupportedEventTypesFunc = func() (uint64, nv.Return) { return 0, nv.ERROR_NOT_SUPPORTED }
	lib := library(devs)
	lib.EventSetCreateFunc = func() (nv.EventSet, nv.Return) {
		return &mock.EventSet{
			WaitFunc: func(uint32) (nv.EventData, nv.Return) { return nv.EventData{}, nv.ERROR_UNKNOWN },
			FreeFunc: func() nv.Return { return nv.SUCCESS },
		}, nv.SUCCESS
	}
	b := newBackend(lib)
	if _, err := b.Inventory(context.Background()); err != nil {
		t.Fatal(err)
	}
	err := b.WatchHealth(context.Background(), make(chan gpu.HealthEvent))
	if err == nil || !strings.Contains(err.Error(), "event wait") {
		t.Fatalf("err = %v", err)
	}
}

// TestScanErrors: a GPU that cannot be opened or read is left out (the
// plugin then reports it lost); a failing device count is a plain error
// (the plugin keeps its last state), not ErrUnavailable (which would make
// every GPU vanish); a driver that is not loaded is ErrUnavailable.
func TestScanErrors(t *testing.T) {
	devs := []*mock.Device{fakeGPU(0), fakeGPU(1), fakeGPU(2)}
	devs[2].GetUUIDFunc = func() (string, nv.Return) { return "", nv.ERROR_GPU_IS_LOST }
	lib := library(devs)
	open := lib.DeviceGetHandleByIndexFunc
	lib.DeviceGetHandleByIndexFunc = func(i int) (nv.Device, nv.Return) {
		if i == 1 {
			return nil, nv.ERROR_GPU_IS_LOST
		}
		return open(i)
	}
	b := newBackend(lib)
	inv, err := b.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Devices) != 1 || inv.Devices[0].Index != 0 || len(inv.Links) != 0 {
		t.Fatalf("inventory %+v, want GPU 0 alone", inv.Devices)
	}

	lib.DeviceGetCountFunc = func() (int, nv.Return) { return 0, nv.ERROR_UNKNOWN }
	if _, err := b.Inventory(context.Background()); err == nil || errors.Is(err, gpu.ErrUnavailable) || !strings.Contains(err.Error(), "device count") {
		t.Fatalf("failing count: err = %v, want a plain error", err)
	}

	noDriver := &mock.Interface{InitFunc: func() nv.Return { return nv.ERROR_DRIVER_NOT_LOADED }}
	if _, err := newBackend(noDriver).Inventory(context.Background()); !errors.Is(err, gpu.ErrUnavailable) || !strings.Contains(err.Error(), "driver not loaded") {
		t.Fatalf("driver not loaded: err = %v, want ErrUnavailable saying so", err)
	}
}

// TestEventWithoutUUIDIsDropped: an event whose GPU cannot name itself is
// not attributed to anything (and does not crash the watch).
func TestEventWithoutUUIDIsDropped(t *testing.T) {
	lost := &mock.Device{GetUUIDFunc: func() (string, nv.Return) { return "", nv.ERROR_GPU_IS_LOST }}
	b := newBackend(library(nil))
	for _, data := range []nv.EventData{
		{Device: lost, EventType: nv.EventTypeXidCriticalError, EventData: 79},
		{Device: nil, EventType: nv.EventTypeXidCriticalError, EventData: 79},
		{Device: fakeGPU(0), EventType: nv.EventTypeSingleBitEccError},
	} {
		if ev, ok := b.toEvent(data); ok {
			t.Errorf("event %+v from %+v", ev, data)
		}
	}
}
