package jobspec

import (
	"fmt"
	"strings"
)

// MetaError is a malformed `impact_*` meta value. It names the key so that
// explain and logs can say exactly what to fix.
type MetaError struct {
	// Key is the meta key at fault.
	Key string
	// Value is the offending value as written.
	Value string
	// InGroup is true when the key was read from a task group's meta.
	InGroup bool
	// Group names that task group when the caller knew it (ParseGroupMeta).
	Group string
	// Reason says what is wrong.
	Reason string
}

func (e *MetaError) Error() string {
	where := "job meta"
	switch {
	case e.Group != "":
		where = fmt.Sprintf("group %q meta", e.Group)
	case e.InGroup:
		where = "group meta"
	}
	return fmt.Sprintf("%s %s = %q: %s", where, e.Key, e.Value, e.Reason)
}

// MetaErrors is every malformed `impact_*` meta value of one job (or task
// group), in a stable order: the job's keys sorted, then the group's keys
// sorted. It is returned only when there is more than one problem (a single
// one is a plain *MetaError), so that an operator fixes them all at once
// instead of meeting them one by one. errors.As(err, &me) with a *MetaError
// finds the first; Unwrap lists them all.
type MetaErrors []*MetaError

func (es MetaErrors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return fmt.Sprintf("%d impact meta errors: %s", len(es), strings.Join(parts, "; "))
}

// Unwrap returns every *MetaError, for errors.As and errors.Is.
func (es MetaErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// metaErr folds the problems found into the error ParseMeta returns: nil,
// one *MetaError, or MetaErrors.
func metaErr(errs []*MetaError) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return MetaErrors(errs)
}
