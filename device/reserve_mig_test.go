package device

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/device/gpu"
	"github.com/impact-sched/nomad-impact/plugin/plugintest"
	"github.com/impact-sched/nomad-impact/plugin/proto/devicepb"
)

// fakeHost is a fake /dev and /proc for reserve.
type fakeHost struct {
	t    *testing.T
	root hostRoots
}

func newFakeHost(t *testing.T) *fakeHost {
	t.Helper()
	dir := t.TempDir()
	return &fakeHost{t: t, root: hostRoots{Dev: filepath.Join(dir, "dev"), Proc: filepath.Join(dir, "proc")}}
}

func (h *fakeHost) write(path, content string) {
	h.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// devNodes creates device nodes (paths relative to /dev).
func (h *fakeHost) devNodes(names ...string) {
	for _, n := range names {
		h.write(filepath.Join(h.root.Dev, n), "")
	}
}

// capFile writes a capability proc file as the driver does, e.g.
// rel = "gpu0/mig/gi7/ci0/access".
func (h *fakeHost) capFile(rel, content string) {
	h.write(filepath.Join(h.root.Proc, "driver", "nvidia", "capabilities", rel), content)
}

func capContent(minor string) string {
	return "DeviceFileMinor: " + minor + "\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
}

// taskNodes lists the task paths of a reservation, checking each comes
// from the same path under the fake /dev with rwm permissions.
func taskNodes(t *testing.T, h *fakeHost, devs []*devicepb.DeviceSpec) []string {
	t.Helper()
	var out []string
	for _, d := range devs {
		rel := strings.TrimPrefix(d.TaskPath, "/dev/")
		if d.HostPath != filepath.Join(h.root.Dev, rel) {
			t.Errorf("task path %s comes from %s", d.TaskPath, d.HostPath)
		}
		if d.Permissions != "rwm" {
			t.Errorf("%s: permissions %q", d.TaskPath, d.Permissions)
		}
		out = append(out, d.TaskPath)
	}
	return out
}

func TestReserveMIGCapabilities(t *testing.T) {
	const (
		gi7   = "MIG-a4f86984-2e17-dd1d-6f18-37b4125ba52a" // gpu0 (minor 0), GI 7, CI 0
		gi8   = "MIG-7432ceee-f703-77b6-344f-9ae75b5afdee" // gpu0, GI 8, CI 0
		gi9   = "MIG-0a65c9e8-0839-5442-293e-db3043109596" // gpu0, GI 9: no proc files
		gi10  = "MIG-66cacedc-a42e-aa1a-5516-de5201a7a683" // gpu0, GI 10: malformed proc file
		gi11  = "MIG-74c966c9-0aa1-115f-7c3e-22175848dc4d" // gpu0, GI 11: cap node missing in /dev
		gi12  = "MIG-ee8fd150-25b6-2001-da7b-4de00b5224c4" // gpu0, GI 12: no DeviceFileMinor line
		gi13  = "MIG-23509164-b2c8-a117-71ce-bfc5294b2b88" // gpu0, GI/CI IDs unknown
		g1gi1 = "MIG-f11954ef-5b90-f4ff-f128-710682eec6d3" // gpu1 (minor 1), GI 1, CI 0
		g1ci1 = "MIG-0179bede-2b5d-f2ca-fee8-42517df7cc38" // gpu1, made GI 1, CI 1 below
		whole = "GPU-897363ee-c0ec-4e62-78d8-2ed31de461b2" // gpu2, no MIG
	)
	st := exampleState(t, "mig-4x-a100.hcl")
	// gi13 (the last gpu0 instance): the driver did not report its IDs.
	st.devices[0].MIG[6].IDsUnknown = true
	// Two compute instances sharing one GPU instance.
	st.devices[1].MIG[1].GPUInstanceID, st.devices[1].MIG[1].ComputeInstanceID = 1, 1
	snap, err := buildSnapshot(st, newHealth(), settingsFor(t, "island"))
	if err != nil {
		t.Fatal(err)
	}

	h := newFakeHost(t)
	// nvidia-cap1/cap2 are the MIG config and monitor capabilities: they
	// exist on every MIG host and must never be given to a task.
	h.devNodes("nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm",
		"nvidia-caps/nvidia-cap1", "nvidia-caps/nvidia-cap2",
		"nvidia-caps/nvidia-cap66", "nvidia-caps/nvidia-cap67",
		"nvidia-caps/nvidia-cap75", "nvidia-caps/nvidia-cap76",
		"nvidia-caps/nvidia-cap12", "nvidia-caps/nvidia-cap13", "nvidia-caps/nvidia-cap14")
	h.capFile("gpu0/mig/gi7/access", capContent("66"))
	h.capFile("gpu0/mig/gi7/ci0/access", capContent("67"))
	h.capFile("gpu0/mig/gi8/access", capContent("75"))
	h.capFile("gpu0/mig/gi8/ci0/access", capContent("76"))
	h.capFile("gpu0/mig/gi10/access", capContent("eighty"))
	h.capFile("gpu0/mig/gi10/ci0/access", capContent("81"))
	h.capFile("gpu0/mig/gi11/access", capContent("90"))
	h.capFile("gpu0/mig/gi11/ci0/access", capContent("91"))
	h.capFile("gpu0/mig/gi12/access", "DeviceFileMode: 292\n")
	// Files at gi0 that an instance with unknown IDs (zero values) must
	// not be given.
	h.capFile("gpu0/mig/gi0/access", capContent("12"))
	h.capFile("gpu0/mig/gi0/ci0/access", capContent("13"))
	h.capFile("gpu1/mig/gi1/access", capContent("12"))
	h.capFile("gpu1/mig/gi1/ci0/access", capContent("13"))
	h.capFile("gpu1/mig/gi1/ci1/access", capContent("14"))
	// The config capability file lives beside the instances; reserve
	// must not pick it up.
	h.capFile("mig/config", capContent("1"))
	h.capFile("mig/monitor", capContent("2"))

	cases := []struct {
		name      string
		ids       []string
		want      []string // task paths
		warn      []string // substrings, one per warning
		errSubstr []string
	}{
		{
			name: "one MIG instance gets its GI and CI capabilities",
			ids:  []string{gi7},
			want: []string{"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap66", "/dev/nvidia-caps/nvidia-cap67", "/dev/nvidiactl", "/dev/nvidia-uvm"},
		},
		{
			name: "two instances of one GPU share the parent node once",
			ids:  []string{gi8, gi7},
			want: []string{"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap66", "/dev/nvidia-caps/nvidia-cap67",
				"/dev/nvidia-caps/nvidia-cap75", "/dev/nvidia-caps/nvidia-cap76", "/dev/nvidiactl", "/dev/nvidia-uvm"},
		},
		{
			name: "compute instances sharing a GPU instance pass its access once",
			ids:  []string{g1gi1, g1ci1},
			want: []string{"/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13",
				"/dev/nvidia-caps/nvidia-cap14", "/dev/nvidiactl", "/dev/nvidia-uvm"},
		},
		{
			name: "a whole GPU gets no capability nodes",
			ids:  []string{whole},
			want: []string{"/dev/nvidia2", "/dev/nvidiactl", "/dev/nvidia-uvm"},
		},
		{
			name: "missing proc files: warned, the rest passed",
			ids:  []string{gi9},
			want: []string{"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"},
			warn: []string{gi9 + ": capability file " + filepath.Join(h.root.Proc, "driver/nvidia/capabilities/gpu0/mig/gi9/access") + " does not exist"},
		},
		{
			name: "capability device node missing: warned, not passed",
			ids:  []string{gi11},
			want: []string{"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"},
			warn: []string{"nvidia-caps/nvidia-cap90", "nvidia-caps/nvidia-cap91"},
		},
		{
			name: "unknown GI/CI IDs: no capability guessed, warned",
			ids:  []string{gi13},
			want: []string{"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"},
			warn: []string{gi13 + ": the driver did not report its GPU/compute instance IDs"},
		},
		{
			name:      "malformed DeviceFileMinor is an error naming the file",
			ids:       []string{gi10},
			errSubstr: []string{gi10, "gpu0/mig/gi10/access", `DeviceFileMinor "eighty"`},
		},
		{
			name:      "no DeviceFileMinor line is an error naming the file",
			ids:       []string{gi12},
			errSubstr: []string{gi12, "gpu0/mig/gi12/access", "no DeviceFileMinor line"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, warnings, err := reserve(&snap, tc.ids, h.root)
			if tc.errSubstr != nil {
				if err == nil {
					t.Fatalf("no error; reservation %+v", res)
				}
				for _, s := range tc.errSubstr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not name %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Device order carries no meaning; compare as sets.
			got := taskNodes(t, h, res.Devices)
			sort.Strings(got)
			want := append([]string(nil), tc.want...)
			sort.Strings(want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("devices\n got %v\nwant %v", got, tc.want)
			}
			if len(warnings) != len(tc.warn) {
				t.Fatalf("warnings %q, want %d", warnings, len(tc.warn))
			}
			for i, w := range tc.warn {
				if !strings.Contains(warnings[i], w) {
					t.Errorf("warning %q does not say %q", warnings[i], w)
				}
			}
		})
	}

	// Without a proc tree at all (a non-MIG host), whole GPUs reserve as
	// before and without warnings.
	bare := newFakeHost(t)
	bare.devNodes("nvidia2", "nvidiactl")
	res, warnings, err := reserve(&snap, []string{whole}, bare.root)
	if err != nil || len(warnings) != 0 || len(res.Devices) != 2 {
		t.Fatalf("whole GPU without proc tree: %+v %q %v", res, warnings, err)
	}
}

// The plugin reads the proc and dev roots it is given, so Reserve over
// gRPC passes a MIG instance's capability nodes from the fake tree.
func TestReserveMIGOverGRPC(t *testing.T) {
	inv := twoGPUs()
	inv.Devices[1].Minor = 3
	inv.Devices[1].MIGEnabled = true
	inv.Devices[1].MIG = []gpu.MIGInstance{{UUID: "MIG-11111111-2222-3333-4444-555555555555", Profile: "1g.10gb", GPUInstanceID: 5, ComputeInstanceID: 0, MemoryMiB: 9728}}
	h := newFakeHost(t)
	h.devNodes("nvidia0", "nvidia3", "nvidiactl", "nvidia-caps/nvidia-cap1", "nvidia-caps/nvidia-cap48", "nvidia-caps/nvidia-cap49")
	h.capFile("gpu3/mig/gi5/access", capContent("48"))
	h.capFile("gpu3/mig/gi5/ci0/access", capContent("49"))
	b := newScripted(inv)
	p := newPlugin(b)
	p.roots = h.root
	t.Cleanup(p.Shutdown)
	inst := plugintest.StartDevice(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := inst.SetConfigHCL(ctx, "", plugintest.DefaultNomadConfig()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id   string
		want []string
	}{
		{"MIG-11111111-2222-3333-4444-555555555555", []string{"/dev/nvidia-caps/nvidia-cap48", "/dev/nvidia-caps/nvidia-cap49", "/dev/nvidia3", "/dev/nvidiactl"}},
		{"GPU-0", []string{"/dev/nvidia0", "/dev/nvidiactl"}},
	} {
		res, err := inst.Device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: []string{tc.id}})
		if err != nil {
			t.Fatalf("reserve %s: %v", tc.id, err)
		}
		got := taskNodes(t, h, res.GetContainerRes().GetDevices())
		sort.Strings(got)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("reserve %s: devices %v, want %v", tc.id, got, tc.want)
		}
	}
}
