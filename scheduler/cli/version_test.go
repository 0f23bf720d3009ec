package cli

import (
	"bytes"
	"testing"

	"github.com/impact-sched/nomad-impact/internal/version"
)

// Issue 36: `impact -version` and `impact --version` work as the plugins'
// do (they were an unknown command), and all print the one version of the
// three binaries.
func TestVersionForms(t *testing.T) {
	want := "impact " + version.String() + "\n"
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}} {
		var out, errb bytes.Buffer
		if code := Run(args, &out, &errb); code != 0 || out.String() != want || errb.Len() != 0 {
			t.Errorf("impact %v: exit %d, stdout %q, stderr %q; want %q", args, code, out.String(), errb.String(), want)
		}
	}
}
