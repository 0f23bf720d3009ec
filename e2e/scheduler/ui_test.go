package scheduler

import (
	"encoding/json"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestOperatorUI drives a real browser (headless Chromium) over Nomad's
// own web UI and the impact agent's pages, with a job queued behind a
// running one, and checks what an operator sees: the queued job's page in
// Nomad links the agent's page of the job (one click), which says queued,
// its place and why, in the words `impact explain` uses. It records what
// Nomad's UI calls the queued job (the parking pool makes it "Failed":
// see the DESIGN notes in scheduler/nomad/doc.go). Screenshots of each
// page go to the test's artifact directory (go test -artifacts
// -outputdir DIR keeps them).
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

	// One island of 4 GPUs is held outside the scheduler; a high-tier job
	// takes the other; a 2 x 4 GPU gang of a lower tier then waits, and a
	// job with a misspelt tier is invalid.
	if out, err := e.nomad("node", "pool", "apply", writeFile(t, e.dir, "pool.hcl", `node_pool "impact-queue" {
  description = "impact scheduler parking pool"
}`)); err != nil {
		t.Fatalf("creating parking pool: %v\n%s", err, out)
	}
	e.run(job{name: "blocker", pool: "default", count: 1, gpus: 4, seconds: 900, marker: filepath.Join(e.dir, "blocker.mark")})
	e.waitRunning(t, "blocker", 60*time.Second)
	e.startImpact(t)
	e.run(job{name: "resident", pool: "impact-queue", tier: "high", count: 1, gpus: 4, seconds: 900, marker: filepath.Join(e.dir, "resident.mark")})
	e.waitRunning(t, "resident", 60*time.Second)

	page := e.apiURL + "/ui/job/default/pretrain"
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

	type explanation struct {
		State    string
		Position int
		Summary  string
		Reason   string
		Score    float64
	}
	var ex explanation
	eventually(t, 60*time.Second, "pretrain explained as waiting", func() (bool, string) {
		raw, err := exec.Command(e.impact, "explain", "-json", "-address", e.apiURL, "pretrain").CombinedOutput()
		if err != nil {
			return false, string(raw)
		}
		ex = explanation{}
		if err := json.Unmarshal(raw, &ex); err != nil {
			return false, string(raw)
		}
		return ex.State == "waiting" && ex.Position == 1 && ex.Summary != "", string(raw)
	})
	t.Logf("impact explain pretrain: state %s, position %d, summary %q", ex.State, ex.Position, ex.Summary)

	// Nomad's job list and the job's page in Nomad's UI.
	b := startBrowser(t, chrome, out)
	list := b.visit(e.a.Addr+"/ui/jobs", "1-nomad-jobs-list", "pretrain")
	status := jobRowStatus(list, "pretrain")
	t.Logf("Nomad's jobs list shows pretrain as %q", status)
	jobPage := b.visit(e.a.Addr+"/ui/jobs/pretrain@default", "2-nomad-job-pretrain", "Queue position and why (impact)")
	if !strings.Contains(html.UnescapeString(jobPage), "Queued by the impact scheduler") {
		t.Errorf("Nomad's job page does not show the job's ui description")
	}

	// One click from the job's page in Nomad: the impact agent's page of
	// the job.
	href := b.click("Queue position and why (impact)")
	if href != page {
		t.Fatalf("Nomad's job page does not link the impact page: clicked %q, want %q", href, page)
	}
	agentPage := html.UnescapeString(b.await("3-impact-job-pretrain", `data-test="summary"`))
	for what, want := range map[string]string{
		"state":    `data-test="state">waiting<`,
		"summary":  `data-test="summary">` + ex.Summary + `<`,
		"position": `data-test="position">1st of `,
		"score":    fmt.Sprintf(`data-test="score">%.2f<`, ex.Score),
	} {
		if !strings.Contains(agentPage, want) {
			t.Errorf("impact page of pretrain: %s is not as impact explain says (want %q)", what, want)
		}
	}
	// Every clause of the reason is on the page (one per line, a
	// parenthesised list kept whole).
	text := strings.Join(strings.Fields(regexp.MustCompile(`<[^>]+>`).ReplaceAllString(agentPage, " ")), " ")
	for _, clause := range strings.Split(ex.Reason, "; ") {
		if !strings.Contains(text, strings.TrimSpace(clause)) {
			t.Errorf("impact page of pretrain lacks the reason clause %q", clause)
		}
	}
	queue := html.UnescapeString(b.visit(e.apiURL+"/ui/", "4-impact-queue", `data-test="queue"`))
	for _, id := range []string{"pretrain", "resident", "typo"} {
		if !strings.Contains(queue, `data-test-job="default/`+id+`"`) {
			t.Errorf("impact queue page lacks %s", id)
		}
	}
	typo := html.UnescapeString(b.visit(e.apiURL+"/ui/job/default/typo", "5-impact-job-typo", `data-test="errors"`))
	if !strings.Contains(typo, `data-test="state">invalid<`) || !strings.Contains(typo, "urgnet") {
		t.Errorf("impact page of typo does not say invalid and why")
	}

	// The Variable says the same, in the same words.
	var v struct{ Items map[string]string }
	if err := e.a.Get("/v1/var/nomad/jobs/pretrain/impact", &v); err != nil {
		t.Fatalf("the Variable of pretrain: %v", err)
	}
	if v.Items["state"] != "waiting" || v.Items["summary"] != ex.Summary || v.Items["page"] != page || v.Items["position"] != "1" {
		t.Errorf("variable of pretrain = %v, want state waiting, position 1, the explain summary and the page", v.Items)
	}
	findings := fmt.Sprintf("nomad jobs list status of the queued job: %s\nnomad job page links: %s\nimpact explain: state=%s position=%d summary=%q\n",
		status, href, ex.State, ex.Position, ex.Summary)
	if err := os.WriteFile(filepath.Join(out, "findings.txt"), []byte(findings), 0o644); err != nil {
		t.Error(err)
	}
	t.Logf("screenshots and findings in %s", out)
}

// jobRowStatus finds the status label of a job's row in the DOM of
// Nomad's jobs list ("" when not found).
func jobRowStatus(dom, job string) string {
	i := strings.Index(dom, ">"+job+"<")
	if i < 0 {
		i = strings.Index(dom, job)
	}
	if i < 0 {
		return ""
	}
	row := dom[i:]
	if end := strings.Index(row, "</tr>"); end > 0 {
		row = row[:end]
	}
	for _, label := range []string{"Failed", "Degraded", "Recovering", "Healthy", "Running", "Complete", "Scaled Down", "Stopped", "Deploying", "Pending", "Queued"} {
		if strings.Contains(row, ">"+label+"<") || strings.Contains(row, "> "+label+" <") || regexp.MustCompile(`>\s*`+label+`\s*<`).MatchString(row) {
			return label
		}
	}
	return "(unrecognised)"
}
