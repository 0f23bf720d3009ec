package gang

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/auth"
)

// PathPrefix is where the handler expects to be mounted.
const PathPrefix = "/v1/gang/"

const (
	defaultWait = 30 * time.Second
	maxWait     = 5 * time.Minute
	maxBody     = 64 << 10
)

// Handler serves the rendezvous endpoint (see README.md)
// over a Registry. Mount it at PathPrefix:
//
//	mux.Handle(gang.PathPrefix, gang.NewHandlerWith(reg, &gang.NomadAuth{...}, logger))
type Handler struct {
	reg    *Registry
	auth   Authorizer
	logger hclog.Logger
}

// NewHandler returns the HTTP handler of a registry without
// authentication (DevNoAuth): for tests and development servers only.
// Anything reachable from other hosts uses NewHandlerWith.
func NewHandler(reg *Registry, logger hclog.Logger) *Handler {
	return NewHandlerWith(reg, DevNoAuth{}, logger)
}

// NewHandlerWith returns the HTTP handler of a registry whose requests a
// must authorize (NomadAuth: workload identities and ACL tokens).
func NewHandlerWith(reg *Registry, a Authorizer, logger hclog.Logger) *Handler {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if a == nil {
		a = DevNoAuth{}
	}
	return &Handler{reg: reg, auth: a, logger: logger.Named("gang")}
}

// allowed writes the refusal when err is one and reports whether the
// request may go on.
func (h *Handler) allowed(w http.ResponseWriter, r *http.Request, op, gangID, member string, err error) bool {
	if err == nil {
		return true
	}
	code := auth.Code(err)
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="impact rendezvous"`)
	}
	h.logger.Info("request refused", "op", op, "gang", gangID, "member", member, "code", code,
		"remote", r.RemoteAddr, "error", err)
	writeErr(w, code, err)
	return false
}

// ServeHTTP routes /v1/gang/... requests.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	segs, err := pathSegments(r.URL)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	switch {
	case len(segs) == 0:
		h.list(w, r)
	case len(segs) == 1:
		h.read(w, r, segs[0])
	case len(segs) == 2 && segs[1] == "stop":
		h.stop(w, r, segs[0])
	case len(segs) == 3 && segs[1] == "members":
		h.member(w, r, segs[0], segs[2])
	case len(segs) == 4 && segs[1] == "members" && segs[3] == "heartbeat":
		h.heartbeat(w, r, segs[0], segs[2])
	case len(segs) == 4 && segs[1] == "members" && segs[3] == "exit":
		h.exit(w, r, segs[0], segs[2])
	default:
		writeErr(w, http.StatusNotFound, fmt.Errorf("no such endpoint: %s", r.URL.Path))
	}
}

// pathSegments are the unescaped segments of u's path after PathPrefix
// (or the whole path, for a handler mounted with the prefix stripped).
func pathSegments(u *url.URL) ([]string, error) {
	rest, ok := strings.CutPrefix(u.EscapedPath(), PathPrefix)
	if !ok && u.EscapedPath() == strings.TrimSuffix(PathPrefix, "/") {
		rest, ok = "", true
	}
	if !ok {
		// Also accept being mounted with the prefix stripped.
		rest = strings.TrimPrefix(u.EscapedPath(), "/")
	}
	if rest == "" {
		return nil, nil
	}
	var segs []string
	for _, s := range strings.Split(strings.TrimSuffix(rest, "/"), "/") {
		v, err := url.PathUnescape(s)
		if err != nil {
			return nil, fmt.Errorf("bad path segment %q: %w", s, err)
		}
		segs = append(segs, v)
	}
	return segs, nil
}

// list serves GET /v1/gang/: the gangs the caller may see.
func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	if !method(w, r, http.MethodGet) {
		return
	}
	visible, err := h.auth.ListFilter(r)
	if !h.allowed(w, r, "list", "", "", err) {
		return
	}
	all := h.reg.List()
	out := make([]Status, 0, len(all))
	for _, st := range all {
		if visible(st.ID) {
			out = append(out, st)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// read serves GET /v1/gang/<gang>[?member=]: a member reads its own gang
// with its identity, anyone else with a token that may read the gang.
func (h *Handler) read(w http.ResponseWriter, r *http.Request, gangID string) {
	if !method(w, r, http.MethodGet) {
		return
	}
	var err error
	if m := r.URL.Query().Get("member"); m != "" {
		err = h.auth.Member(r, gangID, m, nil)
	} else {
		err = h.auth.ReadGang(r, gangID)
	}
	if !h.allowed(w, r, "get", gangID, r.URL.Query().Get("member"), err) {
		return
	}
	h.get(w, r, gangID)
}

// stop serves PUT /v1/gang/<gang>/stop.
func (h *Handler) stop(w http.ResponseWriter, r *http.Request, gangID string) {
	if !method(w, r, http.MethodPut, http.MethodPost) {
		return
	}
	if !h.allowed(w, r, "stop", gangID, "", h.auth.Stop(r, gangID)) {
		return
	}
	var req StopRequest
	if !decode(w, r, &req) {
		return
	}
	h.reply(w, "stop", gangID, "")(h.reg.Stop(gangID, req))
}

// member serves PUT (join) and DELETE (leave) /v1/gang/<gang>/members/<member>.
func (h *Handler) member(w http.ResponseWriter, r *http.Request, gangID, member string) {
	switch r.Method {
	case http.MethodPut, http.MethodPost:
		var req JoinRequest
		if !decode(w, r, &req) {
			return
		}
		if !h.allowed(w, r, "join", gangID, member, h.auth.Member(r, gangID, member, &req)) {
			return
		}
		h.reply(w, "join", gangID, member)(h.reg.Join(r.Context(), gangID, member, req))
	case http.MethodDelete:
		if !h.allowed(w, r, "leave", gangID, member, h.auth.Member(r, gangID, member, nil)) {
			return
		}
		h.reply(w, "leave", gangID, member)(h.reg.Leave(gangID, member))
	default:
		method(w, r, http.MethodPut, http.MethodDelete)
	}
}

// heartbeat serves PUT /v1/gang/<gang>/members/<member>/heartbeat.
func (h *Handler) heartbeat(w http.ResponseWriter, r *http.Request, gangID, member string) {
	if !method(w, r, http.MethodPut, http.MethodPost) {
		return
	}
	if !h.allowed(w, r, "heartbeat", gangID, member, h.auth.Member(r, gangID, member, nil)) {
		return
	}
	h.reply(w, "heartbeat", gangID, member)(h.reg.Heartbeat(gangID, member))
}

// exit serves PUT /v1/gang/<gang>/members/<member>/exit.
func (h *Handler) exit(w http.ResponseWriter, r *http.Request, gangID, member string) {
	if !method(w, r, http.MethodPut, http.MethodPost) {
		return
	}
	if !h.allowed(w, r, "exit", gangID, member, h.auth.Member(r, gangID, member, nil)) {
		return
	}
	var req ExitRequest
	if !decode(w, r, &req) {
		return
	}
	h.reply(w, "exit", gangID, member)(h.reg.Exit(gangID, member, req))
}

// get serves a gang's status, blocking while ?index= is current.
func (h *Handler) get(w http.ResponseWriter, r *http.Request, gangID string) {
	q := r.URL.Query()
	var index uint64
	if v := q.Get("index"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("index %q: %w", v, err))
			return
		}
		index = n
	}
	wait := defaultWait
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("wait %q: not a non-negative duration", v))
			return
		}
		wait = min(d, maxWait)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		st, changed, err := h.reg.Get(gangID)
		if err != nil || index == 0 || st.Index > index {
			h.reply(w, "get", gangID, q.Get("member"))(st, err)
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			writeJSON(w, http.StatusOK, st.only(q.Get("member")))
			return
		case <-r.Context().Done():
			return
		}
	}
}

func (h *Handler) reply(w http.ResponseWriter, op, gangID, member string) func(Status, error) {
	return func(st Status, err error) {
		if err != nil {
			code := http.StatusInternalServerError
			switch {
			case errors.Is(err, ErrInvalid):
				code = http.StatusBadRequest
			case errors.Is(err, ErrNotFound):
				code = http.StatusNotFound
			case errors.Is(err, ErrConflict):
				code = http.StatusConflict
			}
			h.logger.Debug("request refused", "op", op, "gang", gangID, "member", member, "error", err)
			writeErr(w, code, err)
			return
		}
		if op != "get" && op != "heartbeat" {
			h.logger.Debug("gang changed", "op", op, "gang", gangID, "member", member,
				"state", st.State, "arrived", st.Arrived, "size", st.Size)
		}
		writeJSON(w, http.StatusOK, st.only(member))
	}
}

// only trims the member list to one member: a member's own requests get
// O(1) answers, so a gang of n members costs O(n) traffic per change, not
// O(n^2).
func (s Status) only(member string) Status {
	if member == "" {
		return s
	}
	m, ok := s.Member(member)
	s.Members = nil
	if ok {
		s.Members = []Member{m}
	}
	return s
}

func method(w http.ResponseWriter, r *http.Request, allowed ...string) bool {
	for _, m := range allowed {
		if r.Method == m {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	writeErr(w, http.StatusMethodNotAllowed, fmt.Errorf("method %s not allowed on %s", r.Method, r.URL.Path))
	return false
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("reading body: %w", err))
		return false
	}
	if len(body) > maxBody {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("body larger than %d bytes", maxBody))
		return false
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return true
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("decoding %T: %w", v, err))
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, ErrorResponse{Error: err.Error()})
}

// Server is the tiny standalone rendezvous server: a Registry and its
// Handler on their own listener. Used by tests, the e2e suite and
// `impact-exec gang-server` when no impact agent runs.
type Server struct {
	Registry *Registry
	URL      string // base URL, e.g. http://127.0.0.1:4321
	srv      *http.Server
	ln       net.Listener
}

// ServerOptions are the optional parts of a Server.
type ServerOptions struct {
	// Auth authorizes requests; nil is DevNoAuth (development only).
	Auth Authorizer
	// TLS serves https (mTLS when it asks for client certificates).
	TLS *tls.Config
}

// StartServer listens on addr (e.g. "127.0.0.1:0") and serves without
// authentication (DevNoAuth) in the background until Close: for tests.
func StartServer(addr string, cfg RegistryConfig, logger hclog.Logger) (*Server, error) {
	return StartServerWith(addr, cfg, ServerOptions{}, logger)
}

// StartServerWith is StartServer with authentication and TLS.
func StartServerWith(addr string, cfg RegistryConfig, opts ServerOptions, logger hclog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("gang server: listen on %s: %w", addr, err)
	}
	reg := NewRegistry(cfg)
	mux := http.NewServeMux()
	mux.Handle(PathPrefix, NewHandlerWith(reg, opts.Auth, logger))
	scheme := "http://"
	if opts.TLS != nil {
		ln = tls.NewListener(ln, opts.TLS)
		scheme = "https://"
	}
	s := &Server{Registry: reg, URL: scheme + ln.Addr().String(), ln: ln,
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		return s.srv.Close()
	}
	return nil
}
