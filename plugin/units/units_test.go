package units

import "testing"

func TestKnown(t *testing.T) {
	for _, u := range []string{"MiB", "MB/s", "GB/s", "W", "mW", "MHz", "KB"} {
		if !Known(u) {
			t.Errorf("%q rejected", u)
		}
	}
	// Wrong case, units Nomad has no parser for, and the stat-only units.
	for _, u := range []string{"mib", "Mib", "C", "%", "#", "Gbps", "", "MiB "} {
		if Known(u) {
			t.Errorf("%q accepted", u)
		}
	}
	all := All()
	all[0] = "changed"
	if !Known("KiB") {
		t.Error("All returned the package's own slice")
	}
}
