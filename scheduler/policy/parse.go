package policy

import (
	"errors"
	"fmt"
	"os"

	"github.com/impact-sched/nomad-impact/internal/hclfile"
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
	p, err := Default().Overlay(src, filename)
	if err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// Overlay returns a copy of p with what a policy file writes laid on top
// (not validated: Validate, or use Load): each field it writes replaces
// p's, tiers, projects and headrooms merge by name (a block changes only
// the fields it writes of the same-named entry, or adds one). Syntax
// errors, unknown blocks or attributes, values of the wrong type and
// malformed durations are reported with file, line and field, all of them
// at once, each a *FieldError.
func (p *Policy) Overlay(src []byte, filename string) (*Policy, error) {
	var f policyFile
	body, err := hclfile.Decode(src, filename, &f)
	var errs []error
	if probs, ok := err.(hclfile.Errors); ok {
		for _, pr := range probs {
			field := pr.Key
			switch {
			case pr.Syntax:
				field = "syntax"
			case field == "":
				field = "policy"
			}
			errs = append(errs, &FieldError{Pos: posOf(pr.Range), Field: field, Reason: pr.Msg})
		}
	} else if err != nil {
		return nil, err
	}
	if body == nil {
		return nil, errors.Join(errs...)
	}
	o := &overlay{p: p.Clone(), body: body, at: hclfile.Positions(body)}
	o.apply(&f)
	if errs = append(errs, o.errs...); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return o.p, nil
}
