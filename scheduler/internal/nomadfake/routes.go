package nomadfake

import (
	"encoding/json"
	"errors"
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

// errNoRoute: no handler for the method and path (Nomad answers 404
// "Invalid method").
var errNoRoute = errors.New("no route")

// dispatch routes a request by its path's area; each area's router
// returns errNoRoute for what it does not serve.
func (s *Server) dispatch(r *http.Request) (any, uint64, error) {
	p := r.URL.Path
	route := s.routeMisc
	switch {
	case strings.HasPrefix(p, "/v1/job"):
		route = s.routeJobs
	case strings.HasPrefix(p, "/v1/alloc"), strings.HasPrefix(p, "/v1/client/allocation/"):
		route = s.routeAllocs
	case strings.HasPrefix(p, "/v1/eval"):
		route = s.routeEvals
	case strings.HasPrefix(p, "/v1/node"):
		route = s.routeNodes
	case strings.HasPrefix(p, "/v1/var"):
		route = s.routeVars
	}
	out, idx, err := route(r)
	if errors.Is(err, errNoRoute) {
		return nil, 0, errf(http.StatusNotFound, "Invalid method")
	}
	return out, idx, err
}

func isWrite(r *http.Request) bool { return r.Method == http.MethodPut || r.Method == http.MethodPost }

func (s *Server) routeMisc(r *http.Request) (any, uint64, error) {
	switch r.URL.Path {
	case "/v1/status/leader":
		return "127.0.0.1:4647", s.index, nil
	case "/.well-known/jwks.json":
		return s.jwksLocked(), 0, nil
	case "/v1/acl/token/self":
		// The fake enforces no ACLs, and says so as Nomad 2.0.6 does: its
		// placeholder token, for any token or none.
		return map[string]any{"AccessorID": "acls-disabled", "SecretID": "", "Name": "ACLs disabled token",
			"Type": "client", "Policies": nil, "Roles": nil, "Global": false}, 0, nil
	}
	return nil, 0, errNoRoute
}

// routeJobs serves /v1/jobs and /v1/job/<id>[/summary|allocations|evaluations|plan].
func (s *Server) routeJobs(r *http.Request) (any, uint64, error) {
	p, m, write := r.URL.Path, r.Method, isWrite(r)
	switch {
	case p == "/v1/jobs" && m == http.MethodGet:
		s.blockingWait(r, "jobs")
		return s.listJobs(r), s.tableIndex["jobs"], nil
	case p == "/v1/jobs" && write:
		return s.registerJob(r, "")
	case !strings.HasPrefix(p, "/v1/job/"):
		return nil, 0, errNoRoute
	}
	id, sub, _ := strings.Cut(strings.TrimPrefix(p, "/v1/job/"), "/")
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
	return nil, 0, errNoRoute
}

// routeAllocs serves /v1/allocations, /v1/allocation/<id>[/stop] and the
// client's /v1/client/allocation/<id>/signal.
func (s *Server) routeAllocs(r *http.Request) (any, uint64, error) {
	p, m, write := r.URL.Path, r.Method, isWrite(r)
	switch {
	case p == "/v1/allocations" && m == http.MethodGet:
		s.blockingWait(r, "allocs")
		return s.listAllocs(r), s.tableIndex["allocs"], nil
	case strings.HasPrefix(p, "/v1/allocation/"):
		id, sub, _ := strings.Cut(strings.TrimPrefix(p, "/v1/allocation/"), "/")
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
	}
	return nil, 0, errNoRoute
}

func (s *Server) routeEvals(r *http.Request) (any, uint64, error) {
	p, m := r.URL.Path, r.Method
	switch {
	case p == "/v1/evaluations" && m == http.MethodGet:
		s.blockingWait(r, "evals")
		return s.listEvals(r), s.tableIndex["evals"], nil
	case strings.HasPrefix(p, "/v1/evaluation/") && m == http.MethodGet:
		return s.readEval(strings.TrimPrefix(p, "/v1/evaluation/"))
	}
	return nil, 0, errNoRoute
}

// routeNodes serves /v1/nodes, /v1/node/<id> and the node pools.
func (s *Server) routeNodes(r *http.Request) (any, uint64, error) {
	p, m := r.URL.Path, r.Method
	switch {
	case p == "/v1/nodes" && m == http.MethodGet:
		s.blockingWait(r, "nodes")
		return s.listNodes(r), s.tableIndex["nodes"], nil
	case p == "/v1/node/pools" && m == http.MethodGet:
		s.blockingWait(r, "node_pools")
		return s.listPools(), s.tableIndex["node_pools"], nil
	case p == "/v1/node/pools" && isWrite(r):
		return s.upsertPool(r)
	case strings.HasPrefix(p, "/v1/node/pool/") && m == http.MethodGet:
		return s.readPool(strings.TrimPrefix(p, "/v1/node/pool/"))
	case strings.HasPrefix(p, "/v1/node/pool/") && m == http.MethodDelete:
		return s.deletePool(strings.TrimPrefix(p, "/v1/node/pool/"))
	case strings.HasPrefix(p, "/v1/node/") && m == http.MethodGet:
		s.blockingWait(r, "nodes")
		return s.readNode(strings.TrimPrefix(p, "/v1/node/"))
	}
	return nil, 0, errNoRoute
}

func (s *Server) routeVars(r *http.Request) (any, uint64, error) {
	p := r.URL.Path
	if p == "/v1/vars" && r.Method == http.MethodGet {
		s.blockingWait(r, "vars")
		return s.listVars(r), s.tableIndex["vars"], nil
	}
	if !strings.HasPrefix(p, "/v1/var/") {
		return nil, 0, errNoRoute
	}
	path := strings.TrimPrefix(p, "/v1/var/")
	switch r.Method {
	case http.MethodGet:
		s.blockingWait(r, "vars")
		return s.readVar(r, path)
	case http.MethodPut, http.MethodPost:
		return s.writeVar(r, path)
	case http.MethodDelete:
		return s.deleteVar(r, path)
	}
	return nil, 0, errNoRoute
}
