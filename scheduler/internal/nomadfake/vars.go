package nomadfake

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// varMeta is a variable without its items, as list and lock answers carry
// it (testdata/vars-list.json, lock-release-response.txt).
type varMeta struct {
	CreateIndex uint64
	CreateTime  int64
	Lock        *api.VariableLock `json:",omitempty"`
	ModifyIndex uint64
	ModifyTime  int64
	Namespace   string
	Path        string
}

// varFull is a variable with its items (testdata/var-get.json).
type varFull struct {
	CreateIndex uint64
	CreateTime  int64
	Items       map[string]string
	Lock        *api.VariableLock `json:",omitempty"`
	ModifyIndex uint64
	ModifyTime  int64
	Namespace   string
	Path        string
}

func (vs *varState) meta(withLock bool) varMeta {
	m := varMeta{CreateIndex: vs.v.CreateIndex, CreateTime: vs.v.CreateTime, ModifyIndex: vs.v.ModifyIndex,
		ModifyTime: vs.v.ModifyTime, Namespace: vs.v.Namespace, Path: vs.v.Path}
	if withLock && vs.lockID != "" {
		m.Lock = vs.lock(true)
	}
	return m
}

func (vs *varState) full(withLockID bool) varFull {
	f := varFull{CreateIndex: vs.v.CreateIndex, CreateTime: vs.v.CreateTime, Items: vs.v.Items,
		ModifyIndex: vs.v.ModifyIndex, ModifyTime: vs.v.ModifyTime, Namespace: vs.v.Namespace, Path: vs.v.Path}
	if vs.lockID != "" {
		f.Lock = vs.lock(withLockID)
	}
	return f
}

func (vs *varState) lock(withID bool) *api.VariableLock {
	l := &api.VariableLock{TTL: vs.lockTTL.String(), LockDelay: vs.lockDelay.String()}
	if withID {
		l.ID = vs.lockID
	}
	return l
}

// expireLock drops a lock whose TTL passed; the lock delay then starts.
func (s *Server) expireLock(key string, vs *varState) {
	if vs.lockID != "" && s.now().After(vs.lockUntil) {
		s.lockDelayed[key] = vs.lockUntil.Add(vs.lockDelay)
		vs.lockID = ""
	}
}

func (s *Server) listVars(r *http.Request) []varMeta {
	ns := namespaceOf(r)
	prefix := r.URL.Query().Get("prefix")
	out := []varMeta{}
	for _, vs := range s.vars {
		if (ns == "*" || vs.v.Namespace == ns) && strings.HasPrefix(vs.v.Path, prefix) {
			out = append(out, vs.meta(false))
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Path < out[b].Path })
	return out
}

func (s *Server) readVar(r *http.Request, path string) (any, uint64, error) {
	key := jobKey(namespaceOf(r), path)
	vs := s.vars[key]
	if vs == nil {
		return nil, 0, errf(http.StatusNotFound, "variable not found")
	}
	s.expireLock(key, vs)
	// Without ACLs (and for management tokens) Nomad shows the lock with
	// its ID on a read.
	return vs.full(true), s.tableIndex["vars"], nil
}

func (s *Server) writeVar(r *http.Request, path string) (any, uint64, error) {
	q := r.URL.Query()
	var in api.Variable
	if err := decode(r, &in); err != nil {
		return nil, 0, err
	}
	ns := namespaceOf(r)
	if in.Namespace != "" {
		ns = in.Namespace
	}
	key := jobKey(ns, path)
	vs := s.vars[key]
	if vs != nil {
		s.expireLock(key, vs)
	}
	switch {
	case q.Has("lock-acquire"):
		return s.lockAcquire(key, ns, path, vs, &in)
	case q.Has("lock-renew"):
		return s.lockRenew(key, vs, &in)
	case q.Has("lock-release"):
		return s.lockRelease(key, vs, &in)
	}
	if cas := q.Get("cas"); cas != "" {
		want, err := strconv.ParseUint(cas, 10, 64)
		if err != nil {
			return nil, 0, errf(http.StatusBadRequest, "failed to parse cas value: %v", err)
		}
		var have uint64
		if vs != nil {
			have = vs.v.ModifyIndex
		}
		if want != have {
			if vs == nil {
				return varConflict{varMeta{Namespace: ns, Path: path}}, s.index, nil
			}
			return varConflict{vs.full(false)}, s.index, nil
		}
	}
	if vs != nil && vs.lockID != "" && (in.Lock == nil || in.Lock.ID != vs.lockID) {
		return varConflict{vs.full(false)}, s.index, nil
	}
	if len(in.Items) == 0 {
		return nil, 0, errf(http.StatusBadRequest, "variable missing items")
	}
	idx := s.bump("vars")
	now := s.now().UnixNano()
	if vs == nil {
		vs = &varState{v: api.Variable{Namespace: ns, Path: path, CreateIndex: idx, CreateTime: now}}
		s.vars[key] = vs
	}
	vs.v.Items = in.Items
	vs.v.ModifyIndex = idx
	vs.v.ModifyTime = now
	return vs.full(false), idx, nil
}

func (s *Server) deleteVar(r *http.Request, path string) (any, uint64, error) {
	key := jobKey(namespaceOf(r), path)
	vs := s.vars[key]
	if cas := r.URL.Query().Get("cas"); cas != "" {
		want, err := strconv.ParseUint(cas, 10, 64)
		if err != nil {
			return nil, 0, errf(http.StatusBadRequest, "failed to parse cas value: %v", err)
		}
		var have uint64
		if vs != nil {
			have = vs.v.ModifyIndex
		}
		if want != have {
			if vs == nil {
				return varConflict{varMeta{Namespace: namespaceOf(r), Path: path}}, s.index, nil
			}
			return varConflict{vs.full(false)}, s.index, nil
		}
	}
	if vs != nil {
		s.expireLock(key, vs)
		if vs.lockID != "" {
			return varConflict{vs.full(false)}, s.index, nil
		}
	}
	idx := s.bump("vars")
	delete(s.vars, key)
	return nil, idx, nil
}

func (s *Server) lockAcquire(key, ns, path string, vs *varState, in *api.Variable) (any, uint64, error) {
	if in.Lock == nil {
		return nil, 0, errf(http.StatusBadRequest, "missing lock")
	}
	ttl, err := time.ParseDuration(in.Lock.TTL)
	if err != nil {
		return nil, 0, errf(http.StatusBadRequest, "RPC Error:: 400,1 error occurred:\n\t* invalid lock TTL %q", in.Lock.TTL)
	}
	if !s.shortTTL && (ttl < 10*time.Second || ttl > 24*time.Hour) {
		// The real agent's answer (Nomad 2.0.6).
		return nil, 0, errf(http.StatusBadRequest, "RPC Error:: 400,1 error occurred:\n\t* TTL must be between 10 seconds and 24 hours")
	}
	delay, err := time.ParseDuration(in.Lock.LockDelay)
	if err != nil || delay < 0 {
		delay = api.DefaultLockDelay
	}
	blocked := s.now().Before(s.lockDelayed[key])
	if (vs != nil && vs.lockID != "") || blocked {
		return varConflict{varMeta{Namespace: ns, Path: path}}, s.index, nil
	}
	idx := s.bump("vars")
	now := s.now()
	if vs == nil {
		vs = &varState{v: api.Variable{Namespace: ns, Path: path, CreateIndex: idx, CreateTime: now.UnixNano()}}
		s.vars[key] = vs
	}
	if len(in.Items) > 0 {
		vs.v.Items = in.Items
	}
	vs.v.ModifyIndex = idx
	vs.v.ModifyTime = now.UnixNano()
	vs.lockID = s.newID()
	vs.lockTTL, vs.lockDelay = ttl, delay
	vs.lockUntil = now.Add(ttl)
	return vs.full(true), idx, nil
}

func (s *Server) lockRenew(key string, vs *varState, in *api.Variable) (any, uint64, error) {
	if vs == nil || vs.lockID == "" || in.Lock == nil || in.Lock.ID != vs.lockID {
		ns, path, _ := strings.Cut(key, "/")
		return varConflict{varMeta{Namespace: ns, Path: path}}, s.index, nil
	}
	vs.lockUntil = s.now().Add(vs.lockTTL)
	return vs.meta(true), s.index, nil
}

func (s *Server) lockRelease(key string, vs *varState, in *api.Variable) (any, uint64, error) {
	if vs == nil || vs.lockID == "" || in.Lock == nil || in.Lock.ID != vs.lockID {
		ns, path, _ := strings.Cut(key, "/")
		return varConflict{varMeta{Namespace: ns, Path: path}}, s.index, nil
	}
	idx := s.bump("vars")
	vs.lockID = ""
	vs.v.ModifyIndex = idx
	return vs.meta(false), idx, nil
}

// ExpireLocks makes every held lock's TTL run out now (as if its holder
// stopped renewing), starting their lock delays.
func (s *Server) ExpireLocks() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, vs := range s.vars {
		if vs.lockID != "" {
			vs.lockUntil = s.now().Add(-time.Nanosecond)
			s.expireLock(key, vs)
		}
	}
}

// Variable returns a copy of a variable's items in the default namespace,
// or nil.
func (s *Server) Variable(path string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	vs := s.vars[jobKey("default", path)]
	if vs == nil {
		return nil
	}
	out := map[string]string{}
	for k, v := range vs.v.Items {
		out[k] = v
	}
	return out
}
