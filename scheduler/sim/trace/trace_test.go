package trace

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestReadPhilly(t *testing.T) {
	src := "timestamp,duration,num_gpus,gpu_time,cluster\n" +
		"2017-10-09 07:01:55,66.0,1,66.0,11cb48\n" +
		"2017-10-09 06:13:03,2951.5,16,47224.0,6214e9\n" +
		"\n"
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write([]byte(src))
	w.Close()
	for name, in := range map[string][]byte{"plain": []byte(src), "gzip": gz.Bytes()} {
		t.Run(name, func(t *testing.T) {
			tr, err := Read(bytes.NewReader(in), "p.csv", FormatPhilly, ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(tr.Jobs) != 2 {
				t.Fatalf("got %d jobs, want 2", len(tr.Jobs))
			}
			// Sorted by submit: line 3 (06:13:03) comes first.
			j := tr.Jobs[0]
			if j.ID != "philly-3" || j.Duration != 2952 || j.GPUs != 16 || j.Project != "6214e9" || j.Line != 3 {
				t.Fatalf("first job = %+v", j)
			}
			if tr.Jobs[1].Submit-j.Submit != 48*60+52 {
				t.Fatalf("submit gap = %d", tr.Jobs[1].Submit-j.Submit)
			}
		})
	}
}

func TestReadWindow(t *testing.T) {
	src := "timestamp,duration,num_gpus,gpu_time,cluster\n" +
		"2017-10-01 23:59:59,1,1,1,a\n" +
		"2017-10-02 00:00:00,1,1,1,a\n" +
		"2017-10-22 23:59:59,1,1,1,a\n" +
		"2017-10-23 00:00:00,1,1,1,a\n"
	from, _ := ParseTimeBound(FormatPhilly, "2017-10-02", false)
	to, _ := ParseTimeBound(FormatPhilly, "2017-10-22", true)
	tr, err := Read(strings.NewReader(src), "w.csv", FormatPhilly, ReadOptions{From: &from, To: &to})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Jobs) != 2 || tr.Filtered != 2 || tr.Jobs[0].Line != 3 || tr.Jobs[1].Line != 4 {
		t.Fatalf("window kept %+v, filtered %d", tr.Jobs, tr.Filtered)
	}
}

func TestReadGeneric(t *testing.T) {
	src := "id,submit_s,duration_s,gpus,project,tier,preemptible,walltime_s\n" +
		"a,0,100,8,olmo,critical,false,200\n" +
		"b,5,50,1,,,,\n"
	tr, err := Read(strings.NewReader(src), "g.csv", FormatGeneric, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := tr.Jobs[0], tr.Jobs[1]
	if a.ID != "a" || a.Tier != "critical" || a.Preemptible == nil || *a.Preemptible || a.Walltime != 200 || a.Project != "olmo" {
		t.Fatalf("a = %+v", a)
	}
	if b.Tier != "" || b.Preemptible != nil || b.Walltime != 0 || b.Project != "" {
		t.Fatalf("b = %+v", b)
	}
}

func TestReaderErrors(t *testing.T) {
	const gh = "id,submit_s,duration_s,gpus,project,tier,preemptible,walltime_s\n"
	const ph = "timestamp,duration,num_gpus,gpu_time,cluster\n"
	cases := []struct {
		name, src string
		format    Format
		want      string // substring of the error
		line      int
		column    string
		col       int // 1-based byte column; 0: the whole row; -1: not checked
	}{
		{"philly bad time", ph + "2017-10-09 07:01:55,6,1,6,a\n2017-13-09 07:01:55,6,1,6,a\n", FormatPhilly, "not a", 3, "timestamp", 1},
		{"philly zero gpus", ph + "2017-10-09 07:01:55,6,0,6,a\n", FormatPhilly, "at least 1", 2, "num_gpus", 23},
		{"philly fractional gpus", ph + "2017-10-09 07:01:55,6,1.5,6,a\n", FormatPhilly, "whole number", 2, "num_gpus", 23},
		{"philly negative duration", ph + "2017-10-09 07:01:55,-6,1,6,a\n", FormatPhilly, "negative", 2, "duration", 21},
		{"philly zero duration", ph + "2017-10-09 07:01:55,0,1,6,a\n", FormatPhilly, "greater than zero", 2, "duration", 21},
		{"philly nan gpu_time", ph + "2017-10-09 07:01:55,6,1,NaN,a\n", FormatPhilly, "not a number", 2, "gpu_time", 25},
		{"philly empty cluster", ph + "2017-10-09 07:01:55,6,1,6,\n", FormatPhilly, "empty cluster", 2, "cluster", 27},
		{"philly short row", ph + "2017-10-09 07:01:55,6,1\n", FormatPhilly, "3 fields, want 5", 2, "", 0},
		{"philly bad header", "when,duration,num_gpus,gpu_time,cluster\n", FormatPhilly, "want \"timestamp\"", 1, "", 0},
		{"generic empty id", gh + ",0,1,1,,,,\n", FormatGeneric, "empty job id", 2, "id", 1},
		{"generic duplicate id", gh + "a,0,1,1,,,,\na,1,1,1,,,,\n", FormatGeneric, "duplicate job id \"a\" (first on line 2)", 3, "id", 1},
		{"generic bad preemptible", gh + "a,0,1,1,,,maybe,\n", FormatGeneric, "not true or false", 2, "preemptible", 11},
		{"generic bad walltime", gh + "a,0,1,1,,,,soon\n", FormatGeneric, "not a number", 2, "walltime_s", 12},
		{"generic missing submit", gh + "a,,1,1,,,,\n", FormatGeneric, "empty value", 2, "submit_s", 3},
		{"generic quote", gh + "a,0,1,1,\"x,,,\n", FormatGeneric, "", 2, "", -1},
		{"generic wrong header order", "id,duration_s,submit_s,gpus,project,tier,preemptible,walltime_s\n", FormatGeneric, "column 2", 1, "", 0},
		{"empty file", "", FormatGeneric, "empty trace", 0, "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(tc.src), "bad.csv", tc.format, ReadOptions{})
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), "bad.csv") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name the file or say %q", err, tc.want)
			}
			if tc.line == 0 {
				return
			}
			var re *RowError
			if !errors.As(err, &re) {
				t.Fatalf("error %q is not a RowError", err)
			}
			if re.Line != tc.line || re.Column != tc.column {
				t.Fatalf("error %q at line %d column %q, want line %d column %q", err, re.Line, re.Column, tc.line, tc.column)
			}
			if tc.col < 0 {
				return
			}
			pos := fmt.Sprintf("bad.csv:%d:%d: ", tc.line, tc.col)
			if tc.col == 0 {
				pos = fmt.Sprintf("bad.csv:%d: ", tc.line)
			}
			if re.Col != tc.col || !strings.HasPrefix(err.Error(), pos) {
				t.Fatalf("error %q: column position %d, want it to start with %q", err, re.Col, pos)
			}
		})
	}
}

func TestSkipBadCounts(t *testing.T) {
	src := "id,submit_s,duration_s,gpus,project,tier,preemptible,walltime_s\n" +
		"a,0,10,1,,,,\n" +
		"b,x,10,1,,,,\n" +
		"c,1,10,0,,,,\n" +
		"d,2,10,2,,,,\n"
	tr, err := Read(strings.NewReader(src), "s.csv", FormatGeneric, ReadOptions{SkipBad: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Jobs) != 2 || tr.Skipped != 2 || len(tr.SkipErrors) != 2 {
		t.Fatalf("jobs %d skipped %d errors %v", len(tr.Jobs), tr.Skipped, tr.SkipErrors)
	}
	if !strings.Contains(tr.SkipErrors[0], "s.csv:3:3: column submit_s") {
		t.Fatalf("skip error %q does not name line and column", tr.SkipErrors[0])
	}
}

func TestSynthesizeDeterministic(t *testing.T) {
	mk := func() []Job {
		var js []Job
		for i := 0; i < 4000; i++ {
			js = append(js, Job{ID: "j" + string(rune('a'+i%26)) + strings.Repeat("x", i%7) + string(rune('0'+i%10)) + strings.Repeat("y", i/260), Duration: 600, GPUs: 1, Project: "p"})
		}
		return js
	}
	a, b := mk(), mk()
	if err := Synthesize(a, "t", 7); err != nil {
		t.Fatal(err)
	}
	// Labels depend on the job, not on the order of the rows.
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	if err := Synthesize(b, "t", 7); err != nil {
		t.Fatal(err)
	}
	byID := map[string]Job{}
	for _, j := range b {
		byID[j.ID] = j
	}
	counts := map[string]int{}
	for _, j := range a {
		o := byID[j.ID]
		if j.Tier != o.Tier || *j.Preemptible != *o.Preemptible || j.Walltime != o.Walltime {
			t.Fatalf("job %s labelled differently: %+v vs %+v", j.ID, j, o)
		}
		if j.Walltime < j.Duration || j.Walltime > 3*j.Duration+60 || j.Walltime%60 != 0 {
			t.Fatalf("walltime %d outside the rule for duration %d", j.Walltime, j.Duration)
		}
		if *j.Preemptible != TierPreemptible[tierIndex(j.Tier)] {
			t.Fatalf("preemptible %v for tier %s", *j.Preemptible, j.Tier)
		}
		counts[j.Tier]++
	}
	for i, tier := range Tiers {
		got := float64(counts[tier]) / float64(len(a))
		if got < TierShares[i]-0.03 || got > TierShares[i]+0.03 {
			t.Errorf("tier %s share %.3f, want about %.2f", tier, got, TierShares[i])
		}
	}
	c := mk()
	if err := Synthesize(c, "t", 8); err != nil {
		t.Fatal(err)
	}
	same := 0
	for i := range a {
		if a[i].Tier == c[i].Tier {
			same++
		}
	}
	if same == len(a) {
		t.Fatal("another seed gives the same tiers")
	}
}

func TestSynthesizeKeepsGivenLabelsAndRejectsUnknownTier(t *testing.T) {
	f := false
	js := []Job{{ID: "a", Duration: 10, GPUs: 1, Tier: "scavenger", Preemptible: &f, Walltime: 11, Project: "x"}}
	if err := Synthesize(js, "g.csv", 1); err != nil {
		t.Fatal(err)
	}
	if js[0].Tier != "scavenger" || *js[0].Preemptible || js[0].Walltime != 11 || js[0].Project != "x" {
		t.Fatalf("given labels changed: %+v", js[0])
	}
	// Jobs not read from a file: the error names the line.
	bad := []Job{{ID: "b", Duration: 10, GPUs: 1, Tier: "urgent", Line: 9}}
	err := Synthesize(bad, "g.csv", 1)
	if err == nil || !strings.Contains(err.Error(), "g.csv:9: column tier: unknown tier \"urgent\"") {
		t.Fatalf("error = %v", err)
	}
}

// TestTruncatedGzipFails: a file cut short is an error naming the file and
// the last line read, with or without --skip-bad (which must not loop on
// an error no row can get past).
func TestTruncatedGzipFails(t *testing.T) {
	var b strings.Builder
	b.WriteString("timestamp,duration,num_gpus,gpu_time,cluster\n")
	for i := 0; i < 2000; i++ {
		b.WriteString("2017-10-09 07:01:55,66.0,1,66.0,11cb48\n")
	}
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write([]byte(b.String()))
	w.Close()
	cut := gz.Bytes()[:gz.Len()/2]
	for _, skip := range []bool{false, true} {
		_, err := Read(bytes.NewReader(cut), "t.csv.gz", FormatPhilly, ReadOptions{SkipBad: skip})
		if err == nil || !strings.HasPrefix(err.Error(), "t.csv.gz: read after line ") || !strings.Contains(err.Error(), "unexpected EOF") {
			t.Fatalf("skip-bad %v: error = %v", skip, err)
		}
	}
}

// Issue 36: an unknown tier in a generic trace is a bad row like any other:
// reported by Read at its row (file:line:column), before the bad rows
// after it, and skipped (and counted) under SkipBad.
func TestReadUnknownTierIsABadRow(t *testing.T) {
	const head = "id,submit_s,duration_s,gpus,project,tier,preemptible,walltime_s\n"
	cases := []struct {
		name    string
		rows    string
		skip    bool
		wantErr string   // prefix; "" for none
		skipped []string // SkipErrors prefixes, in order
		jobs    int
	}{
		{"alone", "a,0,1,1,p,urgent,,\n", false, `g.csv:2:11: column tier: unknown tier "urgent"`, nil, 0},
		{"before a later bad row", "a,0,1,1,p,high,,\nb,1,1,1,p,urgnet,,\nc,2,x,1,p,,,\n", false,
			`g.csv:3:11: column tier: unknown tier "urgnet"`, nil, 0},
		{"skipped", "a,0,1,1,p,high,,\nb,1,1,1,p,urgnet,,\nc,2,x,1,p,,,\nd,3,1,1,p,,,\n", true, "",
			[]string{`g.csv:3:11: column tier: unknown tier "urgnet"`, "g.csv:4:5: column duration_s:"}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := Read(strings.NewReader(head+tc.rows), "g.csv", FormatGeneric, ReadOptions{SkipBad: tc.skip})
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(tr.Jobs) != tc.jobs || tr.Skipped != len(tc.skipped) {
				t.Fatalf("%d jobs, %d skipped (%v); want %d, %d", len(tr.Jobs), tr.Skipped, tr.SkipErrors, tc.jobs, len(tc.skipped))
			}
			for i, w := range tc.skipped {
				if !strings.HasPrefix(tr.SkipErrors[i], w) {
					t.Errorf("skipped row %d: %q, want %q", i, tr.SkipErrors[i], w)
				}
			}
			if err := Synthesize(tr.Jobs, tr.Source, 1); err != nil {
				t.Fatalf("the rows kept must synthesize: %v", err)
			}
		})
	}
}
