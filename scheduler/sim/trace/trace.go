// Package trace reads job traces for the simulator: the Philly-derived trace
// bundled in example/traces (gzip CSV `timestamp,duration,num_gpus,gpu_time,
// cluster`) and a documented generic CSV. A trace row that cannot be read is
// an error naming the file, line and column, or, when the caller asks to skip
// bad rows, it is counted and kept in the result; no row is ever dropped
// silently.
//
// Impact labels (tier, project, preemptibility, walltime) that the trace
// lacks are filled in by Synthesize, deterministically from a seed, by the
// rule it documents (labels.go).
package trace

import (
	"bufio"
	"compress/gzip"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Format names a trace file layout.
type Format string

const (
	// FormatPhilly is the reduced Philly trace: timestamp,duration,num_gpus,
	// gpu_time,cluster with timestamps `YYYY-MM-DD HH:MM:SS` (UTC).
	FormatPhilly Format = "philly"
	// FormatGeneric is id,submit_s,duration_s,gpus,project,tier,
	// preemptible,walltime_s; the last four columns may be empty.
	FormatGeneric Format = "generic"
)

// ParseFormat validates a format name.
func ParseFormat(s string) (Format, error) {
	switch Format(s) {
	case FormatPhilly, FormatGeneric:
		return Format(s), nil
	}
	return "", fmt.Errorf("unknown trace format %q (want philly or generic)", s)
}

// Job is one job of a trace. Times are whole seconds: Submit is on the
// trace's own clock (Unix seconds for Philly, the submit_s column for
// generic traces).
type Job struct {
	ID       string
	Submit   int64
	Duration int64 // seconds of useful run time, > 0
	GPUs     int   // > 0
	Project  string
	// Tier, Preemptible and Walltime are empty/nil/0 when the trace does not
	// carry them; Synthesize fills them.
	Tier        string
	Preemptible *bool
	Walltime    int64
	// Line is the 1-based line of the row in the file, for error messages.
	Line int
	// tierCol is the 1-based byte column of the tier field (generic rows
	// that give a tier), for Synthesize's error on an unknown tier.
	tierCol int
}

// Trace is the result of reading a file.
type Trace struct {
	Source string
	Format Format
	// Jobs are sorted by Submit, then by Line.
	Jobs []Job
	// Skipped counts bad rows skipped under ReadOptions.SkipBad; SkipErrors
	// keeps the first few of their errors for the report.
	Skipped    int
	SkipErrors []string
	// Filtered counts good rows outside the [From, To) window.
	Filtered int
}

// ReadOptions selects rows and says what to do with bad ones.
type ReadOptions struct {
	// From and To bound submit times, on the trace's clock: From inclusive,
	// To exclusive. Nil means unbounded.
	From, To *int64
	// SkipBad counts and skips bad rows instead of failing on the first.
	SkipBad bool
}

// RowError is a bad row: the file, 1-based line and the column at fault,
// by name and by position. Its message reads
// `FILE:LINE:COL: column NAME: what is wrong`, the position editors and
// compilers use, so a reader can jump to the field.
type RowError struct {
	File string
	Line int
	// Col is the 1-based byte column where the faulty field starts (or
	// where the CSV syntax error is); 0 when the fault is the whole row.
	Col int
	// Column names the faulty field; empty when the fault is the whole row.
	Column string
	Err    error
}

func (e *RowError) Error() string {
	pos := fmt.Sprintf("%s:%d", e.File, e.Line)
	if e.Col > 0 {
		pos += fmt.Sprintf(":%d", e.Col)
	}
	if e.Column == "" {
		return fmt.Sprintf("%s: %v", pos, e.Err)
	}
	return fmt.Sprintf("%s: column %s: %v", pos, e.Column, e.Err)
}

func (e *RowError) Unwrap() error { return e.Err }

// maxSkipErrors bounds how many skipped-row errors a Trace keeps.
const maxSkipErrors = 10

// ReadFile opens path (gzip is detected from its magic bytes) and reads it.
func ReadFile(path string, format Format, opts ReadOptions) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open trace: %w", err)
	}
	defer f.Close()
	return Read(f, path, format, opts)
}

// Read reads a trace from r; name is used in error messages.
func Read(r io.Reader, name string, format Format, opts ReadOptions) (*Trace, error) {
	br, closeGz, err := decompress(r, name)
	if err != nil {
		return nil, err
	}
	defer closeGz()
	rr, err := newRowReader(br, name, format)
	if err != nil {
		return nil, err
	}
	t := &Trace{Source: name, Format: format}
	for {
		job, err := rr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		var re *RowError
		if err != nil && (!errors.As(err, &re) || !opts.SkipBad) {
			return nil, err
		}
		if err != nil {
			t.Skipped++
			if len(t.SkipErrors) < maxSkipErrors {
				t.SkipErrors = append(t.SkipErrors, err.Error())
			}
			continue
		}
		if (opts.From != nil && job.Submit < *opts.From) || (opts.To != nil && job.Submit >= *opts.To) {
			t.Filtered++
			continue
		}
		t.Jobs = append(t.Jobs, job)
	}
	sort.SliceStable(t.Jobs, func(i, j int) bool {
		if t.Jobs[i].Submit != t.Jobs[j].Submit {
			return t.Jobs[i].Submit < t.Jobs[j].Submit
		}
		return t.Jobs[i].Line < t.Jobs[j].Line
	})
	return t, nil
}

// decompress reads through gzip when r starts with its magic bytes; the
// function returned closes the gzip reader.
func decompress(r io.Reader, name string) (*bufio.Reader, func(), error) {
	br := bufio.NewReaderSize(r, 1<<16)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: gzip: %w", name, err)
		}
		return bufio.NewReaderSize(zr, 1<<16), func() { zr.Close() }, nil
	}
	return br, func() {}, nil
}

// rowReader reads a trace's rows as jobs, with errors that name the
// file, line and column at fault.
type rowReader struct {
	cr       *csv.Reader
	name     string
	p        rowParser
	columns  []string
	seen     map[string]int // job ID -> line of its first row
	lastLine int            // the last line read, for errors that have no row
}

// newRowReader reads and checks the header of format.
func newRowReader(r io.Reader, name string, format Format) (*rowReader, error) {
	rr := &rowReader{name: name, seen: map[string]int{}, lastLine: 1}
	switch format {
	case FormatPhilly:
		rr.p, rr.columns = &phillyParser{}, phillyColumns
	case FormatGeneric:
		rr.p, rr.columns = &genericParser{}, GenericColumns
	default:
		return nil, fmt.Errorf("%s: unknown trace format %q", name, format)
	}
	rr.cr = csv.NewReader(r)
	rr.cr.FieldsPerRecord = -1 // checked per row, so the error names the line
	rr.cr.ReuseRecord = true
	header, err := rr.cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty trace (no header)", name)
		}
		return nil, fmt.Errorf("%s: header: %w", name, err)
	}
	if err := rr.p.header(header); err != nil {
		return nil, &RowError{File: name, Line: 1, Err: err}
	}
	return rr, nil
}

// next returns the next row's job, io.EOF after the last row, a *RowError
// for a bad row (the reader can go on), or another error when the file
// itself cannot be read (truncated or corrupt gzip, I/O): no later row can
// be, so not even --skip-bad goes on (it would read the same error
// forever).
func (rr *rowReader) next() (Job, error) {
	for {
		rec, err := rr.cr.Read()
		if errors.Is(err, io.EOF) {
			return Job{}, io.EOF
		}
		if err != nil {
			var pe *csv.ParseError
			if !errors.As(err, &pe) {
				return Job{}, fmt.Errorf("%s: read after line %d: %w", rr.name, rr.lastLine, err)
			}
			return Job{}, &RowError{File: rr.name, Line: pe.Line, Col: pe.Column, Err: pe.Err}
		}
		line, _ := rr.cr.FieldPos(0)
		rr.lastLine = line
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue // a blank line (e.g. trailing) is not a row
		}
		return rr.job(rec, line)
	}
}

// job parses one row read from line.
func (rr *rowReader) job(rec []string, line int) (Job, error) {
	job, err := rr.p.row(rec, line)
	if err != nil {
		var re *RowError
		if !errors.As(err, &re) {
			return Job{}, &RowError{File: rr.name, Line: line, Err: err}
		}
		re.File, re.Line = rr.name, line
		if k := slices.Index(rr.columns, re.Column); k >= 0 {
			re.Line, re.Col = rr.cr.FieldPos(k)
		}
		return Job{}, re
	}
	if prev, dup := rr.seen[job.ID]; dup {
		_, col := rr.cr.FieldPos(0)
		return Job{}, &RowError{File: rr.name, Line: line, Col: col, Column: "id", Err: fmt.Errorf("duplicate job id %q (first on line %d)", job.ID, prev)}
	}
	rr.seen[job.ID] = line
	job.Line = line
	if k := slices.Index(rr.columns, "tier"); k >= 0 && job.Tier != "" {
		_, job.tierCol = rr.cr.FieldPos(k)
	}
	return job, nil
}

type rowParser interface {
	header(cols []string) error
	row(rec []string, line int) (Job, error)
}

// PhillyTimeLayout is the timestamp layout of the Philly trace (UTC).
const PhillyTimeLayout = "2006-01-02 15:04:05"

var phillyColumns = []string{"timestamp", "duration", "num_gpus", "gpu_time", "cluster"}

type phillyParser struct{}

func (phillyParser) header(cols []string) error {
	if len(cols) != len(phillyColumns) {
		return fmt.Errorf("philly header has %d columns, want %d (%s)", len(cols), len(phillyColumns), strings.Join(phillyColumns, ","))
	}
	for i, c := range cols {
		if strings.TrimSpace(c) != phillyColumns[i] {
			return fmt.Errorf("philly header column %d is %q, want %q", i+1, c, phillyColumns[i])
		}
	}
	return nil
}

func (phillyParser) row(rec []string, line int) (Job, error) {
	if len(rec) != len(phillyColumns) {
		return Job{}, fmt.Errorf("row has %d fields, want %d", len(rec), len(phillyColumns))
	}
	ts, err := time.ParseInLocation(PhillyTimeLayout, strings.TrimSpace(rec[0]), time.UTC)
	if err != nil {
		return Job{}, &RowError{Column: "timestamp", Err: fmt.Errorf("%q is not a %q time", rec[0], PhillyTimeLayout)}
	}
	dur, err := parseSeconds(rec[1], false)
	if err != nil {
		return Job{}, &RowError{Column: "duration", Err: err}
	}
	gpus, err := parsePositiveInt(rec[2])
	if err != nil {
		return Job{}, &RowError{Column: "num_gpus", Err: err}
	}
	if _, err := parseNonNegFloat(rec[3]); err != nil {
		return Job{}, &RowError{Column: "gpu_time", Err: err}
	}
	project := strings.TrimSpace(rec[4])
	if project == "" {
		return Job{}, &RowError{Column: "cluster", Err: errors.New("empty cluster (project) name")}
	}
	return Job{
		ID:       "philly-" + strconv.Itoa(line),
		Submit:   ts.Unix(),
		Duration: dur,
		GPUs:     gpus,
		Project:  project,
	}, nil
}

// GenericColumns is the header of the generic CSV format, in order.
var GenericColumns = []string{"id", "submit_s", "duration_s", "gpus", "project", "tier", "preemptible", "walltime_s"}

type genericParser struct{}

func (genericParser) header(cols []string) error {
	if len(cols) != len(GenericColumns) {
		return fmt.Errorf("generic header has %d columns, want %d (%s)", len(cols), len(GenericColumns), strings.Join(GenericColumns, ","))
	}
	for i, c := range cols {
		if strings.TrimSpace(c) != GenericColumns[i] {
			return fmt.Errorf("generic header column %d is %q, want %q", i+1, c, GenericColumns[i])
		}
	}
	return nil
}

func (genericParser) row(rec []string, line int) (Job, error) {
	if len(rec) != len(GenericColumns) {
		return Job{}, fmt.Errorf("row has %d fields, want %d", len(rec), len(GenericColumns))
	}
	var j Job
	j.ID = strings.TrimSpace(rec[0])
	if j.ID == "" {
		return Job{}, &RowError{Column: "id", Err: errors.New("empty job id")}
	}
	sub, err := parseSeconds(rec[1], true)
	if err != nil {
		return Job{}, &RowError{Column: "submit_s", Err: err}
	}
	j.Submit = sub
	if j.Duration, err = parseSeconds(rec[2], false); err != nil {
		return Job{}, &RowError{Column: "duration_s", Err: err}
	}
	if j.GPUs, err = parsePositiveInt(rec[3]); err != nil {
		return Job{}, &RowError{Column: "gpus", Err: err}
	}
	j.Project = strings.TrimSpace(rec[4])
	j.Tier = strings.TrimSpace(rec[5])
	if j.Tier != "" && tierIndex(j.Tier) < 0 {
		// Told here, with the row, not after the whole file is read: in
		// row order among the other bad rows, and skipped by SkipBad.
		return Job{}, &RowError{Column: "tier", Err: unknownTier(j.Tier)}
	}
	if s := strings.TrimSpace(rec[6]); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return Job{}, &RowError{Column: "preemptible", Err: fmt.Errorf("%q is not true or false", s)}
		}
		j.Preemptible = &b
	}
	if s := strings.TrimSpace(rec[7]); s != "" {
		if j.Walltime, err = parseSeconds(s, false); err != nil {
			return Job{}, &RowError{Column: "walltime_s", Err: err}
		}
	}
	return j, nil
}

// parseSeconds reads a number of seconds (fractions are rounded up, so a
// job never runs shorter than its trace says).
func parseSeconds(s string, allowZero bool) (int64, error) {
	f, err := parseNonNegFloat(s)
	if err != nil {
		return 0, err
	}
	if f == 0 && !allowZero {
		return 0, fmt.Errorf("%q must be greater than zero", s)
	}
	if f > 1e15 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(math.Ceil(f)), nil
}

func parseNonNegFloat(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty value")
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if f < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	return f, nil
}

func parsePositiveInt(s string) (int, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.Atoi(s)
	if err != nil {
		// Accept "8.0" as written by some exporters, but not "8.5".
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || f != math.Trunc(f) || f > math.MaxInt32 {
			return 0, fmt.Errorf("%q is not a whole number", s)
		}
		n = int(f)
	}
	if n <= 0 {
		return 0, fmt.Errorf("%q must be at least 1", s)
	}
	return n, nil
}

// ParseTimeBound reads a --from/--to value for format. Philly accepts a date
// (YYYY-MM-DD) or an RFC 3339 time; generic traces take seconds. With end
// set, a date-only value means the end of that day, so `--to 2017-10-22`
// includes jobs submitted on the 22nd.
func ParseTimeBound(format Format, s string, end bool) (int64, error) {
	s = strings.TrimSpace(s)
	if format == FormatGeneric {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a number of seconds (generic traces use submit_s seconds)", s)
		}
		return int64(math.Ceil(f)), nil
	}
	if d, err := time.ParseInLocation("2006-01-02", s, time.UTC); err == nil {
		if end {
			d = d.Add(24 * time.Hour)
		}
		return d.Unix(), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.Unix(), nil
	}
	if t, err := time.ParseInLocation(PhillyTimeLayout, s, time.UTC); err == nil {
		return t.Unix(), nil
	}
	return 0, fmt.Errorf("%q is not a date (YYYY-MM-DD) or RFC 3339 time", s)
}
