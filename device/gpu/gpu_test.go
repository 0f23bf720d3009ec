package gpu

import "testing"

func TestCriticalXID(t *testing.T) {
	for _, x := range []int{13, 31, 43, 45, 68, 109} {
		if CriticalXID(x) {
			t.Errorf("application XID %d counted as critical", x)
		}
	}
	for _, x := range []int{48, 62, 63, 64, 74, 79, 92, 94, 95, 119} {
		if !CriticalXID(x) {
			t.Errorf("XID %d not counted as critical", x)
		}
	}
}

func TestUnits(t *testing.T) {
	cases := []struct{ gen, width, want int }{
		{3, 16, 15760}, {4, 16, 31504}, {5, 16, 63008}, {4, 8, 15752}, {0, 16, 0}, {4, Unknown, 0}, {9, 16, 0},
	}
	for _, tc := range cases {
		if got := PCIeBandwidthMBps(tc.gen, tc.width); got != tc.want {
			t.Errorf("PCIe gen %d x%d = %d MB/s, want %d", tc.gen, tc.width, got, tc.want)
		}
	}
	// Per-GPU totals of known parts: P100 4 links, V100 6, A100 12, H100
	// 18, B200 18; unknown compute capability: no figure.
	for _, tc := range []struct{ cc, links, want int }{{6, 4, 160}, {7, 6, 300}, {8, 12, 600}, {9, 18, 900}, {10, 18, 1800}, {0, 12, 0}} {
		if got := NVLinkLinkGBps(tc.cc) * tc.links; got != tc.want {
			t.Errorf("compute capability %d.x with %d links: %d GB/s, want %d", tc.cc, tc.links, got, tc.want)
		}
	}
	for v, want := range map[int]string{12040: "12.4", 12060: "12.6", 11080: "11.8", 0: ""} {
		if got := (Inventory{CUDADriverVersion: v}).CUDAVersion(); got != want {
			t.Errorf("CUDAVersion(%d) = %q, want %q", v, got, want)
		}
	}
}
