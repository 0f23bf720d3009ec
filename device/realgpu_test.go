package device_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/impact-sched/nomad-impact/device"
	"github.com/impact-sched/nomad-impact/device/topology"
	"github.com/impact-sched/nomad-impact/plugin"
	"github.com/impact-sched/nomad-impact/plugin/plugintest"
	"github.com/impact-sched/nomad-impact/plugin/proto/devicepb"
)

// TestConformanceRealNVML drives the built plugin with the nvml backend the
// way a Nomad client does, on a machine with an NVIDIA driver: the
// fingerprint a client would accept, its topology read back, stats for
// every GPU and a reservation. It skips where there is no driver (CI); on a
// GPU machine it logs what it saw, as the record of a real fingerprint.
func TestConformanceRealNVML(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err != nil {
		t.Skip("no NVIDIA driver on this machine (/dev/nvidiactl missing): the real-NVML conformance test needs a GPU")
	}
	inst := plugintest.LoadLikeNomad(t, pluginBinary(t), plugin.KindDevice, "backend = \"nvml\"\nfingerprint_period = \"1h\"\n", plugintest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	fp, err := inst.Device.Fingerprint(ctx, &devicepb.FingerprintRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first := nextFingerprint(t, recv(fp.Recv), "first fingerprint")
	var ids []string
	for _, g := range first.GetDeviceGroup() {
		t.Logf("group %s/%s/%s: %d device(s)", g.GetVendor(), g.GetDeviceType(), g.GetDeviceName(), len(g.GetDevices()))
		for k, v := range g.GetAttributes() {
			t.Logf("  attribute %s = %v", k, v)
		}
		for _, d := range g.GetDevices() {
			t.Logf("  device %s healthy=%v %q pci=%s", d.GetID(), d.GetHealthy(), d.GetHealthDescription(), d.GetHwLocality().GetPciBusId())
			if !strings.HasPrefix(d.GetID(), "GPU-") && !strings.HasPrefix(d.GetID(), "MIG-") {
				t.Errorf("device ID %q is neither a GPU nor a MIG UUID", d.GetID())
			}
			ids = append(ids, d.GetID())
		}
	}
	if len(ids) == 0 {
		t.Fatal("the driver is present but the fingerprint lists no GPU")
	}
	node, err := topology.FromAttributes(device.GroupsFromFingerprint(first))
	if err != nil {
		t.Fatalf("topology from the real fingerprint: %v", err)
	}
	t.Logf("topology read back: %d GPU(s), islands %v", len(node.GPUs), node.Islands)

	st, err := inst.Device.Stats(ctx, &devicepb.StatsRequest{CollectionInterval: durationpb.New(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	s := wait(t, recv(st.Recv), "first stats")
	seen := 0
	for _, g := range s.GetGroups() {
		for id, ds := range g.GetInstanceStats() {
			seen++
			t.Logf("stats %s: %v", id, ds.GetStats().GetAttributes())
		}
	}
	if seen != len(ids) {
		t.Errorf("stats for %d device(s), fingerprint lists %d", seen, len(ids))
	}

	res, err := inst.Device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: ids[:1]})
	if err != nil {
		t.Fatal(err)
	}
	envs := res.GetContainerRes().GetEnvs()
	t.Logf("reserve %s: envs %v", ids[0], envs)
	if envs["NVIDIA_VISIBLE_DEVICES"] != ids[0] {
		t.Errorf("NVIDIA_VISIBLE_DEVICES = %q, want %s", envs["NVIDIA_VISIBLE_DEVICES"], ids[0])
	}
}
