// Package fake is a GPU backend that reads the node's GPUs from an HCL
// topology file instead of NVML, so that the plugin, the scheduler and the
// end-to-end tests run on machines without GPUs.
//
// # Topology file
//
//	driver_version      = "550.54.15"   # default 550.54.15
//	cuda_driver_version = 12040         # NVML encoding of CUDA 12.4 (default)
//	control_file        = "gpus.ctl"    # optional, relative to this file
//
//	gpu "gpu0" {                        # the label names it below
//	  uuid               = "GPU-5f1c..." # required, GPU-<hex/dashes>
//	  model              = "NVIDIA H100 80GB HBM3"  # required
//	  memory_mib         = 81559         # required
//	  index              = 0             # default: block order
//	  minor              = 0             # default: index
//	  pci_bus_id         = "00000000:18:00.0"  # default from the index
//	  numa_node          = 0             # default: unknown
//	  compute_capability = "9.0"         # default: unknown
//	  power_limit_w      = 700           # default: unknown
//	  pcie_generation    = 5             # default: unknown
//	  pcie_width         = 16            # default: unknown
//	  mig "3g.40gb" {                    # MIG instances (MIG mode on)
//	    uuid             = "MIG-..."
//	    memory_mib       = 40192
//	    gpu_instance     = 1             # default: position in the block
//	    compute_instance = 0             # default: 0
//	  }
//	}
//	nvlink {                 # a full mesh of direct links
//	  gpus  = ["gpu0", "gpu1"]
//	  links = 4              # links per pair, default 1
//	}
//	nvswitch {               # GPUs behind NVSwitches: one island
//	  gpus          = [...]  # default: all
//	  links_per_gpu = 18     # default 18
//	}
//	stats "gpu0" {           # initial stats (default: idle)
//	  utilization     = 80   # also memory_utilization, power_w,
//	  memory_used_mib = 1024 # temperature_c, ecc_corrected, ecc_uncorrected
//	}
//	event {                  # scripted, timed from backend start
//	  after = "30s"
//	  gpu   = "gpu3"
//	  xid   = 79             # or lost = true, or recover = true
//	}
//
// Every attribute sits on its own line (HCL allows one per one-line block).
//
// GPUs are referenced by label, UUID or index. Two GPUs on the same NUMA
// node meet at PCIe level NODE, otherwise SYS.
//
// # Control file
//
// A running backend follows the control file: every complete line appended
// to it is applied once, in order (a truncated file is read from the start
// again). Lines:
//
//	xid <gpu> <code>       an XID error
//	lost <gpu>             the GPU disappears (and is reported unhealthy)
//	recover <gpu>          the GPU is back and healthy
//	stats <gpu> utilization=85 memory_utilization=40 memory_used_mib=1024
//	            power_w=300 temperature_c=61 ecc_corrected=0 ecc_uncorrected=0
//
// Blank lines and lines starting with # are ignored; a bad line is logged
// with its line number and skipped. Conformance tests drive the built
// plugin binary through this file.
package fake

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/device/gpu"
)

// Backend is the fake gpu.Backend.
type Backend struct {
	topo   *Topology
	logger hclog.Logger
	now    func() time.Time
	start  time.Time

	mu      sync.Mutex
	lost    map[string]bool
	stats   map[string]gpu.Stats
	pending []gpu.HealthEvent
	notify  chan struct{}
	next    int   // next scripted event
	offset  int64 // control file bytes consumed
	lineNo  int

	cancel context.CancelFunc
	done   chan struct{}
}

var _ gpu.Backend = (*Backend)(nil)

// pollInterval is how often the control file and the scripted events are
// checked.
const pollInterval = 200 * time.Millisecond

// New starts a fake backend over a parsed topology. Scripted events are
// timed from now.
func New(topo *Topology, logger hclog.Logger) *Backend {
	return start(topo, logger, pollInterval, time.Now)
}

// start is New with the poll interval and the clock (the package's tests
// give theirs).
func start(topo *Topology, logger hclog.Logger, poll time.Duration, now func() time.Time) *Backend {
	b := &Backend{topo: topo, logger: logger.Named("fake"), now: now, start: now(),
		lost: map[string]bool{}, stats: map[string]gpu.Stats{}, notify: make(chan struct{}, 1), done: make(chan struct{})}
	for _, d := range topo.Inventory.Devices {
		b.stats[d.UUID] = gpu.Stats{UUID: d.UUID, HasUtilization: true, HasMemory: true, MemoryTotalMiB: d.MemoryMiB,
			HasPower: true, PowerW: 60, HasTemperature: true, TemperatureC: 32, HasECC: true}
	}
	for uuid, u := range topo.Stats {
		b.applyStats(uuid, u)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	b.Step()
	go b.loop(ctx, poll)
	return b
}

func (b *Backend) loop(ctx context.Context, every time.Duration) {
	defer close(b.done)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			b.Step()
		}
	}
}

// Step applies the scripted events that are due and the new lines of the
// control file. The backend calls it periodically; tests may call it to
// avoid waiting.
func (b *Backend) Step() {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.next < len(b.topo.Events) {
		ev := b.topo.Events[b.next]
		if now.Sub(b.start) < ev.After {
			// Events are applied in file order; a later one waits
			// for an earlier one that is not yet due.
			break
		}
		b.next++
		b.apply(ev.Action, now)
	}
	b.readControl(now)
}

// apply changes the state; b.mu is held.
func (b *Backend) apply(a Action, now time.Time) {
	b.logger.Info("injecting", "kind", a.Kind.String(), "gpu", a.UUID, "xid", a.XID)
	switch a.Kind {
	case ActXID:
		b.push(gpu.HealthEvent{UUID: a.UUID, Kind: gpu.EventXID, XID: a.XID, Time: now, Detail: "injected"})
	case ActLost:
		b.lost[a.UUID] = true
		b.push(gpu.HealthEvent{UUID: a.UUID, Kind: gpu.EventLost, Time: now, Detail: "injected"})
	case ActRecover:
		delete(b.lost, a.UUID)
		b.push(gpu.HealthEvent{UUID: a.UUID, Kind: gpu.EventRecovered, Time: now, Detail: "injected"})
	case ActStats:
		b.applyStats(a.UUID, a.Stats)
	}
}

func (b *Backend) push(ev gpu.HealthEvent) {
	b.pending = append(b.pending, ev)
	select {
	case b.notify <- struct{}{}:
	default:
	}
}

func (b *Backend) applyStats(uuid string, u StatsUpdate) {
	s, ok := b.stats[uuid]
	if !ok {
		return // a MIG instance: stats are per physical GPU
	}
	if u.Utilization != nil {
		s.UtilizationPct = *u.Utilization
	}
	if u.MemoryUtil != nil {
		s.MemoryUtilizationPct = *u.MemoryUtil
	}
	if u.MemoryUsedMiB != nil {
		s.MemoryUsedMiB = uint64(*u.MemoryUsedMiB)
	}
	if u.PowerW != nil {
		s.PowerW = *u.PowerW
	}
	if u.TemperatureC != nil {
		s.TemperatureC = *u.TemperatureC
	}
	if u.ECCCorrected != nil {
		s.ECCCorrected = uint64(*u.ECCCorrected)
	}
	if u.ECCUncorrected != nil {
		s.ECCUncorrected = uint64(*u.ECCUncorrected)
	}
	b.stats[uuid] = s
}

// Inventory returns the topology without the GPUs that are lost.
func (b *Backend) Inventory(ctx context.Context) (gpu.Inventory, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	src := b.topo.Inventory
	inv := gpu.Inventory{DriverVersion: src.DriverVersion, CUDADriverVersion: src.CUDADriverVersion, NVSwitch: src.NVSwitch}
	for _, d := range src.Devices {
		if b.lost[d.UUID] {
			continue
		}
		d.MIG = append([]gpu.MIGInstance(nil), d.MIG...)
		inv.Devices = append(inv.Devices, d)
	}
	for _, l := range src.Links {
		if !b.lost[l.A] && !b.lost[l.B] {
			inv.Links = append(inv.Links, l)
		}
	}
	return inv, nil
}

// Stats returns the current stats of the present GPUs among uuids.
func (b *Backend) Stats(ctx context.Context, uuids []string) ([]gpu.Stats, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	var out []gpu.Stats
	for _, id := range uuids {
		s, ok := b.stats[id]
		if !ok || b.lost[id] {
			continue
		}
		s.Time = now
		out = append(out, s)
	}
	return out, nil
}

// WatchHealth delivers injected health events until ctx ends. Events it
// could not deliver before ctx ended stay queued for the next watch: the
// plugin restarts its watch whenever the set of GPUs changes, and an XID
// injected meanwhile must not be lost.
func (b *Backend) WatchHealth(ctx context.Context, events chan<- gpu.HealthEvent) error {
	for {
		b.mu.Lock()
		batch := b.pending
		b.pending = nil
		b.mu.Unlock()
		for i, ev := range batch {
			select {
			case events <- ev:
			case <-ctx.Done():
				b.requeue(batch[i:])
				return ctx.Err()
			}
		}
		select {
		case <-b.notify:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// requeue puts undelivered events back in front of those pushed since.
func (b *Backend) requeue(evs []gpu.HealthEvent) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending = append(append([]gpu.HealthEvent(nil), evs...), b.pending...)
	select {
	case b.notify <- struct{}{}:
	default:
	}
}

// Close stops following the control file and the scripted events.
func (b *Backend) Close() error {
	b.cancel()
	<-b.done
	return nil
}
