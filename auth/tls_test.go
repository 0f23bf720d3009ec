package auth_test

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/auth"
	"github.com/impact-sched/nomad-impact/internal/authtest"
)

// A listener with a client CA serves only clients presenting a certificate
// it signed; clients verify the server against the CA file they are given.
func TestServerAndClientTLS(t *testing.T) {
	c := authtest.WriteCerts(t, t.TempDir())
	srvCfg, err := auth.ServerTLS(c.ServerCert, c.ServerKey, c.CA)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }),
		TLSConfig: srvCfg, ReadHeaderTimeout: time.Second}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	url := "https://" + ln.Addr().String() + "/"
	get := func(ca, cert, key string) error {
		cfg, err := auth.ClientTLS(ca, cert, key, "", false)
		if err != nil {
			return err
		}
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		resp, err := hc.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return err
	}
	if err := get(c.CA, c.ClientCert, c.ClientKey); err != nil {
		t.Errorf("client with the CA and a client certificate: %v", err)
	}
	if err := get(c.CA, "", ""); err == nil {
		t.Error("a client without a certificate was served by an mTLS listener")
	}
	if err := get(c.OtherCA, c.ClientCert, c.ClientKey); err == nil {
		t.Error("a client trusting another CA accepted the server")
	}
	if _, err := auth.ServerTLS(c.ServerCert, c.ServerKey, c.ServerKey); err == nil {
		t.Error("a client CA file without certificates was accepted")
	}
}

func TestLoopbackListen(t *testing.T) {
	for _, tc := range []struct {
		listen string
		want   bool
	}{
		{"127.0.0.1:4680", true},
		{"[::1]:4680", true},
		{"localhost:4680", true},
		{"0.0.0.0:4680", false},
		{":4680", false},
		{"10.0.0.5:4680", false},
		{"example.com:4680", false},
		{"127.0.0.1", false}, // no port: not a listen address
	} {
		if got := auth.LoopbackListen(tc.listen); got != tc.want {
			t.Errorf("LoopbackListen(%q) = %v, want %v", tc.listen, got, tc.want)
		}
	}
}
