package policy

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty"

	"github.com/impact-sched/nomad-impact/jobspec"
)

// Load reads a policy file and returns Default() merged with it, validated.
// Every error names the file, line and field.
func Load(path string) (*Policy, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read policy file: %w", err)
	}
	return LoadBytes(src, path)
}

// LoadBytes is Load for a policy already in memory; filename is used in
// errors.
func LoadBytes(src []byte, filename string) (*Policy, error) {
	f, err := Parse(src, filename)
	if err != nil {
		return nil, err
	}
	p := Default().Merge(f)
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// Parse decodes a policy file into a Policy holding only the fields the file
// writes (use Default().Merge(parsed).Validate(), or Load). Syntax errors,
// unknown blocks or attributes and values of the wrong type are reported
// with file, line and field, all of them at once.
func Parse(src []byte, filename string) (*Policy, error) {
	parser := hclparse.NewParser()
	file, diags := parser.ParseHCL(src, filename)
	if diags.HasErrors() {
		return nil, diagErr(diags)
	}
	d := &decoder{p: &Policy{
		Tiers:    map[string]*Tier{},
		Projects: map[string]*Project{},
		pos:      map[string]Pos{},
	}}
	d.decodeRoot(file.Body)
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	return d.p, nil
}

var rootSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "default_tier"},
		{Name: "default_project"},
	},
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "tier", LabelNames: []string{"name"}},
		{Type: "project", LabelNames: []string{"name"}},
		{Type: "aging"},
		{Type: "fair_share"},
		{Type: "deadline"},
		{Type: "preemption"},
		{Type: "backfill"},
		{Type: "defragment"},
		{Type: "headroom", LabelNames: []string{"pool"}},
		{Type: "gangs"},
		{Type: "idle"},
	},
}

func attrs(names ...string) *hcl.BodySchema {
	s := &hcl.BodySchema{}
	for _, n := range names {
		s.Attributes = append(s.Attributes, hcl.AttributeSchema{Name: n})
	}
	return s
}

type decoder struct {
	p    *Policy
	errs []error
}

func (d *decoder) fail(rng hcl.Range, field, format string, args ...any) {
	d.errs = append(d.errs, &FieldError{Pos: Pos{File: rng.Filename, Line: rng.Start.Line}, Field: field, Reason: fmt.Sprintf(format, args...)})
}

func (d *decoder) diags(field string, diags hcl.Diagnostics) bool {
	for _, dg := range diags {
		if dg.Severity != hcl.DiagError {
			continue
		}
		rng := hcl.Range{}
		if dg.Subject != nil {
			rng = *dg.Subject
		}
		reason := dg.Summary
		if dg.Detail != "" {
			reason += ": " + dg.Detail
		}
		d.fail(rng, field, "%s", reason)
	}
	return diags.HasErrors()
}

func (d *decoder) decodeRoot(body hcl.Body) {
	content, diags := body.Content(rootSchema)
	if d.diags("policy", diags) {
		return
	}
	if a, ok := content.Attributes["default_tier"]; ok {
		d.str(a, "default_tier", &d.p.DefaultTier)
	}
	if a, ok := content.Attributes["default_project"]; ok {
		d.str(a, "default_project", &d.p.DefaultProject)
	}
	seen := map[string]hcl.Range{}
	for _, b := range content.Blocks {
		key := b.Type
		if len(b.Labels) > 0 {
			key = fmt.Sprintf("%s %q", b.Type, b.Labels[0])
		}
		if prev, dup := seen[key]; dup {
			d.fail(b.DefRange, key, "defined twice (first at line %d)", prev.Start.Line)
			continue
		}
		seen[key] = b.DefRange
		d.p.pos[key] = Pos{File: b.DefRange.Filename, Line: b.DefRange.Start.Line}
		switch b.Type {
		case "tier":
			d.tier(b, key)
		case "project":
			d.project(b, key)
		case "aging":
			d.block(b, key, map[string]any{"weight_per_hour": &d.p.Aging.WeightPerHour, "max": &d.p.Aging.Max})
		case "fair_share":
			d.block(b, key, map[string]any{"half_life": &d.p.FairShare.HalfLife, "weight": &d.p.FairShare.Weight})
		case "deadline":
			d.block(b, key, map[string]any{"weight": &d.p.Deadline.Weight, "horizon": &d.p.Deadline.Horizon})
		case "preemption":
			pr := &d.p.Preemption
			d.block(b, key, map[string]any{
				"enabled":                     &pr.Enabled,
				"max_gpu_hours_lost_per_hour": &pr.MaxGPUHoursLostPerHour,
				"min_runtime":                 &pr.MinRuntime,
				"restart_cost":                &pr.RestartCost,
				"gain_horizon":                &pr.GainHorizon,
				"max_per_cycle":               &pr.MaxPerCycle,
			})
		case "backfill":
			d.block(b, key, map[string]any{"enabled": &d.p.Backfill.Enabled, "reservations": &d.p.Backfill.Reservations})
		case "defragment":
			df := &d.p.Defragment
			d.block(b, key, map[string]any{"enabled": &df.Enabled, "max_victim_gpus": &df.MaxVictimGPUs, "max_per_cycle": &df.MaxPerCycle, "gain_horizon": &df.GainHorizon})
		case "headroom":
			d.headroom(b, key)
		case "gangs":
			d.block(b, key, map[string]any{"missing_member_grace": &d.p.Gangs.MissingMemberGrace})
		case "idle":
			d.idle(b, key, &d.p.Idle)
		}
	}
}

func (d *decoder) tier(b *hcl.Block, key string) {
	name := b.Labels[0]
	if !jobspec.ValidName(name) {
		d.fail(b.LabelRanges[0], key, "tier name must use letters, digits, '-', '_' or '.'")
		return
	}
	t := &Tier{Name: name}
	d.p.Tiers[name] = t
	blocks := d.blockWith(b, key, map[string]any{"weight": &t.Weight, "may_preempt": &t.MayPreempt, "preemptible": &t.Preemptible,
		"max_gpu_hours_lost_per_hour": &t.MaxGPUHoursLostPerHour}, "idle")
	for i, ib := range blocks {
		ikey := key + " idle"
		if i > 0 {
			d.fail(ib.DefRange, ikey, "defined twice (first at line %d)", blocks[0].DefRange.Start.Line)
			continue
		}
		d.p.pos[ikey] = Pos{File: ib.DefRange.Filename, Line: ib.DefRange.Start.Line}
		var full Idle
		d.idle(ib, ikey, &full)
		t.Idle = overrideOf(&full, func(f string) bool { _, ok := d.p.pos[ikey+" "+f]; return ok })
	}
}

func (d *decoder) project(b *hcl.Block, key string) {
	name := b.Labels[0]
	if !jobspec.ValidName(name) {
		d.fail(b.LabelRanges[0], key, "project name must use letters, digits, '-', '_' or '.'")
		return
	}
	pr := &Project{Name: name, Share: 1, Weight: 1}
	d.p.Projects[name] = pr
	d.block(b, key, map[string]any{"share": &pr.Share, "weight": &pr.Weight, "gpu_quota": &pr.GPUQuota})
}

func (d *decoder) headroom(b *hcl.Block, key string) {
	name := b.Labels[0]
	if !jobspec.ValidName(name) {
		d.fail(b.LabelRanges[0], key, "pool name must use letters, digits, '-', '_' or '.'")
		return
	}
	if d.p.Headrooms == nil {
		d.p.Headrooms = map[string]*Headroom{}
	}
	h := &Headroom{Pool: name}
	d.p.Headrooms[name] = h
	d.block(b, key, map[string]any{"tiers": &h.Tiers, "gpus": &h.GPUs, "share": &h.Share, "learn": &h.Learn,
		"window": &h.Window, "max_share": &h.MaxShare, "min_gpus": &h.MinGPUs})
}

// block decodes a block whose body holds only attributes, into the given
// destinations by attribute name; the type of each destination picks the
// conversion.
func (d *decoder) block(b *hcl.Block, key string, dst map[string]any) {
	d.blockWith(b, key, dst)
}

// blockWith is block for a body that may also hold nested blocks of the
// given types (without labels); it returns them, in file order.
func (d *decoder) blockWith(b *hcl.Block, key string, dst map[string]any, nested ...string) []*hcl.Block {
	names := make([]string, 0, len(dst))
	for n := range dst {
		names = append(names, n)
	}
	schema := attrs(names...)
	for _, n := range nested {
		schema.Blocks = append(schema.Blocks, hcl.BlockHeaderSchema{Type: n})
	}
	content, diags := b.Body.Content(schema)
	if d.diags(key, diags) {
		return nil
	}
	for _, n := range sortedKeys(content.Attributes) {
		a := content.Attributes[n]
		field := key + " " + n
		switch p := dst[n].(type) {
		case *float64:
			d.num(a, field, p)
		case *int:
			d.integer(a, field, p)
		case *bool:
			d.boolean(a, field, p)
		case *time.Duration:
			d.duration(a, field, p)
		case *[]string:
			d.strings(a, field, p)
		case *string:
			d.str(a, field, p)
		}
	}
	return content.Blocks
}

func (d *decoder) value(a *hcl.Attribute, field string) (cty.Value, bool) {
	v, diags := a.Expr.Value(nil)
	if d.diags(field, diags) {
		return cty.NilVal, false
	}
	if v.IsNull() || !v.IsKnown() {
		d.fail(a.Expr.Range(), field, "must have a value")
		return cty.NilVal, false
	}
	return v, true
}

func (d *decoder) mark(a *hcl.Attribute, field string) {
	d.p.pos[field] = Pos{File: a.Range.Filename, Line: a.Range.Start.Line}
}

func (d *decoder) str(a *hcl.Attribute, field string, dst *string) {
	v, ok := d.value(a, field)
	if !ok {
		return
	}
	if v.Type() != cty.String {
		d.fail(a.Expr.Range(), field, "must be a string, got %s", v.Type().FriendlyName())
		return
	}
	*dst = v.AsString()
	d.mark(a, field)
}

func (d *decoder) num(a *hcl.Attribute, field string, dst *float64) {
	v, ok := d.value(a, field)
	if !ok {
		return
	}
	if v.Type() != cty.Number {
		d.fail(a.Expr.Range(), field, "must be a number, got %s", v.Type().FriendlyName())
		return
	}
	f, _ := v.AsBigFloat().Float64()
	*dst = f
	d.mark(a, field)
}

func (d *decoder) integer(a *hcl.Attribute, field string, dst *int) {
	v, ok := d.value(a, field)
	if !ok {
		return
	}
	if v.Type() != cty.Number {
		d.fail(a.Expr.Range(), field, "must be a whole number, got %s", v.Type().FriendlyName())
		return
	}
	bf := v.AsBigFloat()
	i, acc := bf.Int64()
	if acc != big.Exact || i > math.MaxInt32 || i < math.MinInt32 {
		d.fail(a.Expr.Range(), field, "must be a whole number, got %s", bf.Text('g', 10))
		return
	}
	*dst = int(i)
	d.mark(a, field)
}

func (d *decoder) boolean(a *hcl.Attribute, field string, dst *bool) {
	v, ok := d.value(a, field)
	if !ok {
		return
	}
	if v.Type() != cty.Bool {
		d.fail(a.Expr.Range(), field, "must be true or false, got %s", v.Type().FriendlyName())
		return
	}
	*dst = v.True()
	d.mark(a, field)
}

func (d *decoder) duration(a *hcl.Attribute, field string, dst *time.Duration) {
	v, ok := d.value(a, field)
	if !ok {
		return
	}
	if v.Type() != cty.String {
		d.fail(a.Expr.Range(), field, "must be a duration string such as \"10m\", got %s", v.Type().FriendlyName())
		return
	}
	dur, err := time.ParseDuration(strings.TrimSpace(v.AsString()))
	if err != nil {
		d.fail(a.Expr.Range(), field, "must be a duration such as \"90s\", \"10m\" or \"24h\", got %q", v.AsString())
		return
	}
	*dst = dur
	d.mark(a, field)
}

func (d *decoder) strings(a *hcl.Attribute, field string, dst *[]string) {
	v, ok := d.value(a, field)
	if !ok {
		return
	}
	if !v.Type().IsListType() && !v.Type().IsTupleType() && !v.Type().IsSetType() {
		d.fail(a.Expr.Range(), field, "must be a list of strings, got %s", v.Type().FriendlyName())
		return
	}
	out := []string{}
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if e.IsNull() || e.Type() != cty.String {
			d.fail(a.Expr.Range(), field, "must be a list of strings")
			return
		}
		out = append(out, e.AsString())
	}
	*dst = out
	d.mark(a, field)
}

func diagErr(diags hcl.Diagnostics) error {
	var errs []error
	for _, dg := range diags {
		if dg.Severity != hcl.DiagError {
			continue
		}
		pos := Pos{}
		if dg.Subject != nil {
			pos = Pos{File: dg.Subject.Filename, Line: dg.Subject.Start.Line}
		}
		reason := dg.Summary
		if dg.Detail != "" {
			reason += ": " + dg.Detail
		}
		errs = append(errs, &FieldError{Pos: pos, Field: "syntax", Reason: reason})
	}
	return errors.Join(errs...)
}
