// Package flaghelp writes the options of a flag.FlagSet the way the help
// of `impact sim` and `impact robustness` documents them, instead of
// flag.PrintDefaults' "-name type" lines: one "--name=<value>" per flag
// (the form their usage lines and examples use; one dash works as well),
// its description beside it, wrapped, and "(default X)" when the default
// is not the zero value and the description does not state its own
// default (a flag whose real default is decided elsewhere, like
// --cycle-debounce's, says so in words and must not also show its
// sentinel).
package flaghelp

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// Width is the column the descriptions are wrapped at.
const Width = 78

// nameColumn is the widest "--name=<value>" that gets its description on
// the same line; longer ones get it on the next.
const nameColumn = 28

// Print writes every flag of fs in name order.
func Print(w io.Writer, fs *flag.FlagSet) {
	var b strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		head := "  --" + f.Name
		if name != "" {
			head += "=<" + name + ">"
		}
		if d := Default(f); d != "" {
			usage += " (default " + d + ")"
		}
		indent := strings.Repeat(" ", nameColumn+2)
		lines := wrap(usage, Width-len(indent))
		if len(head) < nameColumn+1 {
			fmt.Fprintf(&b, "%-*s %s\n", nameColumn+1, head, lines[0])
			lines = lines[1:]
		} else {
			b.WriteString(head + "\n")
		}
		for _, l := range lines {
			b.WriteString(indent + l + "\n")
		}
	})
	io.WriteString(w, b.String())
}

// Default is the default Print shows for f: "" for a zero value, or when
// the description already states a default ("(default" in its text).
func Default(f *flag.Flag) string {
	if strings.Contains(f.Usage, "(default") {
		return ""
	}
	switch f.DefValue {
	case "", "0", "0s", "false":
		return ""
	}
	if _, ok := f.Value.(interface{ IsBoolFlag() bool }); ok {
		return f.DefValue
	}
	if g, ok := f.Value.(flag.Getter); ok {
		if _, isString := g.Get().(string); isString {
			return fmt.Sprintf("%q", f.DefValue)
		}
	}
	return f.DefValue
}

// wrap splits s into lines of at most width runes, at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case len(line)+1+len(word) > width:
			lines = append(lines, line)
			line = word
		default:
			line += " " + word
		}
	}
	return append(lines, line)
}
