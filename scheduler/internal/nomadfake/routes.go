package nomadfake

import (
	"encoding/json"
	"net/http"
	"strings"
)

// route dispatches one non-stream request. It returns the value to encode
// as JSON (nil: empty 200), the X-Nomad-Index to report, or an error.
func (s *Server) route(r *http.Request) (any, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out, idx, err := s.dispatch(r)
	if err != nil || out == nil {
		return out, idx, err
	}
	// Encode while holding the lock: the objects are live state.
	if vc, ok := out.(varConflict); ok {
		b, err := json.Marshal(vc.v)
		return varConflict{json.RawMessage(b)}, idx, err
	}
	if tmpl, list := templateFor(r); tmpl != "" {
		out = shape(out, tmpl, list)
	}
	b, err := json.Marshal(out)
	return json.RawMessage(b), idx, err
}

func (s *Server) dispatch(r *http.Request) (any, uint64, error) {
	p := r.URL.Path
	m := r.Method
	write := m == http.MethodPut || m == http.MethodPost
	switch {
	case p == "/v1/status/leader":
		return "127.0.0.1:4647", s.index, nil
	case p == "/.well-known/jwks.json":
		return s.jwksLocked(), 0, nil
	case p == "/v1/acl/token/self":
		// The fake enforces no ACLs, and says so as Nomad 2.0.6 does: its
		// placeholder token, for any token or none.
		return map[string]any{"AccessorID": "acls-disabled", "SecretID": "", "Name": "ACLs disabled token",
			"Type": "client", "Policies": nil, "Roles": nil, "Global": false}, 0, nil
	case p == "/v1/jobs" && m == http.MethodGet:
		s.blockingWait(r, "jobs")
		return s.listJobs(r), s.tableIndex["jobs"], nil
	case p == "/v1/jobs" && write:
		return s.registerJob(r, "")
	case strings.HasPrefix(p, "/v1/job/"):
		rest := strings.TrimPrefix(p, "/v1/job/")
		id, sub, _ := strings.Cut(rest, "/")
		switch {
		case sub == "" && m == http.MethodGet:
			s.blockingWait(r, "jobs")
			return s.readJob(r, id)
		case sub == "" && write:
			return s.registerJob(r, id)
		case sub == "" && m == http.MethodDelete:
			return s.deregisterJob(r, id)
		case sub == "summary" && m == http.MethodGet:
			s.blockingWait(r, "jobs", "allocs")
			return s.jobSummary(r, id)
		case sub == "allocations" && m == http.MethodGet:
			s.blockingWait(r, "allocs")
			return s.jobAllocs(r, id)
		case sub == "evaluations" && m == http.MethodGet:
			s.blockingWait(r, "evals")
			return s.jobEvals(r, id)
		case sub == "plan" && write:
			return s.planJob(r, id)
		}
	case p == "/v1/allocations" && m == http.MethodGet:
		s.blockingWait(r, "allocs")
		return s.listAllocs(r), s.tableIndex["allocs"], nil
	case strings.HasPrefix(p, "/v1/allocation/"):
		rest := strings.TrimPrefix(p, "/v1/allocation/")
		id, sub, _ := strings.Cut(rest, "/")
		switch {
		case sub == "" && m == http.MethodGet:
			s.blockingWait(r, "allocs")
			return s.readAlloc(id)
		case sub == "stop" && write:
			return s.stopAlloc(id)
		}
	case strings.HasPrefix(p, "/v1/client/allocation/") && strings.HasSuffix(p, "/signal") && write:
		id := strings.TrimSuffix(strings.TrimPrefix(p, "/v1/client/allocation/"), "/signal")
		return s.signalAlloc(r, id)
	case p == "/v1/evaluations" && m == http.MethodGet:
		s.blockingWait(r, "evals")
		return s.listEvals(r), s.tableIndex["evals"], nil
	case strings.HasPrefix(p, "/v1/evaluation/") && m == http.MethodGet:
		return s.readEval(strings.TrimPrefix(p, "/v1/evaluation/"))
	case p == "/v1/nodes" && m == http.MethodGet:
		s.blockingWait(r, "nodes")
		return s.listNodes(r), s.tableIndex["nodes"], nil
	case p == "/v1/node/pools" && m == http.MethodGet:
		s.blockingWait(r, "node_pools")
		return s.listPools(), s.tableIndex["node_pools"], nil
	case p == "/v1/node/pools" && write:
		return s.upsertPool(r)
	case strings.HasPrefix(p, "/v1/node/pool/") && m == http.MethodGet:
		return s.readPool(strings.TrimPrefix(p, "/v1/node/pool/"))
	case strings.HasPrefix(p, "/v1/node/") && m == http.MethodGet:
		s.blockingWait(r, "nodes")
		return s.readNode(strings.TrimPrefix(p, "/v1/node/"))
	case p == "/v1/vars" && m == http.MethodGet:
		s.blockingWait(r, "vars")
		return s.listVars(r), s.tableIndex["vars"], nil
	case strings.HasPrefix(p, "/v1/var/"):
		path := strings.TrimPrefix(p, "/v1/var/")
		switch m {
		case http.MethodGet:
			s.blockingWait(r, "vars")
			return s.readVar(r, path)
		case http.MethodPut, http.MethodPost:
			return s.writeVar(r, path)
		case http.MethodDelete:
			return s.deleteVar(r, path)
		}
	}
	return nil, 0, errf(http.StatusNotFound, "Invalid method")
}
