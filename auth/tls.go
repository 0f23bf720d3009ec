package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// ServerTLS is the TLS config of a listener serving certFile/keyFile; with
// clientCAFile every client must present a certificate signed by that CA
// (mutual TLS). The key pair is read again when it changes on disk, so a
// renewed certificate needs no restart.
func ServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("tls: cert and key must both be set")
	}
	kp := &keyPair{cert: certFile, key: keyFile}
	if _, err := kp.load(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return kp.load()
		},
	}
	if clientCAFile != "" {
		pool, err := certPool(clientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

type keyPair struct {
	mu        sync.Mutex
	cert, key string
	modCert   time.Time
	modKey    time.Time
	loaded    *tls.Certificate
}

// load returns the key pair, read again when either file changed. A pair
// that fails to load after a change keeps the previous one in use.
func (k *keyPair) load() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ci, err1 := os.Stat(k.cert)
	ki, err2 := os.Stat(k.key)
	if k.loaded != nil && err1 == nil && err2 == nil && ci.ModTime().Equal(k.modCert) && ki.ModTime().Equal(k.modKey) {
		return k.loaded, nil
	}
	c, err := tls.LoadX509KeyPair(k.cert, k.key)
	if err != nil {
		if k.loaded != nil {
			return k.loaded, nil
		}
		return nil, fmt.Errorf("tls: loading %s / %s: %w", k.cert, k.key, err)
	}
	k.loaded = &c
	if err1 == nil && err2 == nil {
		k.modCert, k.modKey = ci.ModTime(), ki.ModTime()
	}
	return k.loaded, nil
}

func certPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: reading CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: %s holds no PEM certificate", file)
	}
	return pool, nil
}

// ClientTLS configures a client: caFile ("" = the system roots) verifies
// the server, certFile/keyFile (both or neither) are presented for mutual
// TLS, serverName overrides the name checked in the server's certificate.
func ClientTLS(caFile, certFile, keyFile, serverName string, insecure bool) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, InsecureSkipVerify: insecure} //nolint:gosec // only when configured
	if caFile != "" {
		pool, err := certPool(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("tls: client cert and key must be set together")
	}
	if certFile != "" {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: loading client cert %s / %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg, nil
}

// HTTPClient is an HTTP client for address (http://, https:// or unix://,
// as Nomad's task API socket) with the given TLS config (nil: defaults).
// It returns the client and the base URL to prefix request paths with.
func HTTPClient(address string, tlsCfg *tls.Config, timeout time.Duration) (*http.Client, string, error) {
	tr := &http.Transport{TLSClientConfig: tlsCfg, MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second}
	base := strings.TrimSuffix(address, "/")
	if path, ok := strings.CutPrefix(address, "unix://"); ok {
		if path == "" {
			return nil, "", fmt.Errorf("address %q: empty socket path", address)
		}
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		base = "http://localhost"
	} else if !strings.HasPrefix(address, "http://") && !strings.HasPrefix(address, "https://") {
		return nil, "", fmt.Errorf("address %q: want http://, https:// or unix://", address)
	}
	return &http.Client{Transport: tr, Timeout: timeout}, base, nil
}

// LoopbackListen reports whether a listen address (host:port) is reachable
// from this host only: what both the agent and the gang server require
// before they serve without authentication.
func LoopbackListen(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
