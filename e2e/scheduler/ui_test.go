package scheduler

import (
	"encoding/json"
	"fmt"
	"html"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestOperatorUI drives a real browser (headless Chromium) over Nomad's
// own web UI and the impact agent's pages and checks what an operator
// reads there, for each kind of job:
//
//   - queued: a 2 x 4 GPU gang waiting behind a running job. Its page in
//     Nomad shows the jobspec's ui description and links the agent's page
//     of the job (one click), which says waiting, its place, its planned
//     start and why, in the words `impact explain` uses.
//   - invalid: a job with a misspelt tier. The agent's page says invalid,
//     what is wrong and that it never starts as written, with no place in
//     the queue and no score table; Nomad's page of it is recorded (the
//     agent does not re-register it, so it has no status description).
//   - preempted: a running normal job preempted by a critical one. Its
//     page in Nomad says, in the description the scheduler wrote when it
//     parked it again, that it is back in the queue, not complete, and
//     for whom, whatever badge Nomad draws (recorded: Nomad's UI may call
//     it Complete); the agent's page says waiting, preempted by, planned
//     start.
//   - running: the critical job. Its description says admitted, on how
//     many nodes and GPUs; the agent's page says running, where.
//
// The agent's pages link Nomad's jobs list filtered on the parking pool;
// following that link shows the queued jobs and only them, before and
// after the preemption. Nomad's status labels of every job (jobs list and
// job page) go to findings.txt. Screenshots and the DOM of each page go
// to the test's artifact directory (go test -artifacts -outputdir DIR
// keeps them).
//
// Skipped without a `chromium` (IMPACT_E2E_CHROMIUM names another) or
// without a nomad built with its UI (`go build -tags ui`).
func TestOperatorUI(t *testing.T) {
	chrome := os.Getenv("IMPACT_E2E_CHROMIUM")
	if chrome == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				chrome = p
				break
			}
		}
	}
	if chrome == "" {
		t.Skip("no chromium on PATH (apt-get install chromium), nor IMPACT_E2E_CHROMIUM")
	}
	e := setup(t, false)
	var index string
	if err := e.a.Get("/ui/", &index); err != nil || strings.Contains(index, "Nomad UI is not available in this binary") {
		t.Skipf("this nomad has no web UI (build it with -tags ui): %v", err)
	}
	out := t.ArtifactDir()
	var findings strings.Builder
	note := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		t.Log(line)
		findings.WriteString(line + "\n")
	}
	defer func() {
		if err := os.WriteFile(filepath.Join(out, "findings.txt"), []byte(findings.String()), 0o644); err != nil {
			t.Error(err)
		}
		t.Logf("screenshots and findings in %s", out)
	}()

	// One island of 4 GPUs is held outside the scheduler; a normal job
	// takes the other; a 2 x 4 GPU gang of the same tier then waits, and a
	// job with a misspelt tier is invalid.
	if out, err := e.nomad("node", "pool", "apply", writeFile(t, e.dir, "pool.hcl", `node_pool "impact-queue" {
  description = "impact scheduler parking pool"
}`)); err != nil {
		t.Fatalf("creating parking pool: %v\n%s", err, out)
	}
	e.run(job{name: "blocker", pool: "default", count: 1, gpus: 4, seconds: 900, marker: filepath.Join(e.dir, "blocker.mark")})
	e.waitRunning(t, "blocker", 60*time.Second)
	e.startImpact(t)
	e.run(job{name: "resident", pool: "impact-queue", tier: "normal", count: 1, gpus: 4, seconds: 900, marker: filepath.Join(e.dir, "resident.mark")})
	e.waitRunning(t, "resident", 60*time.Second)

	pageOf := func(id string) string { return e.apiURL + "/ui/job/default/" + id }
	page := pageOf("pretrain")
	pretrain := job{name: "pretrain", pool: "impact-queue", tier: "normal", count: 2, gpus: 4, seconds: 900, marker: filepath.Join(e.dir, "pretrain.mark")}.hcl()
	// The jobspec's ui block, as example/README.md documents it.
	pretrain = strings.Replace(pretrain, "  group \"g\" {", fmt.Sprintf(`  ui {
    description = "Queued by the impact scheduler until its whole gang fits: it holds no GPUs while it waits. Nomad shows it as not placed; its place in the queue and why are on the impact page."
    link {
      label = "Queue position and why (impact)"
      url   = %q
    }
  }
  group "g" {`, page), 1)
	path := writeFile(t, e.dir, "pretrain.nomad.hcl", pretrain)
	if out, err := e.nomad("job", "run", "-detach", path); err != nil {
		t.Fatalf("nomad job run pretrain: %v\n%s", err, out)
	}
	e.run(job{name: "typo", pool: "impact-queue", tier: "urgnet", count: 1, gpus: 1, seconds: 60, marker: filepath.Join(e.dir, "typo.mark")})

	ex := e.explainUntil(t, "pretrain", "waiting first in line", func(ex uiExplanation) bool {
		return ex.State == "waiting" && ex.Position == 1 && ex.Summary != ""
	})
	note("impact explain pretrain: state %s, position %d, summary %q", ex.State, ex.Position, ex.Summary)
	e.explainUntil(t, "typo", "invalid", func(ex uiExplanation) bool { return ex.State == "invalid" })
	queueLink := e.a.Addr + "/ui/jobs?filter=" + url.QueryEscape(`NodePool == "impact-queue"`)

	// Nomad's jobs list and the queued job's page in Nomad's UI.
	b := startBrowser(t, chrome, out)
	b.navigate(e.a.Addr + "/ui/jobs")
	rows := b.awaitJobRows("01-nomad-jobs-list", "blocker", "resident", "pretrain", "typo")
	note("Nomad's jobs list, one job queued (pretrain), one running (resident), one invalid (typo): %s", rowsString(rows))
	b.visit(e.a.Addr+"/ui/jobs/pretrain@default", "02-nomad-job-pretrain-queued", "Queue position and why (impact)")
	if d := b.text(nomadDescription); !strings.Contains(d, "Queued by the impact scheduler") {
		t.Errorf("Nomad's page of the queued job does not show its ui description; it shows %q", d)
	}
	note("Nomad's page of the queued job pretrain: status panel %q", b.text(nomadStatusPanel))

	// One click from the job's page in Nomad: the impact agent's page of
	// the job.
	href := b.click("Queue position and why (impact)")
	if href != page {
		t.Fatalf("Nomad's job page does not link the impact page: clicked %q, want %q", href, page)
	}
	agentPage := html.UnescapeString(b.await("03-impact-job-pretrain-queued", `data-test="summary"`))
	for what, want := range map[string]string{
		"state":    `data-test="state">waiting<`,
		"summary":  `data-test="summary">` + ex.Summary + `<`,
		"position": `data-test="position">1st of `,
		"score":    fmt.Sprintf(`data-test="score">%.2f<`, ex.Score),
		"planned":  `data-test="planned">Planned start: `,
		"link":     `data-test="nomad-queue"`,
	} {
		if !strings.Contains(agentPage, want) {
			t.Errorf("impact page of pretrain: %s is not as impact explain says (want %q)", what, want)
		}
	}
	// Every clause of the reason is on the page (one per line, a
	// parenthesised list kept whole).
	text := visibleText(agentPage)
	for _, clause := range strings.Split(ex.Reason, "; ") {
		if !strings.Contains(text, strings.TrimSpace(clause)) {
			t.Errorf("impact page of pretrain lacks the reason clause %q", clause)
		}
	}
	note("impact page of the queued job pretrain: %q; %q; place %q", b.text(`[data-test="summary"]`), b.text(`[data-test="planned"]`), b.text(`[data-test="position"]`))
	// The Variable says the same, in the same words.
	var v struct{ Items map[string]string }
	if err := e.a.Get("/v1/var/nomad/jobs/pretrain/impact", &v); err != nil {
		t.Fatalf("the Variable of pretrain: %v", err)
	}
	if v.Items["state"] != "waiting" || v.Items["summary"] != ex.Summary || v.Items["page"] != page || v.Items["position"] != "1" {
		t.Errorf("variable of pretrain = %v, want state waiting, position 1, the explain summary and the page", v.Items)
	}
	queue := html.UnescapeString(b.visit(e.apiURL+"/ui/", "04-impact-queue", `data-test="queue"`))
	for _, id := range []string{"pretrain", "resident", "typo"} {
		if !strings.Contains(queue, `data-test-job="default/`+id+`"`) {
			t.Errorf("impact queue page lacks %s", id)
		}
	}
	if got := b.attr(`[data-test="nomad-queue"]`, "href"); got != queueLink {
		t.Errorf("impact queue page links Nomad's queued jobs as %q, want %q", got, queueLink)
	}

	// The invalid job: the agent's page says what is wrong and when it
	// starts (never, as written), with no place and no score.
	typo := html.UnescapeString(b.visit(pageOf("typo"), "05-impact-job-typo-invalid", `data-test="errors"`))
	if !strings.Contains(typo, `data-test="state">invalid<`) || !strings.Contains(b.text(`[data-test="errors"]`), "urgnet") {
		t.Errorf("impact page of typo does not say invalid and why: errors %q", b.text(`[data-test="errors"]`))
	}
	if p := b.text(`[data-test="planned"]`); !strings.HasPrefix(p, "Planned start: Never") {
		t.Errorf("impact page of typo: planned start %q, want never as written", p)
	}
	for _, absent := range []string{`data-test="position"`, `data-test="score"`, `data-test="terms"`, "Place in the queue", "Impact score"} {
		if strings.Contains(typo, absent) {
			t.Errorf("impact page of the invalid job typo shows %s (it has no place in the queue and no score)", absent)
		}
	}
	note("impact page of the invalid job typo: %q; %q; errors %q", b.text(`[data-test="summary"]`), b.text(`[data-test="planned"]`), b.text(`[data-test="errors"]`))
	if got := b.attr(`[data-test="nomad-queue"]`, "href"); got != queueLink {
		t.Errorf("impact page of typo links Nomad's queued jobs as %q, want %q", got, queueLink)
	}
	// The agent's link to Nomad's queued jobs: Nomad's jobs list filtered
	// on the parking pool, the queued jobs and only them.
	if got := b.follow("The queued jobs in Nomad's UI"); got != queueLink {
		t.Errorf("the agent's link to Nomad's queued jobs is %q, want %q", got, queueLink)
	}
	rows = b.awaitJobRows("06-nomad-jobs-parking-pool", "pretrain", "typo")
	if _, ok := rows["blocker"]; ok {
		t.Errorf("Nomad's jobs list filtered on the parking pool shows blocker (default pool): %s", rowsString(rows))
	}
	if _, ok := rows["resident"]; ok {
		t.Errorf("Nomad's jobs list filtered on the parking pool shows resident, which runs: %s", rowsString(rows))
	}
	note("Nomad's jobs list filtered on the parking pool (the agent's link): %s", rowsString(rows))

	// Nomad's page of the invalid job: the agent never re-registers it, so
	// no status of the scheduler's is in its description.
	b.visit(e.a.Addr+"/ui/jobs/typo@default", "07-nomad-job-typo-invalid", "job-status-panel")
	if d := b.text(nomadDescription); strings.Contains(d, "impact scheduler:") {
		t.Errorf("Nomad's page of the invalid job has a scheduler's description %q: the agent re-registered it", d)
	}
	note("Nomad's page of the invalid job typo: description %q, status panel %q, meta shown: %v",
		b.text(nomadDescription), b.text(nomadStatusPanel), strings.Contains(b.text("body"), "urgnet"))

	// A critical job preempts resident: resident is back in the queue,
	// incident runs.
	e.run(job{name: "incident", pool: "impact-queue", tier: "critical", count: 1, gpus: 4, seconds: 900, marker: filepath.Join(e.dir, "incident.mark")})
	e.waitRunning(t, "incident", 90*time.Second)
	pre := e.explainUntil(t, "resident", "waiting, preempted by incident", func(ex uiExplanation) bool {
		return ex.State == "waiting" && ex.PreemptedBy == "default/incident"
	})
	var desc string
	eventually(t, 30*time.Second, "resident's description says back in the queue", func() (bool, string) {
		var j struct{ UI *struct{ Description string } }
		if err := e.a.Get("/v1/job/resident", &j); err != nil || j.UI == nil {
			return false, fmt.Sprintf("%+v %v", j, err)
		}
		desc = j.UI.Description
		return strings.Contains(desc, "back in the queue"), desc
	})
	note("Nomad API, resident's ui.description after the preemption: %q", desc)

	b.navigate(e.a.Addr + "/ui/jobs")
	rows = b.awaitJobRows("08-nomad-jobs-list-after-preemption", "blocker", "resident", "pretrain", "typo", "incident")
	note("Nomad's jobs list after the preemption (resident preempted and queued, incident running): %s", rowsString(rows))
	if strings.Contains(b.text("body"), "back in the queue") {
		note("Nomad's jobs list shows the descriptions")
	} else {
		note("Nomad's jobs list shows no descriptions: an operator sees the badge only, and the job's page says what it is")
	}
	b.visit(e.a.Addr+"/ui/jobs/resident@default", "09-nomad-job-resident-preempted", "back in the queue (not complete)")
	d := b.text(nomadDescription)
	for _, want := range []string{"impact scheduler: back in the queue (not complete): preempted for default/incident", "It holds no GPUs while it waits", "Its page on the impact scheduler"} {
		if !strings.Contains(d, want) {
			t.Errorf("Nomad's page of the preempted job: description %q lacks %q", d, want)
		}
	}
	if got := b.attr(nomadDescription+" a", "href"); got != pageOf("resident") {
		t.Errorf("Nomad's page of the preempted job: the description links %q, want the agent's page %q", got, pageOf("resident"))
	}
	note("Nomad's page of the preempted job resident: description %q; status panel %q", d, b.text(nomadStatusPanel))
	b.visit(pageOf("resident"), "10-impact-job-resident-preempted", `data-test="preempted-by"`)
	if got := b.text(`[data-test="state"]`); got != "waiting" {
		t.Errorf("impact page of the preempted job: state %q, want waiting", got)
	}
	if got := b.text(`[data-test="preempted-by"]`); got != "default/incident" {
		t.Errorf("impact page of the preempted job: preempted by %q, want default/incident", got)
	}
	if p := b.text(`[data-test="planned"]`); !strings.HasPrefix(p, "Planned start: ") {
		t.Errorf("impact page of the preempted job: no planned start (%q)", p)
	}
	if p := b.text(`[data-test="position"]`); !strings.Contains(p, fmt.Sprintf("%s of ", ordinalEN(pre.Position))) {
		t.Errorf("impact page of the preempted job: place %q, want position %d as impact explain says", p, pre.Position)
	}
	note("impact page of the preempted job resident: %q; %q; place %q; preempted by %q", b.text(`[data-test="summary"]`),
		b.text(`[data-test="planned"]`), b.text(`[data-test="position"]`), b.text(`[data-test="preempted-by"]`))
	if h := b.text(`[data-test="history"]`); !strings.Contains(h, "incident") {
		t.Errorf("impact page of the preempted job: history %q does not say it was preempted by incident", h)
	}

	// The running job.
	b.visit(e.a.Addr+"/ui/jobs/incident@default", "11-nomad-job-incident-running", "impact scheduler:")
	d = b.text(nomadDescription)
	if !strings.Contains(d, "impact scheduler: admitted: started whole on 1 node(s) with 4 GPU(s)") {
		t.Errorf("Nomad's page of the running job: description %q does not say admitted, on 1 node with 4 GPUs", d)
	}
	note("Nomad's page of the running job incident: description %q; status panel %q", d, b.text(nomadStatusPanel))
	run := html.UnescapeString(b.visit(pageOf("incident"), "12-impact-job-incident-running", `data-test="state"`))
	if got := b.text(`[data-test="state"]`); got != "running" {
		t.Errorf("impact page of the running job: state %q, want running", got)
	}
	if !strings.Contains(run, `data-test="placement"`) {
		t.Errorf("impact page of the running job shows no placement")
	}
	if strings.Contains(run, `data-test="planned"`) {
		t.Errorf("impact page of the running job shows a planned start %q", b.text(`[data-test="planned"]`))
	}
	note("impact page of the running job incident: %q; placement %q", b.text(`[data-test="summary"]`), b.text(`[data-test="placement"]`))

	// The queued jobs in Nomad, after the preemption, from the agent's
	// queue page: the preempted job is among them, the running ones not.
	b.visit(e.apiURL+"/ui/", "13-impact-queue-after-preemption", `data-test-job="default/resident"`)
	b.follow("its jobs list filtered on the parking pool")
	rows = b.awaitJobRows("14-nomad-jobs-parking-pool-after-preemption", "pretrain", "typo", "resident")
	for _, running := range []string{"blocker", "incident"} {
		if _, ok := rows[running]; ok {
			t.Errorf("Nomad's jobs list filtered on the parking pool shows %s, which runs: %s", running, rowsString(rows))
		}
	}
	note("Nomad's jobs list filtered on the parking pool after the preemption: %s", rowsString(rows))
}

// Nomad's UI, as its production build renders it (without the
// data-test-* attributes of its own tests): the job page's ui description
// and status panel.
const (
	nomadDescription = ".job-page-header .hds-page-header__description"
	nomadStatusPanel = ".job-status-panel"
)

// uiExplanation is what TestOperatorUI reads of `impact explain -json`.
type uiExplanation struct {
	State       string
	Position    int
	Summary     string
	Reason      string
	Score       float64
	PreemptedBy string `json:"preempted_by"`
}

// explainUntil polls `impact explain -json <id>` until ok.
func (e *env) explainUntil(t *testing.T, id, what string, ok func(uiExplanation) bool) uiExplanation {
	t.Helper()
	var ex uiExplanation
	eventually(t, 90*time.Second, id+" explained as "+what, func() (bool, string) {
		raw, err := exec.Command(e.impact, "explain", "-json", "-address", e.apiURL, id).CombinedOutput()
		if err != nil {
			return false, string(raw)
		}
		ex = uiExplanation{}
		if err := json.Unmarshal(raw, &ex); err != nil {
			return false, string(raw)
		}
		return ok(ex), string(raw)
	})
	return ex
}

// awaitJobRows waits until Nomad's jobs list in the tab shows a row for
// each of the jobs, each with a status label, saves the page as name, and
// returns every row's job and label.
func (b *browser) awaitJobRows(name string, jobs ...string) map[string]string {
	b.t.Helper()
	var rows map[string]string
	read := func() {
		rows = map[string]string{}
		_ = b.eval(`Object.fromEntries([...document.querySelectorAll("tr.job-row")].map(r => [(r.querySelector("td a") || r.querySelector("td") || {innerText: ""}).innerText.trim().split(/\s/)[0], ((r.querySelector(".status-cell") || {}).innerText || "").trim()]))`, &rows)
	}
	b.awaitDOM(name, fmt.Sprintf("rows with a status for %v", jobs), func(string) bool {
		read()
		for _, j := range jobs {
			if rows[j] == "" {
				return false
			}
		}
		return true
	})
	read()
	return rows
}

// attr is the attribute of the first element matching the CSS selector,
// as the browser resolves it for href ("" when there is none).
func (b *browser) attr(selector, name string) string {
	b.t.Helper()
	sj, _ := json.Marshal(selector)
	nj, _ := json.Marshal(name)
	var s string
	expr := fmt.Sprintf(`(() => { const e = document.querySelector(%s); if (!e) return ""; return %s === "href" ? e.href : (e.getAttribute(%s) || ""); })()`, sj, nj, nj)
	if err := b.eval(expr, &s); err != nil {
		b.t.Fatal(err)
	}
	return s
}

// rowsString lists a jobs list's rows, sorted: "job: label, ...".
func rowsString(rows map[string]string) string {
	var parts []string
	for j, l := range rows {
		parts = append(parts, fmt.Sprintf("%s: %s", j, strings.Join(strings.Fields(l), " ")))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// visibleText is a page's text without its tags, blanks collapsed.
func visibleText(dom string) string {
	return strings.Join(strings.Fields(regexp.MustCompile(`<[^>]+>`).ReplaceAllString(dom, " ")), " ")
}

// ordinalEN writes 1 as "1st", 2 as "2nd", as the agent's pages do.
func ordinalEN(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("%d%s", n, suffix)
}
