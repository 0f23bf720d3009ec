package nomadfake

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Workload identities, as the Nomad servers sign them: the fake serves its
// public key at /.well-known/jwks.json and signs identities for its
// allocations (EdDSA, which Nomad uses when it has no RSA key; the key is
// made on first use so fakes that never sign pay nothing).

const identityKeyID = "nomadfake-key"

// identityKeyLocked returns the signing key; s.mu is held.
func (s *Server) identityKeyLocked() ed25519.PrivateKey {
	if s.idKey == nil {
		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			panic(fmt.Sprintf("nomadfake: generating the identity key: %v", err))
		}
		s.idKey = key
	}
	return s.idKey
}

func (s *Server) jwksLocked() jose.JSONWebKeySet {
	key := s.identityKeyLocked()
	return jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{
		Key: key.Public(), KeyID: identityKeyID, Algorithm: string(jose.EdDSA), Use: "sig"}}}
}

// SignIdentity returns a workload identity for task of allocation allocID
// with the claims Nomad puts in one (namespace, job, allocation, task),
// audience aud and, when ttl > 0, an expiry ttl from now.
func (s *Server) SignIdentity(allocID, task string, aud []string, ttl time.Duration) (string, error) {
	s.mu.Lock()
	a, ok := s.allocs[allocID]
	var ns, job string
	if ok {
		ns, job = a.Namespace, a.JobID
	}
	key := s.identityKeyLocked()
	s.mu.Unlock()
	if !ok {
		return "", fmt.Errorf("nomadfake: no allocation %s", allocID)
	}
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: key},
		(&jose.SignerOptions{}).WithHeader("kid", identityKeyID).WithType("JWT"))
	if err != nil {
		return "", err
	}
	now := time.Now()
	std := jwt.Claims{Subject: fmt.Sprintf("global:%s:%s:%s:%s:impact", ns, job, a.TaskGroup, task),
		Audience: aud, IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now)}
	if ttl > 0 {
		std.Expiry = jwt.NewNumericDate(now.Add(ttl))
	}
	return jwt.Signed(sig).Claims(&std).Claims(map[string]any{"nomad_namespace": ns, "nomad_job_id": job,
		"nomad_allocation_id": allocID, "nomad_task": task}).Serialize()
}
