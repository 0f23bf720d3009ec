package driver

import (
	"maps"
	"testing"

	"github.com/impact-sched/nomad-impact/device"
)

// The driver's variable names are impact-gpu's.
func TestVisibleDeviceNamesMatchThePlugin(t *testing.T) {
	if envBlockPrefix != device.EnvBlockPrefix || envCUDAVisible != device.EnvCUDAVisible || envNVIDIAVisible != device.EnvNVIDIAVisible {
		t.Fatalf("driver variables %q %q %q differ from impact-gpu's %q %q %q", envBlockPrefix, envCUDAVisible, envNVIDIAVisible,
			device.EnvBlockPrefix, device.EnvCUDAVisible, device.EnvNVIDIAVisible)
	}
}

// A task with two GPU device blocks sees the GPUs of both (Nomad's merge
// left only the last block's in CUDA_VISIBLE_DEVICES); one block, or none,
// leaves the env as it was.
func TestWithAllGPUs(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want string // CUDA_VISIBLE_DEVICES afterwards; "-" = unset
	}{
		{"two blocks", map[string]string{
			device.BlockEnvKey("GPU-b"): "GPU-b,GPU-c", device.BlockEnvKey("GPU-a"): "GPU-a,GPU-d",
			"CUDA_VISIBLE_DEVICES": "GPU-b,GPU-c", "NVIDIA_VISIBLE_DEVICES": "GPU-b,GPU-c", "OTHER": "x",
		}, "GPU-a,GPU-d,GPU-b,GPU-c"},
		{"one block", map[string]string{device.BlockEnvKey("GPU-a"): "GPU-a,GPU-d", "CUDA_VISIBLE_DEVICES": "GPU-a,GPU-d"}, "GPU-a,GPU-d"},
		{"no GPUs", map[string]string{"OTHER": "x"}, "-"},
		{"another plugin", map[string]string{"CUDA_VISIBLE_DEVICES": "0,1"}, "0,1"},
	}
	for _, tc := range cases {
		before := maps.Clone(tc.env)
		got := withAllGPUs(tc.env)
		if !maps.Equal(tc.env, before) {
			t.Fatalf("%s: input env modified", tc.name)
		}
		v, ok := got["CUDA_VISIBLE_DEVICES"]
		if !ok {
			v = "-"
		}
		if v != tc.want || (ok && tc.name != "another plugin" && got["NVIDIA_VISIBLE_DEVICES"] != v) {
			t.Errorf("%s: CUDA_VISIBLE_DEVICES=%q NVIDIA_VISIBLE_DEVICES=%q, want %q", tc.name, v, got["NVIDIA_VISIBLE_DEVICES"], tc.want)
		}
		if got["OTHER"] != tc.env["OTHER"] {
			t.Errorf("%s: other variables changed", tc.name)
		}
	}
}
