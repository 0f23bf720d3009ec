package agent

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/auth"
	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// The agent's pages for people (/ui/): the queue, and one page per job
// with what `impact explain` says. Server-rendered, no script: they work
// in any browser, behind any proxy, and refresh themselves every
// uiRefreshSeconds.

//go:embed uipages/*.html
var uiFiles embed.FS

var uiTemplates = template.Must(template.New("").Funcs(template.FuncMap{
	"since":    func(d float64) string { return agentapi.FormatDuration(time.Duration(d * float64(time.Second))) },
	"rfc3339":  func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"score":    func(v float64) string { return fmt.Sprintf("%.2f", v) },
	"term":     func(v float64) string { return fmt.Sprintf("%+.2f", v) },
	"ordinal":  ordinal,
	"jobPage":  JobPagePath,
	"details":  reasonDetails,
	"stateCSS": stateClass,
	"waiting":  func(s string) bool { return s == agentapi.StateWaiting || s == agentapi.StateInvalid },
	"nomadJob": func(base, ns, job string) string {
		if base == "" {
			return ""
		}
		return base + "/ui/jobs/" + url.PathEscape(job) + "@" + url.PathEscape(ns)
	},
}).ParseFS(uiFiles, "uipages/*.html"))

// uiRefreshSeconds is how often the pages reload themselves.
const uiRefreshSeconds = 10

// JobPagePath is the path of a job's page on the agent.
func JobPagePath(namespace, job string) string {
	return "/ui/job/" + url.PathEscape(namespace) + "/" + url.PathEscape(job)
}

// reasonDetails splits the scheduler's reason into its clauses ("; "
// outside parentheses: a parenthesised aside, such as "(time unknown:
// ...)", stays whole), one per line on the page.
func reasonDetails(r string) []string {
	var out []string
	depth, start := 0, 0
	add := func(p string) {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	for i := 0; i < len(r); i++ {
		switch {
		case r[i] == '(':
			depth++
		case r[i] == ')' && depth > 0:
			depth--
		case depth == 0 && strings.HasPrefix(r[i:], "; "):
			add(r[start:i])
			start = i + 2
			i++
		}
	}
	add(r[start:])
	return out
}

func stateClass(s string) string {
	switch s {
	case agentapi.StateRunning:
		return "running"
	case agentapi.StateAdmitting:
		return "admitting"
	case agentapi.StateInvalid:
		return "invalid"
	default:
		return "waiting"
	}
}

// termMeaning says what each score term means, for the job's page.
var termMeaning = map[string]string{
	"tier":       "the job's tier weight times its project's weight: tiers are admitted in order",
	"fair_share": "its project's entitled share of GPU-hours minus the share it used lately (positive: under its share)",
	"deadline":   "urgency: grows as impact_deadline comes near",
	"age":        "time waited, so that nothing waits forever",
	"short":      "shorter walltimes first within a tier; the whole weight once the job has waited long against the oldest of its tier in its pool",
}

type uiHandler struct {
	src   ViewSource
	nomad string // Nomad's HTTP address, for links to its UI; "" for none
	// parking is the parking pool, for the link to Nomad's jobs list of
	// the queued jobs.
	parking string
	log     hclog.Logger
	// auth decides what the pages show, as for /v1/queue and /v1/explain;
	// a browser's token comes from the cookie /ui/login sets.
	auth APIAuth
}

// uiTokenCookie holds the Nomad ACL token a browser entered at /ui/login.
const uiTokenCookie = "impact_token"

// withCookieToken is r with the login cookie's token as X-Nomad-Token,
// unless the request carries a token itself.
func withCookieToken(r *http.Request) *http.Request {
	if auth.RequestToken(r) != "" {
		return r
	}
	c, err := r.Cookie(uiTokenCookie)
	if err != nil || c.Value == "" {
		return r
	}
	r2 := r.Clone(r.Context())
	r2.Header.Set(auth.TokenHeader, c.Value)
	return r2
}

// login keeps a token in an HttpOnly, SameSite=Strict cookie (Secure over
// TLS) so the pages work without script; logout drops it.
func (u *uiHandler) login(w http.ResponseWriter, r *http.Request, logout bool) {
	if r.Method != http.MethodPost {
		if logout {
			w.Header().Set("Allow", "POST")
			http.Error(w, "use POST", http.StatusMethodNotAllowed)
			return
		}
		u.render(w, http.StatusOK, "login.html", loginPage{Code: http.StatusUnauthorized, Message: "Enter a Nomad ACL token."})
		return
	}
	value, maxAge := "", -1
	if !logout {
		if err := r.ParseForm(); err != nil {
			http.Error(w, "bad form: "+err.Error(), http.StatusBadRequest)
			return
		}
		value, maxAge = strings.TrimSpace(r.PostForm.Get("token")), 8*3600
	}
	http.SetCookie(w, &http.Cookie{Name: uiTokenCookie, Value: value, Path: "/ui/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

type loginPage struct {
	Code    int
	Message string
}

// refused renders a refusal: the login form for 401 and 403, else the
// message with its status.
func (u *uiHandler) refused(w http.ResponseWriter, err error) bool {
	if err == nil {
		return false
	}
	code := auth.Code(err)
	if code == http.StatusUnauthorized || code == http.StatusForbidden {
		u.render(w, code, "login.html", loginPage{Code: code, Message: err.Error()})
		return true
	}
	http.Error(w, err.Error(), code)
	return true
}

type queuePage struct {
	Q       agentapi.Queue
	Health  agentapi.Health
	Refresh int
	// NomadQueue is Nomad's jobs list filtered on the parking pool ("" when
	// Nomad's UI is not linked).
	NomadQueue string
}

type jobPage struct {
	E       agentapi.Explanation
	Health  agentapi.Health
	Nomad   string
	Refresh int
	Meaning map[string]string
	JSON    string
	Waiting int // jobs waiting in all
	// Planned says when the job is expected to start, or why that is not
	// known (plannedStart); NomadQueue as for the queue page.
	Planned    string
	NomadQueue string
}

func (u *uiHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.EscapedPath()
	if p == "/ui/login" || p == "/ui/logout" {
		u.login(w, r, p == "/ui/logout")
		return
	}
	if !allowGet(w, r) {
		return
	}
	visible, err := u.auth.ReadFilter(withCookieToken(r))
	if u.refused(w, err) {
		return
	}
	switch {
	case p == "/ui" || p == "/ui/":
		if p == "/ui" {
			http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
			return
		}
		q := u.src.Queue()
		jobs := make([]agentapi.Entry, 0, len(q.Jobs))
		for _, e := range q.Jobs {
			if visible(e.Namespace) == nil {
				jobs = append(jobs, e)
			}
		}
		q.Jobs = jobs
		u.render(w, http.StatusOK, "queue.html", queuePage{Q: q, Health: u.src.Health(), Refresh: uiRefreshSeconds,
			NomadQueue: nomadQueueURL(u.nomad, u.parking)})
	case strings.HasPrefix(p, "/ui/job/"):
		ns, job, ok := splitJobPath(strings.TrimPrefix(p, "/ui/job/"))
		if !ok {
			u.notFound(w, "want /ui/job/<namespace>/<job>, each path-escaped")
			return
		}
		if u.refused(w, visible(ns)) {
			return
		}
		e, found := u.src.Explain(ns, job)
		if !found {
			u.notFound(w, fmt.Sprintf("Job %s in namespace %s is not managed by the impact scheduler: it is not in its parking pool, it left the queue for good (completed, stopped or purged), or it was not seen yet.", job, ns))
			return
		}
		u.render(w, http.StatusOK, "job.html", jobPage{E: e, Health: u.src.Health(), Nomad: u.nomad,
			Refresh: uiRefreshSeconds, Meaning: termMeaning, Waiting: u.src.Queue().Cluster.WaitingJobs,
			Planned: plannedStart(e), NomadQueue: nomadQueueURL(u.nomad, u.parking),
			JSON: "/v1/explain/" + url.PathEscape(job) + "?namespace=" + url.QueryEscape(ns)})
	default:
		u.notFound(w, "No such page: "+p+". The pages are /ui/ (the queue) and /ui/job/<namespace>/<job>.")
	}
}

func splitJobPath(rest string) (ns, job string, ok bool) {
	rawNS, rawJob, found := strings.Cut(rest, "/")
	if !found || rawNS == "" || rawJob == "" || strings.Contains(rawJob, "/") {
		return "", "", false
	}
	ns, err1 := url.PathUnescape(rawNS)
	job, err2 := url.PathUnescape(rawJob)
	if err1 != nil || err2 != nil {
		return "", "", false
	}
	return ns, job, true
}

func (u *uiHandler) notFound(w http.ResponseWriter, msg string) {
	u.render(w, http.StatusNotFound, "notfound.html", struct{ Message string }{msg})
}

func (u *uiHandler) render(w http.ResponseWriter, code int, name string, data any) {
	var buf bytes.Buffer
	if err := uiTemplates.ExecuteTemplate(&buf, name, data); err != nil {
		u.log.Error("rendering page", "page", name, "error", err)
		http.Error(w, "rendering page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// nomadQueueURL is Nomad's jobs list filtered on the parking pool: the
// queued jobs as Nomad shows them ("" without Nomad's address).
func nomadQueueURL(base, pool string) string {
	if base == "" {
		return ""
	}
	return base + "/ui/jobs?filter=" + url.QueryEscape(fmt.Sprintf("NodePool == %q", pool))
}

// plannedStart says, for the job page's headline, when a job is expected
// to start, or why that is not known.
func plannedStart(e agentapi.Explanation) string {
	switch e.State {
	case agentapi.StateInvalid:
		return "Never, as written: see why below, fix the job and submit it again."
	case agentapi.StateRunning, agentapi.StateAdmitting:
		return ""
	}
	if ex := e.Engine; ex != nil {
		switch ex.Status {
		case engine.StatusAdmitted:
			return "Now: admitted, waiting for Nomad to start it."
		case engine.StatusPreempting:
			return "As soon as the gangs stopping for it have stopped (their checkpoint grace)."
		}
		preempts := ""
		if ex.ReservedPreempts {
			preempts = " or may be preempted by it"
		}
		if !ex.ReservedUntil.IsZero() && ex.ReservedUntilEstimated {
			return fmt.Sprintf("By about %s: GPUs are reserved for it, and the running jobs holding them are expected to end%s by then (estimated: some give no impact_walltime, and finished jobs like them ran that long).",
				ex.ReservedUntil.UTC().Format(time.RFC3339), preempts)
		}
		if !ex.ReservedUntil.IsZero() {
			return fmt.Sprintf("By %s: GPUs are reserved for it, and the running jobs holding them end (their impact_walltime, less any impact_progress)%s by then.",
				ex.ReservedUntil.UTC().Format(time.RFC3339), preempts)
		}
		if ex.Gathered > 0 {
			return fmt.Sprintf("Once the rest of its allocations fit: it holds the GPUs of %d of them, gathered as they freed (as Nomad places a job's allocations one by one).", ex.Gathered)
		}
		if ex.Status == engine.StatusReserved {
			return "Unknown: GPUs are reserved for it, but the running jobs holding them give no impact_walltime."
		}
		if ex.CouldPreempt != "" {
			return fmt.Sprintf("From %s, when it may preempt %s (its minimum runtime).",
				ex.CouldPreemptFrom.UTC().Format(time.RFC3339), ex.CouldPreempt)
		}
	}
	return "Unknown: it waits for its turn or for GPUs to free, and running work gives no end time (see why below)."
}
