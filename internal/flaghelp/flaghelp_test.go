package flaghelp

import (
	"flag"
	"strings"
	"testing"
	"time"
)

// Each flag is one "--name=<value>" line (a bool has no value), the
// description wrapped beside it, and a default shown only when it is not
// the zero value and the description states none of its own.
func TestPrint(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("trace", "", "the trace `file` (required)")
	fs.String("format", "philly", "the trace `format`")
	fs.Int("nodes", 64, "number of nodes")
	fs.Bool("quiet", false, "no progress line")
	fs.Bool("plots", true, "draw plots")
	fs.Duration("debounce", -1, "delay (default: the agent's, 500ms)")
	fs.Duration("grace", time.Minute, "grace")
	fs.Float64("share", 0, "a long description that goes on and on until it has to be wrapped onto a second line beside the name")
	var b strings.Builder
	Print(&b, fs)
	want := []string{
		`  --debounce=<duration>       delay (default: the agent's, 500ms)`,
		`  --format=<format>           the trace format (default "philly")`,
		`  --grace=<duration>          grace (default 1m0s)`,
		`  --nodes=<int>               number of nodes (default 64)`,
		`  --plots                     draw plots (default true)`,
		`  --quiet                     no progress line`,
		`  --share=<float>             a long description that goes on and on until it`,
		`                              has to be wrapped onto a second line beside the`,
		`                              name`,
		`  --trace=<file>              the trace file (required)`,
	}
	if got := strings.TrimRight(b.String(), "\n"); got != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", got, strings.Join(want, "\n"))
	}
	for _, l := range strings.Split(b.String(), "\n") {
		if len(l) > Width {
			t.Errorf("line longer than %d: %q", Width, l)
		}
	}
}
