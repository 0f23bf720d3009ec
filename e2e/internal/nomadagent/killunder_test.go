package nomadagent

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// KillUnder finds a process by a path under the directory on its command
// line alone (as Nomad's task executor names its log file), and leaves
// one naming a sibling directory whose name only begins the same.
func TestKillUnderFindsProcessesByCommandLine(t *testing.T) {
	base := t.TempDir()
	dir, sibling := filepath.Join(base, "client-1"), filepath.Join(base, "client-10")
	for _, d := range []string{dir, sibling} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	start := func(logFile string) *exec.Cmd {
		// sh's own exe and working directory lie elsewhere: only its
		// arguments name the client's directory. It blocks in read, a
		// builtin, on a pipe kept open until cleanup: a command it forked
		// (sleep) would be, until its exec, a second process with sh's
		// command line, and KillUnder would rightly signal it too.
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sh", "-c", "read -r line", logFile)
		cmd.Dir, cmd.Stdin = os.TempDir(), r
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		_ = r.Close() // the child holds its own copy
		t.Cleanup(func() { _ = w.Close(); _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
		return cmd
	}
	inside := start(filepath.Join(dir, "alloc", "executor.out"))
	outside := start(filepath.Join(sibling, "alloc", "executor.out"))

	if n := KillUnder(dir); n != 1 {
		t.Fatalf("KillUnder signalled %d processes, want 1", n)
	}
	st, err := inside.Process.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if st.Exited() || st.Sys() == nil {
		t.Fatalf("the process naming %s ended on its own (%v), not killed", dir, st)
	}
	if zombie(outside.Process.Pid) {
		t.Fatalf("the process naming %s was killed", sibling)
	}
}
