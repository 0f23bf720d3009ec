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
	closes  int
	events  chan gpu.HealthEvent
	scanned chan struct{}
	watched chan struct{} // one token per WatchHealth start
}

func newScripted(inv gpu.Inventory) *scripted {
	return &scripted{inv: inv, events: make(chan gpu.HealthEvent, 8), scanned: make(chan struct{}, 64), watched: make(chan struct{}, 64)}
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
	s.signalWatch()
	for {
		select {
		case ev := <-s.events:
			out <- ev
		case <-ctx.Done():
			return nil
		}
	}
}

func (s *scripted) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closes++
	return nil
}

// signalWatch records a WatchHealth start without ever blocking it.
func (s *scripted) signalWatch() {
	select {
	case s.watched <- struct{}{}:
	default:
	}
}

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
	_, inst := startPlugin(t, b, cfg)
	return inst
}

func startPlugin(t *testing.T, b gpu.Backend, cfg string) (*Plugin, *plugintest.Instance) {
	t.Helper()
	p := newPlugin(b)
	t.Cleanup(p.Shutdown)
	inst := plugintest.StartDevice(t, p)
	if err := inst.SetConfigHCL(context.Background(), cfg, plugintest.DefaultNomadConfig()); err != nil {
		t.Fatal(err)
	}
	return p, inst
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
	// (vanished, came back), so it covers the GPUs present: three starts,
	// and no more, since the failing scans change nothing.
	for i := 1; i <= 3; i++ {
		select {
		case <-b.watched:
		case <-time.After(10 * time.Second):
			t.Fatalf("health watch started %d times, want 3", i-1)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.watches != 3 {
		t.Fatalf("health watch started %d times, want 3", b.watches)
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
	f.signalWatch()
	return errors.New("event set broken")
}

// TestFailedHealthWatchIsRetried: a health watch that fails (an NVML event
// wait error) is started again at the next scans, not abandoned until the
// set of GPUs changes.
func TestFailedHealthWatchIsRetried(t *testing.T) {
	b := failingWatch{newScripted(twoGPUs())}
	s := settingsFor(t, "island")
	s.period = 10 * time.Millisecond
	m := startMonitor(b, s, hclog.NewNullLogger(), time.Now)
	defer m.stop()
	for i := 1; i <= 3; i++ {
		select {
		case <-b.watched:
		case <-time.After(10 * time.Second):
			t.Fatalf("health watch started %d times in 10s, want retries", i-1)
		}
	}
}

func TestMonitorSurvivesHealthWatchFailure(t *testing.T) {
	b := failingWatch{newScripted(twoGPUs())}
	m := startMonitor(b, settingsFor(t, "island"), hclog.NewNullLogger(), time.Now)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snap, _, err := m.current(ctx)
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
func TestBlockEnvKey(t *testing.T) {
	for in, want := range map[string]string{
		"GPU-6b5fa173-5fa6-2d38-54fe-d64c1fe4fe10": "IMPACT_GPU_BLOCK_GPU_6B5FA173_5FA6_2D38_54FE_D64C1FE4FE10",
		"MIG-a/b.c": "IMPACT_GPU_BLOCK_MIG_A_B_C",
	} {
		if got := BlockEnvKey(in); got != want {
			t.Errorf("BlockEnvKey(%q) = %q, want %q", in, got, want)
		}
	}
}

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

// fingerprints reads a fingerprint stream into a channel; next waits for
// one message with a deadline, end for the stream's error.
type fingerprints struct {
	msgs chan *devicepb.FingerprintResponse
	err  chan error
}

func readFingerprints(t *testing.T, inst *plugintest.Instance) fingerprints {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	fp, err := inst.Device.Fingerprint(ctx, &devicepb.FingerprintRequest{})
	if err != nil {
		t.Fatal(err)
	}
	f := fingerprints{msgs: make(chan *devicepb.FingerprintResponse, 16), err: make(chan error, 1)}
	go func() {
		for {
			m, err := fp.Recv()
			if err != nil {
				f.err <- err
				return
			}
			f.msgs <- m
		}
	}()
	return f
}

func (f fingerprints) next(t *testing.T, what string) *devicepb.FingerprintResponse {
	t.Helper()
	select {
	case m := <-f.msgs:
		return m
	case err := <-f.err:
		t.Fatalf("%s: stream ended: %v", what, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no fingerprint within 10s", what)
	}
	return nil
}

func (f fingerprints) end(t *testing.T, what string) error {
	t.Helper()
	select {
	case m := <-f.msgs:
		t.Fatalf("%s: unexpected fingerprint %v", what, m)
	case err := <-f.err:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: stream still open after 10s", what)
	}
	return nil
}

// TestStreamsFollowNewConfig: a config that changes while a fingerprint
// stream is open applies to that stream (it must not stay on the stopped
// monitor), and the old backend is closed.
func TestStreamsFollowNewConfig(t *testing.T) {
	b := newScripted(twoGPUs())
	b.inv.Links = nil // two islands of one GPU each
	_, inst := startPlugin(t, b, `group_by = "island"`)
	fps := readFingerprints(t, inst)
	if n := len(fps.next(t, "first").GetDeviceGroup()); n != 2 {
		t.Fatalf("%d groups by island, want 2", n)
	}
	if err := inst.SetConfigHCL(context.Background(), `group_by = "model"`, plugintest.DefaultNomadConfig()); err != nil {
		t.Fatal(err)
	}
	second := fps.next(t, "after group_by = model")
	if gs := second.GetDeviceGroup(); len(gs) != 1 || gs[0].GetDeviceName() != "Test" || len(gs[0].GetDevices()) != 2 {
		t.Fatalf("groups by model: %v", gs)
	}
	b.mu.Lock()
	closes := b.closes
	b.mu.Unlock()
	if closes != 1 {
		t.Fatalf("backend closed %d times after one reconfiguration, want 1", closes)
	}
	// The same config again changes nothing: no restart, and no message
	// (end below fails on any message before the stream's end).
	if err := inst.SetConfigHCL(context.Background(), `group_by = "model"`, plugintest.DefaultNomadConfig()); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	closes = b.closes
	b.mu.Unlock()
	if closes != 1 {
		t.Fatalf("backend closed %d times after an unchanged config, want still 1", closes)
	}
	// Disabling ends the stream with FailedPrecondition.
	if err := inst.SetConfigHCL(context.Background(), `enabled = false`, plugintest.DefaultNomadConfig()); err != nil {
		t.Fatal(err)
	}
	if err := fps.end(t, "after enabled = false"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("stream of a disabled plugin ended with %v, want FailedPrecondition", err)
	}
}

// TestShutdownEndsStreams: open streams end with Unavailable (instead of
// waiting forever on a stopped monitor), the backend is closed, and later
// RPCs fail instead of starting a new backend.
func TestShutdownEndsStreams(t *testing.T) {
	b := newScripted(twoGPUs())
	p, inst := startPlugin(t, b, "")
	fps := readFingerprints(t, inst)
	fps.next(t, "first")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := inst.Device.Stats(ctx, &devicepb.StatsRequest{CollectionInterval: durationpb.New(10 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	p.Shutdown()
	if err := fps.end(t, "fingerprint after Shutdown"); status.Code(err) != codes.Unavailable {
		t.Fatalf("fingerprint ended with %v, want Unavailable", err)
	}
	for {
		_, err := st.Recv()
		if err == nil {
			continue // samples taken before Shutdown
		}
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("stats ended with %v, want Unavailable", err)
		}
		break
	}
	if _, err := inst.Device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: []string{"GPU-0"}}); status.Code(err) != codes.Unavailable {
		t.Fatalf("reserve after Shutdown: %v", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closes != 1 {
		t.Fatalf("backend closed %d times, want 1", b.closes)
	}
}

func TestStatsInterval(t *testing.T) {
	cases := []struct {
		in   *durationpb.Duration
		want time.Duration
	}{
		{nil, time.Second},
		{durationpb.New(0), time.Second},
		{durationpb.New(-time.Second), time.Second},
		{&durationpb.Duration{Seconds: 1, Nanos: -5}, time.Second}, // invalid: mixed signs
		{durationpb.New(time.Nanosecond), minStatsInterval},
		{durationpb.New(5 * time.Second), 5 * time.Second},
	}
	for _, tc := range cases {
		if got := statsInterval(&devicepb.StatsRequest{CollectionInterval: tc.in}); got != tc.want {
			t.Errorf("interval %v: got %v, want %v", tc.in, got, tc.want)
		}
	}
}

// newPlugin is a plugin whose GPU backend is b, whatever its config names.
func newPlugin(b gpu.Backend) *Plugin {
	p := New(hclog.NewNullLogger())
	p.backendFor = func(string, string, hclog.Logger) (gpu.Backend, error) { return b, nil }
	return p
}
