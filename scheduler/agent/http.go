package agent

import (
	"bytes"
	"cmp"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/auth"
	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
)

// ViewSource is what the HTTP API reads: the agent's health and the view of
// the last cycle. The agent implements it; tests use a static one.
type ViewSource interface {
	Health() agentapi.Health
	Queue() agentapi.Queue
	// Explain returns the explanation of one job; namespace "" means the
	// agent's own namespace. ok is false when the job is not managed.
	Explain(namespace, job string) (e agentapi.Explanation, ok bool)
}

// HandlerOptions are the optional parts of the API.
type HandlerOptions struct {
	// Metrics serves /metrics; nil leaves it out.
	Metrics http.Handler
	// Gang is the task driver's rendezvous API (package gang), mounted under
	// /v1/gang/ so the impact-exec tasks of a gang meet at the scheduler;
	// nil leaves it out. It authorizes its own requests (gang.NomadAuth).
	Gang http.Handler
	// NomadAddress is Nomad's HTTP address; when it is http(s), the job
	// pages link the job in Nomad's UI.
	NomadAddress string
	// ParkingPool is the node pool queued jobs wait in: the pages link
	// Nomad's jobs list filtered on it (default "impact-queue").
	ParkingPool string
	// Auth guards /v1/queue, /v1/explain, the pages (/ui/) and /metrics;
	// nil is OpenAuth.
	// /v1/health is always open (load balancers and Consul checks).
	Auth APIAuth
}

// NewHandler returns the agent's HTTP API.
func NewHandler(src ViewSource, opts HandlerOptions, log hclog.Logger) http.Handler {
	if opts.Auth == nil {
		opts.Auth = OpenAuth{}
	}
	h := &handler{src: src, log: log, auth: opts.Auth}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/health", h.health)
	mux.HandleFunc("/v1/queue", h.queue)
	mux.HandleFunc("/v1/explain/", h.explain)
	ui := &uiHandler{src: src, log: log, auth: opts.Auth, parking: cmp.Or(opts.ParkingPool, "impact-queue")}
	if strings.HasPrefix(opts.NomadAddress, "http://") || strings.HasPrefix(opts.NomadAddress, "https://") {
		ui.nomad = strings.TrimRight(opts.NomadAddress, "/")
	}
	mux.Handle("/ui/", ui)
	mux.Handle("/ui", ui)
	if opts.Metrics != nil {
		metrics := opts.Metrics
		mux.Handle("/metrics", getOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if h.refused(w, r, opts.Auth.Metrics(r)) {
				return
			}
			metrics.ServeHTTP(w, r)
		})))
	}
	if opts.Gang != nil {
		mux.Handle("/v1/gang/", opts.Gang)
		mux.Handle("/v1/gang", opts.Gang)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path+
			" (the API serves /v1/health, /v1/queue, /v1/explain/<job>, /metrics; the pages are under /ui/)")
	})
	return mux
}

type handler struct {
	src  ViewSource
	log  hclog.Logger
	auth APIAuth
}

// refused answers a refusal (401, 403 or 503 with its message) and reports
// whether err was one.
func (h *handler) refused(w http.ResponseWriter, r *http.Request, err error) bool {
	if err == nil {
		return false
	}
	code := auth.Code(err)
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="impact"`)
	}
	h.log.Debug("request refused", "path", r.URL.Path, "code", code, "remote", r.RemoteAddr, "error", err)
	writeError(w, code, err.Error())
	return true
}

func (h *handler) health(w http.ResponseWriter, r *http.Request) {
	if !allowGet(w, r) {
		return
	}
	hl := h.src.Health()
	code := http.StatusOK
	if hl.Status != agentapi.StatusOK {
		code = http.StatusServiceUnavailable
	}
	h.writeJSON(w, code, hl)
}

func (h *handler) queue(w http.ResponseWriter, r *http.Request) {
	if !allowGet(w, r) {
		return
	}
	visible, err := h.auth.ReadFilter(r)
	if h.refused(w, r, err) {
		return
	}
	q := h.src.Queue()
	// Positions and the cluster summary stay global (a job's place in the
	// queue is what its owner asks about); other namespaces' jobs are left
	// out.
	jobs := make([]agentapi.Entry, 0, len(q.Jobs))
	for _, e := range q.Jobs {
		if visible(e.Namespace) == nil {
			jobs = append(jobs, e)
		}
	}
	q.Jobs = jobs
	h.writeJSON(w, http.StatusOK, q)
}

func (h *handler) explain(w http.ResponseWriter, r *http.Request) {
	if !allowGet(w, r) {
		return
	}
	raw := strings.TrimPrefix(r.URL.EscapedPath(), "/v1/explain/")
	job, err := url.PathUnescape(raw)
	if err != nil || job == "" {
		writeError(w, http.StatusBadRequest, "want /v1/explain/<job>, with the job ID path-escaped")
		return
	}
	ns := r.URL.Query().Get("namespace")
	visible, err := h.auth.ReadFilter(r)
	if h.refused(w, r, err) {
		return
	}
	if ns != "" && h.refused(w, r, visible(ns)) {
		return
	}
	e, ok := h.src.Explain(ns, job)
	if ok && h.refused(w, r, visible(e.Namespace)) {
		return
	}
	if !ok {
		msg := "job " + job + " is not managed by the impact scheduler (not in its parking pool, or not seen yet)"
		if ns != "" {
			msg = "job " + job + " in namespace " + ns + " is not managed by the impact scheduler (not in its parking pool, or not seen yet)"
		}
		writeError(w, http.StatusNotFound, msg)
		return
	}
	h.writeJSON(w, http.StatusOK, e)
}

func (h *handler) writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := encodeJSON(v, true)
	if err != nil {
		h.log.Error("encoding response", "error", err)
		writeError(w, http.StatusInternalServerError, "encoding response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	body, _ := encodeJSON(agentapi.Error{Error: msg}, false)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

func allowGet(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	writeError(w, http.StatusMethodNotAllowed, r.Method+" not allowed; use GET")
	return false
}

func getOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if allowGet(w, r) {
			next.ServeHTTP(w, r)
		}
	})
}

// encodeJSON encodes without HTML escaping: the API is read by terminals
// and scripts, where "\u003cjob\u003e" helps nobody.
func encodeJSON(v any, indent bool) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if indent {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
