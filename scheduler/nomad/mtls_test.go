package nomad

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/internal/nomadfake"
)

// testCA is a throwaway certificate authority for mTLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

// newSerial is a random certificate serial number.
func newSerial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a leaf certificate for usage (server: for 127.0.0.1; client:
// client auth) and returns its certificate and key PEM.
func (ca *testCA) issue(t *testing.T, name string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: newSerial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// mtlsFiles are the PEM files of an mTLS setup, written to a temp dir.
type mtlsFiles struct {
	ca, otherCA, clientCert, clientKey string
}

// newMTLSFake serves the fake Nomad over TLS with a server certificate
// for 127.0.0.1 and requires client certificates signed by the same CA,
// as an agent with tls { http = true, verify_https_client = true } does.
func newMTLSFake(t *testing.T) (*nomadfake.Server, mtlsFiles) {
	t.Helper()
	dir := t.TempDir()
	ca := newTestCA(t, "impact test CA")
	srvCert, srvKey := ca.issue(t, "server.global.nomad", x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := ca.issue(t, "impact-scheduler", x509.ExtKeyUsageClientAuth)
	pair, err := tls.X509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	f := nomadfake.New(nomadfake.Options{
		HeartbeatInterval: 50 * time.Millisecond,
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{pair},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    pool,
			MinVersion:   tls.VersionTLS12,
		},
	})
	t.Cleanup(f.Close)
	if !strings.HasPrefix(f.URL(), "https://127.0.0.1:") {
		t.Fatalf("fake URL %s, want https on 127.0.0.1", f.URL())
	}
	other := newTestCA(t, "some other CA")
	return f, mtlsFiles{
		ca:         writeFile(t, dir, "ca.pem", ca.pem),
		otherCA:    writeFile(t, dir, "other-ca.pem", other.pem),
		clientCert: writeFile(t, dir, "client.pem", cliCert),
		clientKey:  writeFile(t, dir, "client-key.pem", cliKey),
	}
}

// errorNames reports whether err's text names a TLS or certificate
// problem, so an operator can tell it from a network or ACL failure.
func errorNames(err error, words ...string) bool {
	if err == nil {
		return false
	}
	msg := strings.ToLower(err.Error())
	for _, w := range words {
		if !strings.Contains(msg, w) {
			return false
		}
	}
	return true
}

func TestClientMutualTLS(t *testing.T) {
	f, files := newMTLSFake(t)
	node, err := nomadfake.TopologyNode("node-0", "gpu0", "gpu", 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	f.UpsertNode(node)

	fromFile := Config{Address: f.URL(), CACert: files.ca, ClientCert: files.clientCert, ClientKey: files.clientKey}
	vars := map[string]string{
		"NOMAD_ADDR":        f.URL(),
		"NOMAD_CACERT":      files.ca,
		"NOMAD_CLIENT_CERT": files.clientCert,
		"NOMAD_CLIENT_KEY":  files.clientKey,
	}
	fromEnv, err := ConfigFromEnv(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if fromEnv != fromFile {
		t.Fatalf("ConfigFromEnv = %+v, want %+v", fromEnv, fromFile)
	}

	for _, src := range []struct {
		name string
		cfg  Config
	}{{"config", fromFile}, {"env", fromEnv}} {
		t.Run(src.name, func(t *testing.T) {
			t.Run("client cert connects and the watcher syncs", func(t *testing.T) {
				c, err := NewClient(src.cfg, testLogger(t))
				if err != nil {
					t.Fatal(err)
				}
				ctx := t.Context()
				if err := ping(ctx, c); err != nil {
					t.Fatalf("ping over mTLS: %v", err)
				}
				if err := c.EnsureNodePool(ctx, parking, "parking"); err != nil {
					t.Fatalf("write over mTLS: %v", err)
				}
				e := &env{t: t, fake: f, c: c, log: testLogger(t)}
				e.startWatcher(WatcherConfig{})
				e.register(gpuJob("train-"+src.name, map[string]string{"impact_tier": "high"}, [2]int{1, 2}))
				e.waitFor("node and job over mTLS", func(s *cluster.Snapshot) bool {
					_, ok := s.Job(cluster.JobKey("default", "train-"+src.name))
					return s.NumNodes() == 1 && ok
				})
			})
			t.Run("no client cert is refused with a TLS error", func(t *testing.T) {
				cfg := src.cfg
				cfg.ClientCert, cfg.ClientKey = "", ""
				c, err := NewClient(cfg, nil)
				if err != nil {
					t.Fatal(err)
				}
				err = ping(t.Context(), c)
				if !errorNames(err, "tls", "certificate") {
					t.Fatalf("ping without a client certificate: %v, want an error naming TLS and the certificate", err)
				}
				if !strings.Contains(err.Error(), f.URL()) {
					t.Errorf("error %q does not name the Nomad address", err)
				}
			})
			t.Run("wrong CA is refused with a certificate error", func(t *testing.T) {
				cfg := src.cfg
				cfg.CACert = files.otherCA
				c, err := NewClient(cfg, nil)
				if err != nil {
					t.Fatal(err)
				}
				err = ping(t.Context(), c)
				if !errorNames(err, "certificate", "unknown authority") {
					t.Fatalf("ping trusting the wrong CA: %v, want an error naming the untrusted certificate", err)
				}
			})
		})
	}

	// The env path also refuses a half-configured client identity before
	// any connection is made.
	half := map[string]string{"NOMAD_ADDR": f.URL(), "NOMAD_CACERT": files.ca, "NOMAD_CLIENT_CERT": files.clientCert}
	cfg, err := ConfigFromEnv(func(k string) (string, bool) { v, ok := half[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewClient(cfg, nil); !errorNames(err, "client_cert", "client_key") {
		t.Errorf("NOMAD_CLIENT_CERT without NOMAD_CLIENT_KEY: %v, want an error naming both", err)
	}
	// Skipping verification does not stand in for the client certificate:
	// the server still demands one.
	vars["NOMAD_SKIP_VERIFY"] = "true"
	delete(vars, "NOMAD_CLIENT_CERT")
	delete(vars, "NOMAD_CLIENT_KEY")
	cfg, err = ConfigFromEnv(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	if err != nil || !cfg.Insecure {
		t.Fatalf("NOMAD_SKIP_VERIFY=true: %+v, %v", cfg, err)
	}
	c, err := NewClient(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(t.Context(), c); !errorNames(err, "tls", "certificate") {
		t.Errorf("skip-verify without a client certificate: %v, want a TLS certificate error", err)
	}
}
