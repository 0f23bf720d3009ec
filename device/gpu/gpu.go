// Package gpu defines what the impact-gpu device plugin needs to know about
// the GPUs of a node, as plain structs, and the Backend interface that
// produces them.
//
// Two backends exist: device/gpu/nvml (the real hardware, through NVML) and
// device/gpu/fake (a topology file, so that everything above this package
// runs and is tested on machines without GPUs). Nothing outside
// device/gpu/nvml knows about NVML.
package gpu

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrUnavailable is returned (wrapped) by a backend that cannot see any GPU
// driver on this machine, e.g. because libnvidia-ml is not installed. The
// plugin then reports no devices instead of failing.
var ErrUnavailable = errors.New("GPU backend unavailable")

// Unknown marks an integer fact the backend could not read (NUMA node,
// PCIe generation, power limit...). It is never a valid value for those.
const Unknown = -1

// Device is one physical GPU.
type Device struct {
	// UUID is the stable NVML identifier ("GPU-..."); it is the Nomad
	// instance ID and must not change across plugin restarts.
	UUID string
	// Index is the NVML enumeration index (the order nvidia-smi shows).
	Index int
	// Minor is the device-node minor number (/dev/nvidia<Minor>), or
	// Unknown.
	Minor int
	// Model is the product name, e.g. "NVIDIA H100 80GB HBM3".
	Model string
	// MemoryMiB is the total framebuffer memory.
	MemoryMiB uint64
	// ComputeCapability is the CUDA compute capability, e.g. "9.0".
	ComputeCapability string
	// PowerLimitW is the power management limit in watts, or Unknown.
	PowerLimitW int
	// PCIeGeneration and PCIeWidth are the maximum link generation and
	// lane count, or Unknown.
	PCIeGeneration int
	PCIeWidth      int
	// NVLinkLinks is the number of active NVLink links of this GPU.
	NVLinkLinks int
	// NVLinkBandwidthGBps is the total bidirectional NVLink bandwidth of
	// this GPU in GB/s (0 without NVLink, or when the NVLink generation
	// is unknown).
	NVLinkBandwidthGBps int
	// PCIBusID is the PCI bus id as NVML prints it, e.g. "00000000:3B:00.0",
	// without trailing NUL bytes.
	PCIBusID string
	// NUMANode is the NUMA node the GPU is attached to, or Unknown.
	NUMANode int
	// MIGEnabled says MIG mode is on; the GPU is then offered as its MIG
	// instances only.
	MIGEnabled bool
	// MIG lists the MIG instances when MIGEnabled.
	MIG []MIGInstance
}

// MIGInstance is one MIG device carved out of a physical GPU.
type MIGInstance struct {
	// UUID is "MIG-..."; it is the Nomad instance ID.
	UUID string
	// Profile is the MIG profile, e.g. "1g.10gb" or "3g.40gb".
	Profile string
	// GPUInstanceID and ComputeInstanceID identify the instance inside
	// its parent (XID events name them).
	GPUInstanceID     int
	ComputeInstanceID int
	// IDsUnknown says the driver did not report the GPU or compute
	// instance ID, so the zero values above are not IDs (0 is a valid
	// one): consumers must not derive anything from them.
	IDsUnknown bool
	// MemoryMiB is the memory of this instance.
	MemoryMiB uint64
}

// PCIeLevel is the closest common PCIe ancestor of two GPUs, ordered from
// close to far as nvidia-smi topo prints them.
type PCIeLevel int

// PCIe levels. LevelUnknown means the backend could not tell.
const (
	LevelUnknown    PCIeLevel = iota
	LevelSingle               // PIX: one PCIe switch
	LevelMultiple             // PXB: several PCIe switches
	LevelHostBridge           // PHB: the same host bridge
	LevelNode                 // NODE: the same NUMA node, different host bridges
	LevelSystem               // SYS: across NUMA nodes (the SMP interconnect)
)

// String returns the nvidia-smi topo abbreviation.
func (l PCIeLevel) String() string {
	switch l {
	case LevelSingle:
		return "PIX"
	case LevelMultiple:
		return "PXB"
	case LevelHostBridge:
		return "PHB"
	case LevelNode:
		return "NODE"
	case LevelSystem:
		return "SYS"
	default:
		return "unknown"
	}
}

// Link describes how two GPUs (by UUID, A < B is not required) are
// connected. Backends report one Link per unordered pair they know about.
type Link struct {
	A, B string
	// NVLinks is the number of direct NVLink links between the two GPUs
	// (0 when they only meet through an NVSwitch or not at all).
	NVLinks int
	// NVLinkP2P says the two GPUs can talk peer-to-peer over NVLink,
	// directly or through an NVSwitch. This is what defines an island.
	NVLinkP2P bool
	// PCIe is their closest common PCIe ancestor.
	PCIe PCIeLevel
}

// Inventory is everything a backend knows about the node's GPUs at one
// moment.
type Inventory struct {
	// DriverVersion is the NVIDIA driver version, e.g. "550.54.15".
	DriverVersion string
	// CUDADriverVersion is the CUDA version the driver supports, encoded
	// as NVML does: major*1000 + minor*10 (12040 is 12.4); 0 if unknown.
	CUDADriverVersion int
	// Devices are the GPUs, in index order.
	Devices []Device
	// Links are the pairwise connections between Devices.
	Links []Link
	// NVSwitch says the GPUs' NVLinks go through NVSwitches.
	NVSwitch bool
}

// CUDAVersion renders CUDADriverVersion as "12.4", or "" if unknown.
func (inv Inventory) CUDAVersion() string {
	if inv.CUDADriverVersion <= 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d", inv.CUDADriverVersion/1000, (inv.CUDADriverVersion%1000)/10)
}

// EventKind says what a HealthEvent reports.
type EventKind int

// Health event kinds.
const (
	// EventXID is an XID error reported by the driver.
	EventXID EventKind = iota + 1
	// EventECC is an uncorrectable (double-bit) ECC error.
	EventECC
	// EventLost means the GPU fell off the bus or disappeared.
	EventLost
	// EventRecovered means the GPU is usable again (reset, reappeared).
	EventRecovered
)

// String names the kind for logs.
func (k EventKind) String() string {
	switch k {
	case EventXID:
		return "xid"
	case EventECC:
		return "ecc"
	case EventLost:
		return "lost"
	case EventRecovered:
		return "recovered"
	default:
		return fmt.Sprintf("EventKind(%d)", int(k))
	}
}

// HealthEvent is something that happened to a GPU.
type HealthEvent struct {
	// UUID is the physical GPU, or a MIG instance.
	UUID string
	Kind EventKind
	// XID is the XID number for EventXID.
	XID  int
	Time time.Time
	// Detail is free text from the backend, for the health description.
	Detail string
}

// applicationXIDs are XIDs caused by the application (illegal memory
// access, MMU fault in user code, ...), which say nothing about the GPU's
// health. NVIDIA's own device plugins skip the same set.
var applicationXIDs = map[int]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}

// CriticalXID reports whether an XID means the GPU is unhealthy.
func CriticalXID(xid int) bool {
	return !applicationXIDs[xid]
}

// Stats is one sample of a GPU's usage. A field whose Has* flag is false
// could not be read (the plugin then reports "N/A").
type Stats struct {
	UUID string
	Time time.Time

	HasUtilization bool
	// UtilizationPct is the GPU (SM) utilisation, 0-100.
	UtilizationPct int
	// MemoryUtilizationPct is the memory-controller utilisation, 0-100.
	MemoryUtilizationPct int

	HasMemory      bool
	MemoryUsedMiB  uint64
	MemoryTotalMiB uint64

	HasPower bool
	PowerW   float64

	HasTemperature bool
	TemperatureC   int

	HasECC bool
	// ECCCorrected and ECCUncorrected are volatile (since last driver
	// load) ECC error counts.
	ECCCorrected   uint64
	ECCUncorrected uint64
}

// Backend is a source of GPU facts. Implementations must be safe for
// concurrent use.
type Backend interface {
	// Inventory scans the GPUs. It returns an error wrapping
	// ErrUnavailable when the machine has no usable GPU driver.
	Inventory(ctx context.Context) (Inventory, error)
	// Stats samples the given GPUs (physical UUIDs). A GPU that cannot
	// be read is left out; the error is for a failure of the whole call.
	Stats(ctx context.Context, uuids []string) ([]Stats, error)
	// WatchHealth delivers health events until ctx ends. It returns when
	// ctx ends or when the event source fails for good.
	WatchHealth(ctx context.Context, events chan<- HealthEvent) error
	// Close releases the backend.
	Close() error
}

// PCIeLaneMBps is the usable bandwidth of one PCIe lane in one direction,
// in MB/s, by generation (after line-code overhead). 0 if unknown.
func PCIeLaneMBps(gen int) int {
	switch gen {
	case 1:
		return 250
	case 2:
		return 500
	case 3:
		return 985
	case 4:
		return 1969
	case 5:
		return 3938
	case 6:
		return 7563
	default:
		return 0
	}
}

// PCIeBandwidthMBps is the one-direction bandwidth of a link of the given
// generation and width, in MB/s; 0 when either is unknown.
func PCIeBandwidthMBps(gen, width int) int {
	if width <= 0 {
		return 0
	}
	return PCIeLaneMBps(gen) * width
}

// NVLinkLinkGBps is the bidirectional bandwidth of one NVLink link in
// GB/s for a GPU of the given compute capability major version: NVLink 1
// (Pascal, 6.x) carries 40 GB/s per link, NVLink 2-4 (Volta, Ampere,
// Hopper) 50 GB/s, NVLink 5 (Blackwell, 10+) 100 GB/s. It is 0 when the
// compute capability is unknown (or predates NVLink): not a guess.
func NVLinkLinkGBps(ccMajor int) int {
	switch {
	case ccMajor >= 10:
		return 100
	case ccMajor >= 7:
		return 50
	case ccMajor == 6:
		return 40
	default:
		return 0
	}
}
