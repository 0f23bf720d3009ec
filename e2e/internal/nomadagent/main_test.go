package nomadagent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain says once when this package's tests that need Nomad skip.
func TestMain(m *testing.M) { Main(m, "e2e/internal/nomadagent") }

// Issue 36: without nomad, a suite says once why it skipped, in the file
// make test prints (go test alone would show only "ok"); with nomad it
// says nothing.
func TestNoteSkip(t *testing.T) {
	log := filepath.Join(t.TempDir(), "skipped")
	t.Setenv(SkipLogEnv, log)
	t.Setenv("PATH", t.TempDir())
	want := "e2e/x: skipped its tests that need Nomad: no nomad binary on PATH (run them with make e2e, a nomad on PATH)"
	if got := noteSkip("e2e/x"); got != want {
		t.Fatalf("line %q, want %q", got, want)
	}
	noteSkip("e2e/y")
	b, err := os.ReadFile(log)
	if err != nil || string(b) != want+"\n"+strings.Replace(want, "e2e/x", "e2e/y", 1)+"\n" {
		t.Fatalf("log %q (%v)", b, err)
	}
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "nomad"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	if got := noteSkip("e2e/z"); got != "" {
		t.Fatalf("with nomad on PATH: %q", got)
	}
}
