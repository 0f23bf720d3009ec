package fake

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/device/gpu"
)

const twoGPUs = `
control_file = "ctl"
gpu "a" {
  uuid = "GPU-aaaa"
  model = "Test GPU"
  memory_mib = 1000
  numa_node = 0
  compute_capability = "8.0"
}
gpu "b" {
  uuid = "GPU-bbbb"
  model = "Test GPU"
  memory_mib = 1000
  numa_node = 1
  compute_capability = "8.0"
}
nvlink {
  gpus = ["a", "b"]
  links = 2
}
`

func TestExampleTopologies(t *testing.T) {
	cases := map[string]struct {
		gpus, mig, p2pPairs int
		nvswitch            bool
	}{
		"nvswitch-8x-h100.hcl":    {8, 0, 28, true},
		"two-islands-8x-a100.hcl": {8, 0, 12, false},
		"pcie-2numa-4x-l40s.hcl":  {4, 0, 0, false},
		"mig-4x-a100.hcl":         {4, 9, 6, true},
	}
	files, err := filepath.Glob("../../../example/topologies/*.hcl")
	if err != nil || len(files) != len(cases) {
		t.Fatalf("example topologies: %v %v, want %d files", files, err, len(cases))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			want, ok := cases[filepath.Base(f)]
			if !ok {
				t.Fatalf("no expectation for %s", f)
			}
			top, err := LoadTopology(f)
			if err != nil {
				t.Fatal(err)
			}
			inv := top.Inventory
			mig, p2p := 0, 0
			for _, d := range inv.Devices {
				mig += len(d.MIG)
				if strings.ContainsRune(d.PCIBusID, 0) || d.NUMANode < 0 || d.PowerLimitW <= 0 {
					t.Errorf("device %+v", d)
				}
			}
			for _, l := range inv.Links {
				if l.NVLinkP2P {
					p2p++
				}
			}
			if len(inv.Devices) != want.gpus || mig != want.mig || p2p != want.p2pPairs || inv.NVSwitch != want.nvswitch {
				t.Fatalf("gpus=%d mig=%d p2p=%d nvswitch=%v, want %+v", len(inv.Devices), mig, p2p, inv.NVSwitch, want)
			}
		})
	}
}

func TestTwoIslandsBandwidth(t *testing.T) {
	top, err := LoadTopology("../../../example/topologies/two-islands-8x-a100.hcl")
	if err != nil {
		t.Fatal(err)
	}
	d := top.Inventory.Devices[0]
	if d.NVLinkLinks != 12 || d.NVLinkBandwidthGBps != 600 {
		t.Fatalf("gpu0 links=%d bw=%d, want 12 links, 600 GB/s", d.NVLinkLinks, d.NVLinkBandwidthGBps)
	}
	if !strings.HasSuffix(top.ControlFile, "example/topologies/two-islands.ctl") {
		t.Fatalf("control file %q not resolved next to the topology", top.ControlFile)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"no gpus", `driver_version = "1"`, "no gpu blocks"},
		{"bad uuid", `gpu "a" {
uuid = "xyz"
model = "m"
memory_mib = 1
}`, `line 1: gpu "a": uuid "xyz"`},
		{"missing model", `gpu "a" {
uuid = "GPU-1"
memory_mib = 1
}`, `"model" is required`},
		{"dup uuid", `gpu "a" {
uuid = "GPU-1"
model = "m"
memory_mib = 1
}
gpu "b" {
uuid = "GPU-1"
model = "m"
memory_mib = 1
}`, `line 6: gpu "b": uuid GPU-1 also used by gpu "a" (line 1)`},
		{"dup index", `gpu "a" {
uuid = "GPU-1"
model = "m"
memory_mib = 1
}
gpu "b" {
uuid = "GPU-2"
model = "m"
memory_mib = 1
index = 0
}`, `line 6: gpu "b": index 0 also used by gpu "a" (line 1)`},
		{"bad bus", `gpu "a" {
uuid = "GPU-1"
model = "m"
memory_mib = 1
pci_bus_id = "3b"
}`, "pci_bus_id"},
		{"negative numa", `gpu "a" {
uuid = "GPU-1"
model = "m"
memory_mib = 1
numa_node = -1
}`, "numa_node"},
		{"unknown attr", `gpu "a" {
uuid = "GPU-1"
model = "m"
memory_mib = 1
colour = "red"
}`, `t.hcl:5,1-7: gpu "a" colour: Unsupported argument`},
		{"unknown link gpu", `gpu "a" {
uuid = "GPU-1"
model = "m"
memory_mib = 1
}
nvlink {
gpus = ["a", "z"]
}`, `line 6: nvlink block 1: unknown GPU "z"`},
		{"mig too big", `gpu "a" {
uuid = "GPU-1"
model = "m"
memory_mib = 10
mig "1g" {
uuid = "MIG-1"
memory_mib = 20
}
}`, `line 5: gpu "a" mig "1g": memory_mib must be in 1..10`},
		{"event two actions", `gpu "a" {
uuid = "GPU-1"
model = "m"
memory_mib = 1
}
event {
after = "1s"
gpu = "a"
xid = 79
lost = true
}`, "line 6: event 1 (gpu \"a\"): set exactly one"},
		{"event bad after", `gpu "a" {
uuid = "GPU-1"
model = "m"
memory_mib = 1
}
event {
after = "soon"
gpu = "a"
xid = 79
}`, `after "soon"`},
		{"stats out of range", `gpu "a" {
uuid = "GPU-1"
model = "m"
memory_mib = 1
}
stats "a" {
utilization = 140
}`, `line 6: stats "a": utilization must be 0..100`},
		{"syntax", `gpu "a" {`, "Unclosed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTopology("t.hcl", []byte(tc.src))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "t.hcl") {
				t.Fatalf("err = %v, want it to name t.hcl and contain %q", err, tc.want)
			}
		})
	}
}

func TestControlLines(t *testing.T) {
	top, err := ParseTopology("t.hcl", []byte(twoGPUs))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		line string
		want Action
		ok   bool
		err  string
	}{
		{"xid a 79", Action{Kind: ActXID, UUID: "GPU-aaaa", XID: 79}, true, ""},
		{"lost GPU-bbbb", Action{Kind: ActLost, UUID: "GPU-bbbb"}, true, ""},
		{"recover 1", Action{Kind: ActRecover, UUID: "GPU-bbbb"}, true, ""},
		{"  # comment", Action{}, false, ""},
		{"", Action{}, false, ""},
		{"xid a", Action{}, false, "want xid <gpu> <code>"},
		{"xid a -3", Action{}, false, "not a positive integer"},
		{"reboot a", Action{}, false, "unknown verb"},
		{"xid q 79", Action{}, false, `unknown GPU "q"`},
		{"stats a utilization=x", Action{}, false, "not an integer"},
		{"stats a speed=3", Action{}, false, "unknown stat"},
		{"stats a utilization=101", Action{}, false, "0..100"},
	}
	for _, tc := range cases {
		t.Run(tc.line, func(t *testing.T) {
			got, ok, err := top.ParseControlLine(tc.line)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || ok != tc.ok || got.Kind != tc.want.Kind || got.UUID != tc.want.UUID || got.XID != tc.want.XID {
				t.Fatalf("got %+v ok=%v err=%v, want %+v ok=%v", got, ok, err, tc.want, tc.ok)
			}
		})
	}
}

// waitEvent waits for one health event with a deadline.
func waitEvent(t *testing.T, ch <-chan gpu.HealthEvent) gpu.HealthEvent {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no health event within 5s")
		return gpu.HealthEvent{}
	}
}

func TestBackendControlFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.hcl")
	if err := os.WriteFile(path, []byte(twoGPUs), 0o644); err != nil {
		t.Fatal(err)
	}
	top, err := LoadTopology(path)
	if err != nil {
		t.Fatal(err)
	}
	b := start(top, hclog.NewNullLogger(), 10*time.Millisecond, time.Now)
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan gpu.HealthEvent, 10)
	go b.WatchHealth(ctx, events)

	ctl := filepath.Join(dir, "ctl")
	appendLine := func(s string) {
		f, err := os.OpenFile(ctl, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	appendLine("bogus line\nxid a 79\n")
	if ev := waitEvent(t, events); ev.Kind != gpu.EventXID || ev.XID != 79 || ev.UUID != "GPU-aaaa" {
		t.Fatalf("event %+v", ev)
	}
	appendLine("lost b\n")
	if ev := waitEvent(t, events); ev.Kind != gpu.EventLost || ev.UUID != "GPU-bbbb" {
		t.Fatalf("event %+v", ev)
	}
	inv, _ := b.Inventory(ctx)
	if len(inv.Devices) != 1 || len(inv.Links) != 0 {
		t.Fatalf("after lost: %d devices %d links, want 1 and 0", len(inv.Devices), len(inv.Links))
	}
	// A partial line is not applied until it is complete.
	appendLine("recover b")
	b.Step()
	if inv, _ := b.Inventory(ctx); len(inv.Devices) != 1 {
		t.Fatalf("partial line applied")
	}
	appendLine("\nstats a utilization=85 memory_used_mib=512 power_w=250.5 temperature_c=70 ecc_uncorrected=2\n")
	if ev := waitEvent(t, events); ev.Kind != gpu.EventRecovered || ev.UUID != "GPU-bbbb" {
		t.Fatalf("event %+v", ev)
	}
	// The recovery event was delivered, so its line and the stats line
	// after it have been read (lines are applied in order under one lock).
	st, _ := b.Stats(ctx, []string{"GPU-aaaa", "GPU-bbbb"})
	if len(st) != 2 {
		t.Fatalf("stats for %d GPUs, want 2", len(st))
	}
	if s := st[0]; s.UtilizationPct != 85 || s.MemoryUsedMiB != 512 || s.MemoryTotalMiB != 1000 || s.PowerW != 250.5 || s.TemperatureC != 70 || s.ECCUncorrected != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestBackendScriptedEvents(t *testing.T) {
	src := twoGPUs + `
event {
  after = "0s"
  gpu   = "a"
  xid   = 48
}
event {
  after = "1h"
  gpu   = "b"
  lost  = true
}
stats "b" {
  utilization = 33
}
`
	top, err := ParseTopology("t.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	top.ControlFile = ""
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	b := start(top, hclog.NewNullLogger(), time.Hour, clock)
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan gpu.HealthEvent, 10)
	go b.WatchHealth(ctx, events)
	if ev := waitEvent(t, events); ev.Kind != gpu.EventXID || ev.XID != 48 {
		t.Fatalf("event %+v", ev)
	}
	if st, _ := b.Stats(ctx, []string{"GPU-bbbb"}); len(st) != 1 || st[0].UtilizationPct != 33 {
		t.Fatalf("initial stats %+v", st)
	}
	now = now.Add(time.Hour)
	b.Step()
	if ev := waitEvent(t, events); ev.Kind != gpu.EventLost || ev.UUID != "GPU-bbbb" {
		t.Fatalf("event %+v", ev)
	}
}

// TestUndeliveredEventsSurviveAWatchRestart: the plugin stops and restarts
// its health watch whenever the set of GPUs changes; an event taken from the
// queue but not yet delivered when the watch stops must reach the next one.
func TestUndeliveredEventsSurviveAWatchRestart(t *testing.T) {
	top, err := ParseTopology("t.hcl", []byte(twoGPUs))
	if err != nil {
		t.Fatal(err)
	}
	top.ControlFile = ""
	b := start(top, hclog.NewNullLogger(), time.Hour, time.Now)
	defer b.Close()
	at := time.Unix(1000, 0)
	b.mu.Lock()
	b.apply(Action{Kind: ActXID, UUID: "GPU-aaaa", XID: 79}, at)
	b.apply(Action{Kind: ActXID, UUID: "GPU-bbbb", XID: 48}, at)
	b.mu.Unlock()

	// The first watch takes both events as one batch, delivers the first
	// and blocks on the second, which nobody reads: then it is stopped.
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan gpu.HealthEvent)
	done := make(chan error, 1)
	go func() { done <- b.WatchHealth(ctx, events) }()
	if ev := waitEvent(t, events); ev.XID != 79 {
		t.Fatalf("first event %+v", ev)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not stop")
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	events2 := make(chan gpu.HealthEvent, 4)
	go b.WatchHealth(ctx2, events2)
	if ev := waitEvent(t, events2); ev.XID != 48 || ev.UUID != "GPU-bbbb" {
		t.Fatalf("event after restart %+v, want XID 48 on GPU-bbbb", ev)
	}
}

// TestExampleTopologiesReadme: example/topologies/README.md lists exactly
// the shipped files, and every control line it shows is accepted by the
// two-island topology it is written for.
func TestExampleTopologiesReadme(t *testing.T) {
	dir := "../../../example/topologies"
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+\\.hcl)` \\|").FindAllSubmatch(readme, -1) {
		listed[string(m[1])] = true
	}
	for _, f := range files {
		if !listed[filepath.Base(f)] {
			t.Errorf("%s is not in the README's table", filepath.Base(f))
		}
		delete(listed, filepath.Base(f))
	}
	for f := range listed {
		t.Errorf("README lists %s, which does not ship", f)
	}
	top, err := LoadTopology(filepath.Join(dir, "two-islands-8x-a100.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := regexp.MustCompile(`echo "([^"]+)" >> two-islands\.ctl`).FindAllSubmatch(readme, -1)
	if len(lines) == 0 {
		t.Fatal("README shows no control lines")
	}
	for _, m := range lines {
		if _, ok, err := top.ParseControlLine(string(m[1])); !ok || err != nil {
			t.Errorf("README control line %q: ok=%v err=%v", m[1], ok, err)
		}
	}
}
