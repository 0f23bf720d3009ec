package cli

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
)

// documentedFlags lists the flags a help text documents ("  -name=<x>" or
// "  -name" at the start of an option line).
func documentedFlags(help string) []string {
	re := regexp.MustCompile(`(?m)^  (-[a-z][a-z-]*)[= ]?`)
	var out []string
	for _, m := range re.FindAllStringSubmatch(help, -1) {
		out = append(out, m[1])
	}
	return out
}

// Every flag a command's -h documents exists: `<cmd> -flag=1 -h` prints
// the help (exit 0) instead of "flag provided but not defined" (exit 1).
// And the help is printed on stdout with exit 0.
func TestHelpDocumentsRealFlags(t *testing.T) {
	agentCmd := Command{Run: func(args []string, stdout, stderr io.Writer) int {
		return runAgent(context.Background(), args, func(string) string { return "" }, stdout, stderr)
	}}
	cmds := map[string]Command{"agent": agentCmd, "queue": queueCmd(noEnv), "explain": explainCmd(noEnv)}
	want := map[string][]string{
		"agent":   {"-config", "-policy", "-nomad-address", "-http-listen", "-default-pool", "-name", "-log-level", "-log-json", "-check"},
		"queue":   {"-address", "-json", "-waiting"},
		"explain": {"-address", "-namespace", "-json"},
	}
	for name, cmd := range cmds {
		var out, errb bytes.Buffer
		if code := cmd.Run([]string{"-h"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "Usage: impact "+name) {
			t.Errorf("%s -h: exit %d, stdout %q", name, code, out.String())
			continue
		}
		flags := documentedFlags(out.String())
		if strings.Join(flags, " ") != strings.Join(want[name], " ") {
			t.Errorf("%s -h documents %v, want %v", name, flags, want[name])
		}
		for _, f := range flags {
			var o, e bytes.Buffer
			if code := cmd.Run([]string{f + "=1", "-h"}, &o, &e); code != 0 {
				t.Errorf("%s: documented flag %s is not defined: exit %d, %s", name, f, code, e.String())
			}
		}
		var o, e bytes.Buffer
		if code := cmd.Run([]string{"-no-such-flag", "-h"}, &o, &e); code != 1 {
			t.Errorf("%s: an undefined flag gives exit %d, want 1 (the check above would prove nothing)", name, code)
		}
	}
}

// Issue 36: impact sim and impact robustness document their options as
// their usage lines use them ("--name=<value>"), every flag once, not in
// Go's default "-name type" form, on stdout with exit 0.
func TestSimHelpDocumentsFlagsAsUsed(t *testing.T) {
	want := map[string]string{
		"sim": "--agent-config --checkpoint-interval --cluster --cpuprofile --cycle-debounce --cycle-interval --format --from " +
			"--gpus-per-node --grace --hang-share --impact-policy --islands-per-node --no-plots --nodes --out --parallel " +
			"--policies --quiet --rack-size --recheck --restart-cost --save-on-signal --seed --skip-bad --to --trace",
		"robustness": "--against --impact-policy --jobs --only --out --parallel --random --reasons --replica-jitter --replicas --save-on-signal --scale --seed --strict --trace --twin-jitter",
	}
	goDefault := regexp.MustCompile(`(?m)^  -[a-z-]+( (string|int|int64|float|duration|value))?$`)
	documented := regexp.MustCompile(`(?m)^  (--[a-z][a-z-]*)(=<[a-z]+>)?( |$)`)
	for name, cmd := range map[string]Command{"sim": simCommand(), "robustness": robustnessCommand()} {
		var out, errb bytes.Buffer
		if code := cmd.Run([]string{"-h"}, &out, &errb); code != 0 || errb.Len() != 0 || !strings.HasPrefix(out.String(), "Usage: impact "+name) {
			t.Errorf("%s -h: exit %d, stderr %q", name, code, errb.String())
			continue
		}
		if m := goDefault.FindString(out.String()); m != "" {
			t.Errorf("%s -h has a Go default flag line %q", name, m)
		}
		var got []string
		for _, m := range documented.FindAllStringSubmatch(out.String(), -1) {
			got = append(got, m[1])
		}
		if strings.Join(got, " ") != want[name] {
			t.Errorf("%s -h documents\n%v\nwant\n%v", name, got, want[name])
		}
	}
}
