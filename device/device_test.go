package device

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/impact-sched/nomad-impact/device/gpu"
	"github.com/impact-sched/nomad-impact/plugin/plugintest"
	"github.com/impact-sched/nomad-impact/plugin/proto/devicepb"
)

// scripted is a test backend whose inventory and events the test sets.
type scripted struct {
	mu      sync.Mutex
	inv     gpu.Inventory
	err     error
	scans   int
	watches int
	events  chan gpu.HealthEvent
	scanned chan struct{}
}

func newScripted(inv gpu.Inventory) *scripted {
	return &scripted{inv: inv, events: make(chan gpu.HealthEvent, 8), scanned: make(chan struct{}, 64)}
}

func (s *scripted) Inventory(context.Context) (gpu.Inventory, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scans++
	select {
	case s.scanned <- struct{}{}:
	default:
	}
	return s.inv, s.err
}

func (s *scripted) Stats(_ context.Context, uuids []string) ([]gpu.Stats, error) {
	var out []gpu.Stats
	for _, id := range uuids {
		out = append(out, gpu.Stats{UUID: id, Time: time.Unix(1700000000, 0), HasUtilization: true, UtilizationPct: 42})
	}
	return out, nil
}

func (s *scripted) WatchHealth(ctx context.Context, out chan<- gpu.HealthEvent) error {
	s.mu.Lock()
	s.watches++
	s.mu.Unlock()
	for {
		select {
		case ev := <-s.events:
			out <- ev
		case <-ctx.Done():
			return nil
		}
	}
}

func (s *scripted) Close() error { return nil }

func (s *scripted) set(f func(*gpu.Inventory)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.inv)
}

func twoGPUs() gpu.Inventory {
	d := func(i int) gpu.Device {
		return gpu.Device{UUID: fmt.Sprintf("GPU-%d", i), Index: i, Minor: i, Model: "Test", MemoryMiB: 1000,
			PCIBusID: fmt.Sprintf("00000000:%02X:00.0", i+1), NUMANode: 0, PowerLimitW: gpu.Unknown,
			PCIeGeneration: gpu.Unknown, PCIeWidth: gpu.Unknown}
	}
	return gpu.Inventory{DriverVersion: "1.2.3", Devices: []gpu.Device{d(0), d(1)},
		Links: []gpu.Link{{A: "GPU-0", B: "GPU-1", NVLinks: 2, NVLinkP2P: true}}}
}

func start(t *testing.T, b gpu.Backend, cfg string) *plugintest.Instance {
	t.Helper()
	p := New(hclog.NewNullLogger(), Options{NewBackend: func(string, string, hclog.Logger) (gpu.Backend, error) { return b, nil }})
	t.Cleanup(p.Shutdown)
	inst := plugintest.StartDevice(t, p)
	if err := inst.SetConfigHCL(context.Background(), cfg, plugintest.DefaultNomadConfig()); err != nil {
		t.Fatal(err)
	}
	return inst
}

func TestStatsBeforeFingerprint(t *testing.T) {
	inst := start(t, newScripted(twoGPUs()), "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := inst.Device.Stats(ctx, &devicepb.StatsRequest{CollectionInterval: durationpb.New(20 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for _, g := range resp.GetGroups() {
		for _, ds := range g.GetInstanceStats() {
			got++
			if ds.GetSummary().GetIntNumeratorVal().GetValue() != 42 || ds.GetTimestamp().AsTime().Unix() != 1700000000 {
				t.Fatalf("stats %v", ds)
			}
			if v := ds.GetStats().GetAttributes()[StatPower]; v.GetStringVal().GetValue() != "N/A" || v.GetUnit() != "W" {
				t.Fatalf("missing power must be N/A in W: %v", v)
			}
		}
	}
	if got != 2 {
		t.Fatalf("stats for %d GPUs, want 2", got)
	}
}

func TestFingerprintOnlyOnChange(t *testing.T) {
	b := newScripted(twoGPUs())
	inst := start(t, b, `fingerprint_period = "10ms"`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fp, err := inst.Device.Fingerprint(ctx, &devicepb.FingerprintRequest{})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make(chan *devicepb.FingerprintResponse, 16)
	go func() {
		for {
			m, err := fp.Recv()
			if err != nil {
				close(msgs)
				return
			}
			msgs <- m
		}
	}()
	next := func(what string) *devicepb.FingerprintResponse {
		t.Helper()
		select {
		case m := <-msgs:
			return m
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no fingerprint", what)
			return nil
		}
	}
	first := next("first")
	if len(first.GetDeviceGroup()) != 1 || len(first.GetDeviceGroup()[0].GetDevices()) != 2 {
		t.Fatalf("first %v", first)
	}
	// Many unchanged scans, then a change: the next message must be the
	// change, so the unchanged scans sent nothing.
	for i := 0; i < 5; i++ {
		select {
		case <-b.scanned:
		case <-time.After(10 * time.Second):
			t.Fatal("no periodic scan")
		}
	}
	b.set(func(inv *gpu.Inventory) { inv.Devices = inv.Devices[:1]; inv.Links = nil })
	second := next("after GPU-1 vanished")
	devs := second.GetDeviceGroup()
	var lost *devicepb.DetectedDevice
	for _, g := range devs {
		for _, d := range g.GetDevices() {
			if d.GetID() == "GPU-1" {
				lost = d
			}
		}
	}
	if lost == nil || lost.GetHealthy() || !strings.Contains(lost.GetHealthDescription(), "GPU lost") {
		t.Fatalf("vanished GPU: %v", lost)
	}
	b.set(func(inv *gpu.Inventory) { *inv = twoGPUs() })
	third := next("after GPU-1 came back")
	for _, g := range third.GetDeviceGroup() {
		for _, d := range g.GetDevices() {
			if !d.GetHealthy() {
				t.Fatalf("after recovery %v", d)
			}
		}
	}
	// A transient scan error keeps the devices.
	b.mu.Lock()
	b.err = errors.New("NVML_ERROR_UNKNOWN")
	b.mu.Unlock()
	b.events <- gpu.HealthEvent{UUID: "GPU-0", Kind: gpu.EventXID, XID: 62, Time: time.Now()}
	fourth := next("after XID 62")
	total, unhealthy := 0, 0
	for _, g := range fourth.GetDeviceGroup() {
		for _, d := range g.GetDevices() {
			total++
			if !d.GetHealthy() {
				unhealthy++
			}
		}
	}
	if total != 2 || unhealthy != 1 {
		t.Fatalf("after XID with failing scans: %d devices, %d unhealthy", total, unhealthy)
	}
	// The health watch was restarted for each change of the GPU set
	// (vanished, came back), so it covers the GPUs present.
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		watches := b.watches
		b.mu.Unlock()
		if watches == 3 {
			break
		}
		if watches > 3 || time.Now().After(deadline) {
			t.Fatalf("health watch started %d times, want 3", watches)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestUnavailableBackendReportsNoDevices(t *testing.T) {
	b := newScripted(gpu.Inventory{})
	b.err = fmt.Errorf("%w: libnvidia-ml.so.1 not found", gpu.ErrUnavailable)
	inst := start(t, b, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fp, err := inst.Device.Fingerprint(ctx, &devicepb.FingerprintRequest{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := fp.Recv()
	if err != nil || len(m.GetDeviceGroup()) != 0 {
		t.Fatalf("fingerprint %v %v", m, err)
	}
	_, err = inst.Device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: []string{"GPU-0"}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("reserve on an empty node: %v", err)
	}
}

// failingWatch is a backend whose health events fail at once.
type failingWatch struct{ *scripted }

func (f failingWatch) WatchHealth(context.Context, chan<- gpu.HealthEvent) error {
	return errors.New("event set broken")
}

func TestMonitorSurvivesHealthWatchFailure(t *testing.T) {
	b := failingWatch{newScripted(twoGPUs())}
	m := startMonitor(b, settingsFor(t, "island"), hclog.NewNullLogger(), time.Now)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snap, _, _, err := m.current(ctx)
	if err != nil || len(snap.groups) != 1 {
		t.Fatalf("snapshot %v %v", snap, err)
	}
	stopped := make(chan struct{})
	go func() { m.stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("monitor did not stop after its health watch failed")
	}
}

// ringOfFour is four GPUs whose direct NVLinks form the ring 0-2-1-3-0
// (hybrid cube-mesh style): index order is not the NVLink order.
func ringOfFour() gpu.Inventory {
	inv := twoGPUs()
	for i := 2; i < 4; i++ {
		d := inv.Devices[0]
		d.UUID, d.Index, d.Minor, d.PCIBusID = fmt.Sprintf("GPU-%d", i), i, i, fmt.Sprintf("00000000:%02X:00.0", i+1)
		inv.Devices = append(inv.Devices, d)
	}
	inv.Links = []gpu.Link{
		{A: "GPU-0", B: "GPU-2", NVLinks: 2, NVLinkP2P: true}, {A: "GPU-2", B: "GPU-1", NVLinks: 2, NVLinkP2P: true},
		{A: "GPU-1", B: "GPU-3", NVLinks: 2, NVLinkP2P: true}, {A: "GPU-3", B: "GPU-0", NVLinks: 1, NVLinkP2P: true},
	}
	return inv
}

// TestReserveOverGRPC: the visible-devices order follows the NVLink ring,
// whatever order Nomad hands the IDs in, and bad requests are
// InvalidArgument (the client's fault), not Internal.
func TestReserveOverGRPC(t *testing.T) {
	inst := start(t, newScripted(ringOfFour()), "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, in := range [][]string{{"GPU-3", "GPU-1", "GPU-0", "GPU-2"}, {"GPU-1", "GPU-2", "GPU-3", "GPU-0"}} {
		res, err := inst.Device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: in})
		if err != nil {
			t.Fatal(err)
		}
		envs := res.GetContainerRes().GetEnvs()
		if got := envs[EnvCUDAVisible]; got != "GPU-0,GPU-2,GPU-1,GPU-3" || envs[EnvNVIDIAVisible] != got {
			t.Fatalf("reserve %v: %s=%q, want the ring order GPU-0,GPU-2,GPU-1,GPU-3", in, EnvCUDAVisible, got)
		}
	}
	cases := []struct {
		name string
		ids  []string
		want string
	}{
		{"unknown", []string{"GPU-0", "GPU-9"}, "unknown device IDs: GPU-9"},
		{"twice", []string{"GPU-1", "GPU-1"}, "GPU-1 requested twice"},
	}
	for _, tc := range cases {
		_, err := inst.Device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: tc.ids})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want InvalidArgument naming %q", tc.name, err, tc.want)
		}
	}
}
