package cli

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
)

// walkthrough is example/README.md, the operator walkthrough.
func walkthrough(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../example/README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The walkthrough's sample `impact queue` tables are what printQueue
// prints for those queues, every column included (issue 36: they lacked
// UTIL and IDLE).
func TestWalkthroughQueueSamples(t *testing.T) {
	at := time.Date(2026, 12, 4, 16, 16, 15, 0, time.UTC)
	zero := 0.0
	running := "Running: all 2 allocation(s) admitted and started."
	llm := agentapi.Entry{Namespace: "default", Job: "llm-pretrain", State: agentapi.StateRunning, Tier: "high", Project: "olmo",
		GPUs: 8, Allocations: 2, Score: 1583.89, Summary: running, WalltimeSeconds: 6 * 3600}
	llmIdle := func(idle float64) agentapi.Entry { e := llm; e.Utilization, e.IdleSeconds = &zero, idle; return e }
	sweep := agentapi.Entry{Namespace: "default", Job: "sweep", State: agentapi.StateRunning, Tier: "scavenger", Project: "default",
		GPUs: 8, Allocations: 2, Score: 22.5, Summary: running}
	samples := []agentapi.Queue{
		{GeneratedAt: at, Leader: true,
			Cluster: agentapi.ClusterSummary{HealthyGPUs: 16, AllocatedGPUs: 8},
			Jobs:    []agentapi.Entry{llm}},
		{GeneratedAt: at.Add(25 * time.Second), Leader: true,
			Cluster: agentapi.ClusterSummary{HealthyGPUs: 16, AllocatedGPUs: 16, WaitingJobs: 1, WaitingGPUs: 4},
			Jobs: []agentapi.Entry{
				{Namespace: "default", Job: "urgent", Position: 1, State: agentapi.StateWaiting, Tier: "critical", Project: "default",
					GPUs: 4, Allocations: 1, Score: 10009.23, Summary: "Waiting for 4 free GPUs (first in line)."},
				llmIdle(15), sweep}},
		{GeneratedAt: at.Add(104 * time.Second), Leader: true,
			Cluster: agentapi.ClusterSummary{HealthyGPUs: 16, AllocatedGPUs: 12, WaitingJobs: 1, WaitingGPUs: 8},
			Jobs: []agentapi.Entry{
				{Namespace: "default", Job: "sweep", Position: 1, State: agentapi.StateWaiting, Tier: "scavenger", Project: "default",
					GPUs: 8, Allocations: 2, Score: 1.45, WaitSeconds: 2, Summary: "Waiting for 8 free GPUs (first in line)."},
				llmIdle(90),
				{Namespace: "default", Job: "urgent", State: agentapi.StateRunning, Tier: "critical", Project: "default",
					GPUs: 4, Allocations: 1, Score: 9991.41, Summary: "Running: all 1 allocation(s) admitted and started."}}},
	}
	doc := walkthrough(t)
	for i, q := range samples {
		var b bytes.Buffer
		printQueue(&b, q)
		if !strings.Contains(doc, b.String()) {
			t.Errorf("example/README.md lacks sample %d as impact queue prints it:\n%s", i+1, b.String())
		}
	}
	// Every table in it has the columns impact queue prints.
	var b bytes.Buffer
	printQueue(&b, samples[0])
	want := strings.Fields(strings.Split(b.String(), "\n")[2])
	for _, h := range regexp.MustCompile(`(?m)^POS .*$`).FindAllString(doc, -1) {
		if got := strings.Fields(h); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("example/README.md has a queue table with columns %v, impact queue prints %v", got, want)
		}
	}
}

// The walkthrough quotes `impact agent -check`'s origin of http.listen:
// the line example/impact.hcl sets it on (issue 36: it said 66, -check
// says 68).
func TestWalkthroughCheckLine(t *testing.T) {
	code, out, errs := runAgentCmd(t, nil, "-config", "../../example/impact.hcl", "-check")
	if code != 0 {
		t.Fatalf("-check: exit %d: %s", code, errs)
	}
	got := regexp.MustCompile(`(?m)^  http\.listen +\S+ +\(\.\./\.\./example/impact\.hcl:(\d+)\)$`).FindStringSubmatch(out)
	if got == nil {
		t.Fatalf("-check prints no http.listen from example/impact.hcl:\n%s", out)
	}
	doc := regexp.MustCompile("`http\\.listen +127\\.0\\.0\\.1:4680 +\\(example/impact\\.hcl:(\\d+)\\)`").FindStringSubmatch(walkthrough(t))
	if doc == nil || doc[1] != got[1] {
		t.Fatalf("example/README.md quotes %v, -check says line %s", doc, got[1])
	}
}

// No comment or document points at a design document or a protocol
// reference this repository does not hold (issue 36: the example job's
// "see DESIGN" document, the driver's protocol-reference sections).
func TestDocsPointIntoTheTree(t *testing.T) {
	dangling := []string{"DESIGN" + ".md", "protocol " + "ref", "(ref " + "1"}
	root := "../.."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "out", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".sh", ".proto", ".hcl":
		default:
			if d.Name() != "GNUmakefile" {
				return nil
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, s := range dangling {
			if i := bytes.Index(b, []byte(s)); i >= 0 {
				t.Errorf("%s:%d names %q, which is not in the tree", path, 1+bytes.Count(b[:i], []byte("\n")), s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
