package config

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agext/levenshtein"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// sections are the blocks a config file may hold; each appears at most once.
var sections = map[string]bool{"nomad": true, "consul": true, "http": true, "cycle": true, "ha": true, "device_stats": true, "auth": true}

// ParseFile reads one HCL config file into a partial Config (only what the
// file sets), ready to Merge over the defaults.
func ParseFile(path string) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return Parse(src, path)
}

// Parse parses config source; filename is used in error messages and to
// resolve a relative policy path. Every problem is reported, in line
// order; the settings that did parse are returned with them (so that Load
// can still check the rest), nil only when the file is not HCL.
func Parse(src []byte, filename string) (*Config, error) {
	file, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, diagError(diags)
	}
	body, ok := file.Body.(*hclsyntax.Body)
	if !ok {
		return nil, fmt.Errorf("%s: not native HCL syntax", filename)
	}
	c := &Config{}
	p := parser{c: c, file: filename}
	p.body(body, "")
	for _, blk := range body.Blocks {
		if !sections[blk.Type] {
			p.errorf(blk.TypeRange, blk.Type, "unknown block; expected one of %s%s", keys(sections), didYouMean(blk.Type, sortedSections()))
			continue
		}
		if len(blk.Labels) > 0 {
			p.errorf(blk.LabelRanges[0], blk.Type, "takes no labels")
		}
		if prev, dup := p.seen[blk.Type]; dup {
			p.errorf(blk.TypeRange, blk.Type, "duplicate block (first at line %d)", prev.Start.Line)
			continue
		}
		p.mark(blk.Type, blk.TypeRange)
		p.body(blk.Body, blk.Type)
		if len(blk.Body.Blocks) > 0 {
			b := blk.Body.Blocks[0]
			p.errorf(b.TypeRange, blk.Type+"."+b.Type, "unknown block")
		}
		if blk.Type == "consul" && c.Consul.Enabled == nil {
			// A consul block turns registration on unless it says enabled = false.
			t := true
			c.Consul.Enabled = &t
			c.setOrigin("consul.enabled", position(filename, blk.TypeRange))
		}
	}
	if c.PolicyFile != "" && !filepath.IsAbs(c.PolicyFile) {
		c.PolicyFile = filepath.Join(filepath.Dir(filename), c.PolicyFile)
	}
	order := make([]int, len(p.errs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return p.lines[order[i]] < p.lines[order[j]] })
	errs := make([]error, len(order))
	for i, k := range order {
		errs[i] = p.errs[k]
	}
	return c, joinErrs(errs)
}

type parser struct {
	c    *Config
	file string
	errs []error
	// lines[i] is the line of errs[i], to report them in file order.
	lines []int
	seen  map[string]hcl.Range
}

func (p *parser) mark(name string, r hcl.Range) {
	if p.seen == nil {
		p.seen = map[string]hcl.Range{}
	}
	p.seen[name] = r
}

func (p *parser) errorf(r hcl.Range, field, format string, args ...any) {
	p.errs = append(p.errs, &FieldError{Origin: position(p.file, r), Field: field, Msg: fmt.Sprintf(format, args...)})
	p.lines = append(p.lines, r.Start.Line)
}

func (p *parser) body(b *hclsyntax.Body, section string) {
	names := make([]string, 0, len(b.Attributes))
	for n := range b.Attributes {
		names = append(names, n)
	}
	sort.Strings(names) // deterministic error order
	for _, name := range names {
		attr := b.Attributes[name]
		path := name
		if section != "" {
			path = section + "." + name
		}
		f, ok := p.c.field(path)
		if !ok || (section == "" && strings.Contains(path, ".")) {
			p.errorf(attr.NameRange, path, "unknown setting%s", p.c.suggestSetting(section, name))
			continue
		}
		val, diags := attr.Expr.Value(nil)
		if diags.HasErrors() {
			p.errorf(attr.Expr.Range(), path, "%s", diags[0].Summary+": "+diags[0].Detail)
			continue
		}
		if err := assign(f, val); err != nil {
			p.errorf(attr.Expr.Range(), path, "%v", err)
			continue
		}
		p.c.setOrigin(path, position(p.file, attr.NameRange))
	}
}

// suggestSetting is the "did you mean" of an unknown setting name in a
// section ("" for the top level), as the policy file's errors (HCL's) give
// one: the closest setting of that section, else the same name in another
// section or at the top level ("; did you mean http.listen?"), else "".
// Blocks count as top-level names.
func (c *Config) suggestSetting(section, name string) string {
	var here []string
	var elsewhere []string
	for _, f := range c.fields() {
		sec, n, nested := strings.Cut(f.path, ".")
		if !nested {
			sec, n = "", f.path
		}
		if sec == section {
			here = append(here, n)
		} else if n == name {
			elsewhere = append(elsewhere, f.path)
		}
	}
	if section == "" {
		here = append(here, sortedSections()...)
	}
	if s := didYouMean(name, here); s != "" {
		return s
	}
	if len(elsewhere) > 0 {
		return fmt.Sprintf("; did you mean %s?", strings.Join(elsewhere, " or "))
	}
	return ""
}

// didYouMean suggests the first of names within an edit distance of 3 of
// given, the threshold HCL's own suggestions use (so the config file and
// the policy file suggest alike): `; did you mean "name"?`, or "".
func didYouMean(given string, names []string) string {
	for _, n := range names {
		if levenshtein.Distance(given, n, nil) < 3 {
			return fmt.Sprintf("; did you mean %q?", n)
		}
	}
	return ""
}

func sortedSections() []string { return slices.Sorted(maps.Keys(sections)) }

func assign(f field, v cty.Value) error {
	if v.IsNull() {
		return fmt.Errorf("must not be null")
	}
	switch {
	case f.s != nil:
		if v.Type() != cty.String {
			return fmt.Errorf("must be a string, got %s", v.Type().FriendlyName())
		}
		if v.AsString() == "" {
			return fmt.Errorf("must not be empty (leave the setting out for the default)")
		}
		*f.s = v.AsString()
	case f.d != nil:
		if v.Type() != cty.String {
			return fmt.Errorf(`must be a duration string such as "10s", got %s`, v.Type().FriendlyName())
		}
		d, err := time.ParseDuration(v.AsString())
		if err != nil {
			return fmt.Errorf("%q is not a duration: %v", v.AsString(), err)
		}
		if d <= 0 {
			return fmt.Errorf("%q must be positive (leave the setting out for the default)", v.AsString())
		}
		*f.d = d
	default:
		if v.Type() != cty.Bool {
			return fmt.Errorf("must be true or false, got %s", v.Type().FriendlyName())
		}
		b := v.True()
		*f.b = &b
	}
	return nil
}

func position(file string, r hcl.Range) string {
	return fmt.Sprintf("%s:%d", file, r.Start.Line)
}

func diagError(diags hcl.Diagnostics) error {
	var errs []error
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		loc := ""
		if d.Subject != nil {
			loc = position(d.Subject.Filename, *d.Subject) + ": "
		}
		errs = append(errs, fmt.Errorf("%s%s: %s", loc, d.Summary, d.Detail))
	}
	return joinErrs(errs)
}

// joinErrs joins errors one per line, which reads better in a terminal than
// errors.Join's output when wrapped by a caller.
func joinErrs(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return multiError(errs)
}

type multiError []error

func (m multiError) Error() string {
	parts := make([]string, len(m))
	for i, e := range m {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

func (m multiError) Unwrap() []error { return m }

func keys(m map[string]bool) string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// assignString sets a field from text (a flag value).
func assignString(f field, s string) error {
	if f.b != nil {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q is not a boolean", s)
		}
		return assign(f, cty.BoolVal(b))
	}
	return assign(f, cty.StringVal(s))
}
