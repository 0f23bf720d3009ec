package driver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
)

// The fingerprint's health says how gangs find their rendezvous: the
// configured address, the Consul service (issue 39: it used to ask for a
// rendezvous_addr with consul_service set), or neither.
func TestFingerprintNamesTheRendezvous(t *testing.T) {
	t.Parallel()
	exe := filepath.Join(t.TempDir(), "impact-exec")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	d := New(hclog.NewNullLogger(), exe)
	viaConsul := defaultConfig()
	viaConsul.ConsulService, viaConsul.ConsulTag = "impact-scheduler", "leader"
	direct := defaultConfig()
	direct.RendezvousAddr = "http://10.0.0.5:4680"
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"consul", viaConsul, "rendezvous found in consul: a passing instance of service impact-scheduler with tag leader"},
		{"address", direct, "rendezvous at http://10.0.0.5:4680"},
		{"neither", defaultConfig(), "needs a rendezvous_addr"},
	} {
		fp := d.fingerprint(c.cfg)
		if fp.GetHealth() != driverpb.FingerprintResponse_HEALTHY || !strings.Contains(fp.GetHealthDescription(), c.want) {
			t.Errorf("%s: %v %q, want healthy saying %q", c.name, fp.GetHealth(), fp.GetHealthDescription(), c.want)
		}
	}
}
