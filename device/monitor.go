package device

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/device/gpu"
	"github.com/impact-sched/nomad-impact/plugin/proto/devicepb"
)

// errStopped is returned by a monitor that has been stopped (the plugin
// was reconfigured or shut down); callers move to the plugin's next one.
var errStopped = errors.New("device monitor stopped")

// monitor owns the node's device state and the backend it comes from: it
// scans the backend every fingerprint period, applies health events as
// they arrive, and publishes a new snapshot only when the device groups
// changed. Stopping it closes the backend.
type monitor struct {
	backend gpu.Backend
	s       settings
	logger  hclog.Logger
	now     func() time.Time

	mu      sync.Mutex
	snap    *snapshot
	version uint64
	changed chan struct{} // closed and replaced on every new version
	ready   chan struct{} // closed once the first snapshot exists

	// backendMu keeps stats reads off a backend being closed (a closed
	// NVML backend would initialise NVML again on the next call).
	backendMu sync.RWMutex
	closed    bool
	stopOnce  sync.Once
	stopped   chan struct{} // closed once stop has released the backend

	// Owned by the run goroutine.
	known       map[string]gpu.Device
	links       map[[2]string]gpu.Link
	meta        gpu.Inventory // driver/CUDA versions, NVSwitch
	present     map[string]bool
	health      *health
	unavailable string // last ErrUnavailable message logged

	cancel context.CancelFunc
	done   chan struct{}
}

func startMonitor(backend gpu.Backend, s settings, logger hclog.Logger, now func() time.Time) *monitor {
	ctx, cancel := context.WithCancel(context.Background())
	m := &monitor{backend: backend, s: s, logger: logger.Named("monitor"), now: now,
		changed: make(chan struct{}), ready: make(chan struct{}), stopped: make(chan struct{}),
		known: map[string]gpu.Device{}, links: map[[2]string]gpu.Link{}, present: map[string]bool{},
		health: newHealth(), cancel: cancel, done: make(chan struct{})}
	go m.run(ctx)
	return m
}

// stop ends the scans and the health watch, closes the backend and wakes
// everyone waiting in current. It may be called more than once.
func (m *monitor) stop() {
	m.stopOnce.Do(func() {
		m.cancel()
		<-m.done
		m.backendMu.Lock()
		m.closed = true
		if err := m.backend.Close(); err != nil {
			m.logger.Warn("closing the GPU backend", "error", err)
		}
		m.backendMu.Unlock()
		close(m.stopped)
	})
}

// current returns the latest snapshot and a channel closed when a newer
// one exists. It waits for the first snapshot; it fails with errStopped
// once the monitor is stopped, or with ctx's error.
func (m *monitor) current(ctx context.Context) (*snapshot, <-chan struct{}, error) {
	select {
	case <-m.ready:
	case <-m.stopped:
		return nil, nil, errStopped
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.snap, m.changed, nil
}

// stats samples the GPUs of snap, unless the monitor was stopped.
func (m *monitor) stats(ctx context.Context, snap *snapshot) (*devicepb.StatsResponse, error) {
	m.backendMu.RLock()
	defer m.backendMu.RUnlock()
	if m.closed {
		return nil, errStopped
	}
	return collectStats(ctx, m.backend, snap)
}

func (m *monitor) run(ctx context.Context) {
	defer close(m.done)
	m.scan(ctx)
	events := make(chan gpu.HealthEvent, 64)
	w := &watch{backend: m.backend, events: events}
	w.start(ctx)
	tick := time.NewTicker(m.s.period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			w.stop()
			return
		case err := <-w.done:
			if ctx.Err() == nil {
				// The source failed: until the next scan retries it,
				// only scans detect failures.
				m.logger.Error("health events stopped; retrying at the next scan", "error", err)
			}
			w.done = nil
		case <-tick.C:
			m.rescan(ctx, w)
			if w.done == nil {
				// Still failed (rescan restarts it only when the GPUs
				// changed): try again, once per period.
				w.stop()
				w.start(ctx)
			}
		case ev := <-events:
			if m.event(ev) {
				m.rescan(ctx, w) // the set of GPUs changes too
			}
		}
	}
}

// event applies a health event; it returns true when a rescan is due
// (the GPU vanished or came back).
func (m *monitor) event(ev gpu.HealthEvent) bool {
	msg, changed := m.health.event(ev)
	m.logger.Info("health event", "gpu", ev.UUID, "kind", ev.Kind.String(), "xid", ev.XID, "result", msg, "changed", changed)
	if ev.Kind == gpu.EventLost || ev.Kind == gpu.EventRecovered {
		return true
	}
	if changed {
		m.publish()
	}
	return false
}

// rescan scans, and when the set of GPUs changed restarts the health watch
// so that it covers exactly the present GPUs (a GPU that came back after a
// reset, or that appeared, has a new handle to register). Events the old
// watch still delivered are applied; a GPU lost or back among them means
// another scan, as for any such event.
func (m *monitor) rescan(ctx context.Context, w *watch) {
	for m.scan(ctx) {
		drained := w.stop()
		w.start(ctx)
		again := false
		for _, ev := range drained {
			again = m.event(ev) || again
		}
		if !again {
			return
		}
	}
}

// watch runs the backend's WatchHealth until stopped.
type watch struct {
	backend gpu.Backend
	events  chan gpu.HealthEvent
	cancel  context.CancelFunc
	done    chan error
}

func (w *watch) start(ctx context.Context) {
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.backend.WatchHealth(wctx, w.events) }()
	w.cancel, w.done = cancel, done
}

// stop cancels the watch and waits for it, keeping the events it still
// delivers meanwhile (so a backend blocked on sending cannot deadlock us).
func (w *watch) stop() []gpu.HealthEvent {
	if w.cancel == nil {
		return nil
	}
	w.cancel()
	var drained []gpu.HealthEvent
	for w.done != nil {
		select {
		case <-w.done:
			w.done = nil
		case ev := <-w.events:
			drained = append(drained, ev)
		}
	}
	w.cancel = nil
	return drained
}

// scan reads the backend's inventory and publishes if anything changed. It
// returns whether the set of present GPUs changed.
func (m *monitor) scan(ctx context.Context) bool {
	inv, err := m.backend.Inventory(ctx)
	switch {
	case errors.Is(err, gpu.ErrUnavailable):
		if err.Error() != m.unavailable {
			m.logger.Warn("no GPUs reported: backend unavailable", "backend", m.s.backend, "reason", err)
			m.unavailable = err.Error()
		}
		inv = gpu.Inventory{}
	case err != nil:
		// Keep what we know; a transient NVML error must not make
		// every GPU vanish from the node.
		m.logger.Error("GPU scan failed; keeping the previous state", "error", err)
		if m.snap == nil {
			m.publish()
		}
		return false
	default:
		if m.unavailable != "" {
			m.logger.Info("backend available again")
			m.unavailable = ""
		}
	}
	m.meta = gpu.Inventory{DriverVersion: inv.DriverVersion, CUDADriverVersion: inv.CUDADriverVersion, NVSwitch: inv.NVSwitch || m.meta.NVSwitch}
	present := map[string]bool{}
	for _, d := range inv.Devices {
		present[d.UUID] = true
		m.known[d.UUID] = d
	}
	for _, l := range inv.Links {
		m.links[linkKey(l.A, l.B)] = l
	}
	lost, recovered := m.health.scan(present, m.now())
	for _, id := range lost {
		m.logger.Warn("GPU lost", "gpu", id)
	}
	for _, id := range recovered {
		m.logger.Info("GPU recovered", "gpu", id)
	}
	membership := !sameSet(present, m.present)
	m.present = present
	m.publish()
	return membership
}

func sameSet(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func linkKey(a, b string) [2]string {
	if b < a {
		a, b = b, a
	}
	return [2]string{a, b}
}

// publish rebuilds the snapshot and makes it current if the groups differ.
func (m *monitor) publish() {
	st := nodeState{driverVersion: m.meta.DriverVersion, cudaDriverVersion: m.meta.CUDADriverVersion,
		nvswitch: m.meta.NVSwitch, present: m.present}
	for _, d := range m.known {
		st.devices = append(st.devices, d)
	}
	sort.Slice(st.devices, func(i, j int) bool { return st.devices[i].Index < st.devices[j].Index })
	for _, l := range m.links {
		st.links = append(st.links, l)
	}
	sort.Slice(st.links, func(i, j int) bool {
		if st.links[i].A != st.links[j].A {
			return st.links[i].A < st.links[j].A
		}
		return st.links[i].B < st.links[j].B
	})
	snap, err := buildSnapshot(st, m.health, m.s)
	if err != nil {
		m.logger.Error("cannot build the device state; keeping the previous one", "error", err)
		if m.snap != nil {
			return
		}
		snap = snapshot{byID: map[string]devInfo{}, present: map[string]bool{}}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	first := m.snap == nil
	if !first && reflect.DeepEqual(m.snap.groups, snap.groups) {
		// Same groups: no new version, but stats follow the scan.
		cp := *m.snap
		cp.present = snap.present
		m.snap = &cp
		return
	}
	m.snap = &snap
	m.version++
	close(m.changed)
	m.changed = make(chan struct{})
	if first {
		close(m.ready)
	}
	m.logger.Info("device groups changed", "version", m.version, "groups", sortedGroupNames(snap.groups))
}
