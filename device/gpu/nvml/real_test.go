//go:build linux && cgo

package nvml

import (
	"context"
	"strings"
	"testing"

	nv "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/go-hclog"
)

// TestRealNVML runs the backend against the machine's own NVML; it skips
// where the library or the driver is missing (CI without GPUs).
func TestRealNVML(t *testing.T) {
	lib := nv.New()
	if ret := lib.Init(); ret != nv.SUCCESS {
		t.Skipf("no usable NVML here: %v", ret.Error())
	}
	lib.Shutdown()
	b := newWithLibrary(nv.New(), hclog.NewNullLogger())
	defer b.Close()
	ctx := context.Background()
	inv, err := b.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("driver %s, CUDA %s, nvswitch %v", inv.DriverVersion, inv.CUDAVersion(), inv.NVSwitch)
	var ids []string
	for _, d := range inv.Devices {
		t.Logf("%+v", d)
		if !strings.HasPrefix(d.UUID, "GPU-") || d.Model == "" || d.MemoryMiB == 0 || strings.ContainsRune(d.PCIBusID, 0) {
			t.Errorf("device %+v", d)
		}
		ids = append(ids, d.UUID)
	}
	for _, l := range inv.Links {
		t.Logf("link %+v", l)
	}
	st, err := b.Stats(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		t.Logf("%+v", s)
		if s.HasMemory && s.MemoryTotalMiB == 0 {
			t.Errorf("stats %+v", s)
		}
	}
}
