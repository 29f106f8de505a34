package workload

import (
	"bytes"
	"compress/gzip"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The generic CSV format's columns (see the package comment).
const (
	colSubmit = iota
	colJob
	colIndex
	colCPU
	colMemory
	colDuration
	colPriority
	colType
	colDistinct // optional
	colLabels   // optional
	numColumns
)

var csvColumns = [numColumns]string{"submit_time", "job", "task_index", "cpu", "memory", "duration",
	"priority", "type", "distinct_machines", "match_labels"}

// CSVReader streams a workload in the generic CSV format, one job per
// Next. It is a Source; Close it when done.
type CSVReader struct {
	file string
	f    *os.File
	r    *csv.Reader
	// at is each column's position in a row; -1 for an absent optional
	// column.
	at [numColumns]int
	// ahead is the first row of the next job, read with the previous job.
	ahead *csvRow
	// started maps each job read to the line of its first row.
	started map[string]int
	indices map[int32]int // the current job's task indices → their lines
	last    time.Duration
	err     error // final
	// rows, jobs and tasks read (the rows of the jobs handed out), and
	// the first and last of those jobs' submit times.
	rows, jobs, tasks int
	first, lastJob    time.Duration
}

var _ Source = (*CSVReader)(nil)

// csvRow is one parsed row: its job's fields and its task.
type csvRow struct {
	line   int
	job    Job    // without Tasks
	labels string // match_labels as written, to compare a job's rows
	task   Task
}

// OpenCSV opens a generic CSV workload (gzip-compressed if the name ends
// in .gz) and reads its header.
func OpenCSV(path string) (*CSVReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	var in io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		if in, err = gzip.NewReader(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	r := &CSVReader{file: path, f: f, r: csv.NewReader(in), started: map[string]int{}, indices: map[int32]int{}}
	r.r.Comment, r.r.TrimLeadingSpace, r.r.ReuseRecord = '#', true, true
	if err := r.header(); err != nil {
		f.Close()
		return nil, err
	}
	return r, nil
}

// Close closes the file.
func (r *CSVReader) Close() error { return r.f.Close() }

func (r *CSVReader) header() error {
	names, err := r.r.Read()
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: no header row", r.file)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", r.file, err)
	}
	line, _ := r.r.FieldPos(0)
	for i := range r.at {
		r.at[i] = -1
	}
	for pos, name := range names {
		col := slices.Index(csvColumns[:], strings.TrimSpace(name))
		switch {
		case col < 0:
			return &RowError{File: r.file, Line: line, Column: pos + 1, Name: name,
				Err: fmt.Errorf("unknown column; the columns are %s", strings.Join(csvColumns[:], ", "))}
		case r.at[col] >= 0:
			return &RowError{File: r.file, Line: line, Column: pos + 1, Name: name, Err: errors.New("column named twice")}
		}
		r.at[col] = pos
	}
	for col, pos := range r.at[:colDistinct] {
		if pos < 0 {
			return &RowError{File: r.file, Line: line, Err: fmt.Errorf("header lacks column %s", csvColumns[col])}
		}
	}
	return nil
}

// Next reads the next job: the rows that follow with its job ID.
func (r *CSVReader) Next() (Job, error) {
	if r.err != nil {
		return Job{}, r.err
	}
	j, err := r.next()
	if err != nil {
		r.err = err
		return j, err
	}
	if r.jobs == 0 {
		r.first = j.Submit
	}
	r.lastJob = j.Submit
	r.jobs++
	r.tasks += len(j.Tasks)
	r.rows += len(j.Tasks)
	return j, nil
}

// Report says what has been handed out so far: rows (events), the first
// and last submit times, jobs and tasks, all in the window [0, end).
func (r *CSVReader) Report() *Report {
	return &Report{Trace: "CSV trace " + r.file, Events: r.rows, First: r.first, Last: r.lastJob, InWindow: r.rows,
		Jobs: r.jobs, Tasks: r.tasks}
}

// ReadCSV reads a generic CSV trace whole and keeps the jobs submitted
// in the window [from, to) (to 0: to the end), moved to start at 0. A
// CSV trace does not say when its tasks ran, so its window starts empty:
// the jobs submitted before it are left out (the Report counts them).
// A window that starts after the last submission, or in which no job is
// submitted, is an error (ErrWindow).
func ReadCSV(path string, from, to time.Duration) (*Trace, error) {
	if from < 0 || to < 0 || (to > 0 && to <= from) {
		return nil, fmt.Errorf("window from %v to %v: need 0 <= from < to (or to 0, the end)", from, to)
	}
	r, err := OpenCSV(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	t := &Trace{}
	skipped := map[string]Skip{}
	for {
		j, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		reason := ""
		switch {
		case j.Submit < from:
			reason = SkipBefore
		case to > 0 && j.Submit >= to:
			reason = SkipAfter
		default:
			j.Submit -= from
			t.Jobs = append(t.Jobs, j)
			t.Report.Tasks += len(j.Tasks)
			continue
		}
		s := skipped[reason]
		s.Events += len(j.Tasks) // a row per task
		s.Tasks += len(j.Tasks)
		skipped[reason] = s
	}
	rep := r.Report()
	switch {
	case rep.Events == 0:
		return nil, fmt.Errorf("%s: no rows after the header", path)
	case from > rep.Last:
		return nil, fmt.Errorf("%s: %w: it starts at %v, after the last submission, at %v", path, ErrWindow, from, rep.Last)
	case len(t.Jobs) == 0:
		end := "the end"
		if to > 0 {
			end = to.String()
		}
		return nil, fmt.Errorf("%s: %w: no job is submitted in [%v, %s) (submissions from %v to %v)", path, ErrWindow, from, end, rep.First, rep.Last)
	}
	rep.From, rep.To, rep.Jobs, rep.InWindow = from, to, len(t.Jobs), t.Report.Tasks
	rep.Tasks = t.Report.Tasks
	rep.Skipped = skips([]string{SkipBefore, SkipAfter}, skipped)
	t.Report = *rep
	return t, nil
}

func (r *CSVReader) next() (Job, error) {
	first := r.ahead
	r.ahead = nil
	if first == nil {
		var err error
		if first, err = r.row(); err != nil {
			return Job{}, err
		}
	}
	if line, ok := r.started[first.job.ID]; ok {
		return Job{}, r.errorf(first.line, colJob, "job %q started at line %d: a job's rows must be contiguous", first.job.ID, line)
	}
	r.started[first.job.ID] = first.line
	clear(r.indices)
	j, row := first.job, first
	for {
		if line, ok := r.indices[row.task.Index]; ok {
			return Job{}, r.errorf(row.line, colIndex, "task %d of job %q is also at line %d", row.task.Index, j.ID, line)
		}
		r.indices[row.task.Index] = row.line
		j.Tasks = append(j.Tasks, row.task)

		next, err := r.row()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Job{}, err
		}
		if next.job.ID != j.ID {
			r.ahead = next
			break
		}
		if err := r.sameJob(first, next); err != nil {
			return Job{}, err
		}
		row = next
	}
	return j, nil
}

// sameJob checks that a row repeats the job fields of the job's first.
func (r *CSVReader) sameJob(first, row *csvRow) error {
	col := -1
	switch a, b := first.job, row.job; {
	case a.Submit != b.Submit:
		col = colSubmit
	case a.Type != b.Type:
		col = colType
	case a.Priority != b.Priority:
		col = colPriority
	case a.DistinctMachines != b.DistinctMachines:
		col = colDistinct
	case first.labels != row.labels:
		col = colLabels
	default:
		return nil
	}
	return r.errorf(row.line, col, "differs from the first row of job %q (line %d)", row.job.ID, first.line)
}

// row reads and parses one row.
func (r *CSVReader) row() (*csvRow, error) {
	rec, err := r.r.Read()
	if errors.Is(err, io.EOF) {
		return nil, io.EOF
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.file, err)
	}
	line, _ := r.r.FieldPos(0)
	row := &csvRow{line: line}
	field := func(col int) string {
		if r.at[col] < 0 {
			return ""
		}
		return strings.TrimSpace(rec[r.at[col]])
	}
	// amount parses a non-negative number of units.
	amount := func(col int, unit float64) (int64, error) {
		v, err := strconv.ParseFloat(field(col), 64)
		if err != nil {
			return 0, r.errorf(line, col, "%q is not a number", field(col))
		}
		n, err := toUnits(v, unit)
		if err != nil {
			return 0, r.errorf(line, col, "%w", err)
		}
		return n, nil
	}

	j, t := &row.job, &row.task
	if j.ID = field(colJob); j.ID == "" {
		return nil, r.errorf(line, colJob, "empty")
	}
	if err := checkJobID(j.ID); err != nil {
		return nil, r.errorf(line, colJob, "%w", err)
	}
	submit, err := amount(colSubmit, 1e9)
	if err != nil {
		return nil, err
	}
	if j.Submit = time.Duration(submit); j.Submit < r.last {
		return nil, r.errorf(line, colSubmit, "%v is before the previous row's %v: rows must be in submit order", j.Submit, r.last)
	}
	r.last = j.Submit
	index, err := strconv.ParseInt(field(colIndex), 10, 32)
	if err != nil || index < 0 {
		return nil, r.errorf(line, colIndex, "%q is not a non-negative 32-bit integer", field(colIndex))
	}
	t.Index = int32(index)
	if t.CPU, err = amount(colCPU, 1000); err != nil {
		return nil, err
	}
	if t.Memory, err = amount(colMemory, 1<<30); err != nil {
		return nil, err
	}
	if field(colDuration) != "" {
		d, err := amount(colDuration, 1e9)
		if err != nil {
			return nil, err
		}
		if d == 0 {
			return nil, r.errorf(line, colDuration, "must be positive (leave it empty for until the end)")
		}
		t.Duration = time.Duration(d)
	}
	priority, err := strconv.ParseInt(field(colPriority), 10, 32)
	if err != nil {
		return nil, r.errorf(line, colPriority, "%q is not a 32-bit integer", field(colPriority))
	}
	if priority < 0 || priority > MaxPriority {
		return nil, r.errorf(line, colPriority, "%d is not in [0, %d] (Troupe's scale, a job's spec.priority)", priority, MaxPriority)
	}
	j.Priority = int32(priority)
	if j.Type, err = ParseType(field(colType)); err != nil {
		return nil, r.errorf(line, colType, "%w", err)
	}
	if s := field(colDistinct); s != "" {
		if j.DistinctMachines, err = strconv.ParseBool(s); err != nil {
			return nil, r.errorf(line, colDistinct, "%q is not true, false, 1 or 0", s)
		}
	}
	row.labels = field(colLabels)
	if j.MatchLabels, err = parseLabels(row.labels); err != nil {
		return nil, r.errorf(line, colLabels, "%w", err)
	}
	return row, nil
}

func (r *CSVReader) errorf(line, col int, format string, args ...any) error {
	return &RowError{File: r.file, Line: line, Column: r.at[col] + 1, Name: csvColumns[col], Err: fmt.Errorf(format, args...)}
}

// parseLabels reads "k=v;k=v"; "" is no labels. Keys and values follow
// the cell's label rules (checkLabel).
func parseLabels(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	labels := map[string]string{}
	for pair := range strings.SplitSeq(s, ";") {
		k, v, ok := strings.Cut(pair, "=")
		if k = strings.TrimSpace(k); !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", pair)
		}
		if _, dup := labels[k]; dup {
			return nil, fmt.Errorf("label %q is set twice", k)
		}
		v = strings.TrimSpace(v)
		if err := checkLabel(k, v); err != nil {
			return nil, err
		}
		labels[k] = v
	}
	return labels, nil
}

// The cell's rules for names (clientlib's validation, which every object
// the simulator writes goes through): a job's ID is part of its tasks'
// names, <job>-<index>, which are DNS subdomains of at most 253
// characters; label keys are [prefix/]name and values at most 63
// characters of letters, digits, '-', '_' and '.'.
var (
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	labelName    = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
)

// MaxJobID is the longest job ID a trace may give: its tasks' names
// (<job>-<index>, and <job>.<k>-<index> for the store runner's jobs of
// one request shape each) stay within an object name's 253 characters.
const MaxJobID = 200

// MaxPriority is the highest priority on Troupe's scale (a Job's
// spec.priority is in [0, 1000]).
const MaxPriority = 1000

// checkJobID checks a job ID against the cell's rules for names.
func checkJobID(id string) error {
	if len(id) > MaxJobID || !dnsSubdomain.MatchString(id) {
		return fmt.Errorf("job ID %q: must be 1-%d lowercase letters, digits, '-' and '.', each '.'-separated part starting and ending with a letter or digit (a DNS subdomain, as its tasks' names <job>-<index> are)", id, MaxJobID)
	}
	return nil
}

// checkLabel checks a label selector's key and value.
func checkLabel(k, v string) error {
	name := k
	if prefix, rest, ok := strings.Cut(k, "/"); ok {
		if name = rest; len(prefix) > 253 || !dnsSubdomain.MatchString(prefix) {
			return fmt.Errorf("label %q: its prefix must be a DNS subdomain", k)
		}
	}
	if len(name) > 63 || !labelName.MatchString(name) {
		return fmt.Errorf("label %q: its name must be 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", k)
	}
	if v != "" && (len(v) > 63 || !labelName.MatchString(v)) {
		return fmt.Errorf("label %s=%s: the value must be at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", k, v)
	}
	return nil
}

// LoadCell reads the cell a trace is replayed on from a YAML (or JSON)
// file's cell: section, as a synthetic config gives it (shapes with
// counts, CPU, memory and labels; zones): a file of its own, or a
// synthetic config whose cell is wanted (its other sections are not
// read). Unknown fields in the section are errors.
func LoadCell(path string) (CellConfig, error) {
	var f struct {
		Cell *CellConfig          `yaml:"cell"`
		Rest map[string]yaml.Node `yaml:",inline"`
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return CellConfig{}, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("empty file")
		}
		return CellConfig{}, fmt.Errorf("%s: %w", path, err)
	}
	if f.Cell == nil {
		return CellConfig{}, fmt.Errorf("%s: no cell: section (cell: {shapes: [{name, count, cpu_cores, memory_gib, labels}], zones})", path)
	}
	if err := f.Cell.Validate(); err != nil {
		return CellConfig{}, fmt.Errorf("%s: cell: %w", path, err)
	}
	return *f.Cell, nil
}

// FormatLabels writes labels as the CSV format's match_labels column
// holds them (k=v;k=v), sorted by key.
func FormatLabels(labels map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if b.Len() > 0 {
			b.WriteByte(';')
		}
		b.WriteString(k + "=" + labels[k])
	}
	return b.String()
}

// WriteCSV writes src in the generic CSV format, all columns, and
// returns the number of jobs written. Amounts that came from the format
// read back the same.
func WriteCSV(w io.Writer, src Source) (int, error) {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvColumns[:]); err != nil {
		return 0, err
	}
	num := func(v int64, unit float64) string { return strconv.FormatFloat(float64(v)/unit, 'f', -1, 64) }
	rec := make([]string, numColumns)
	for n := 0; ; n++ {
		j, err := src.Next()
		if errors.Is(err, io.EOF) {
			cw.Flush()
			return n, cw.Error()
		}
		if err != nil {
			return n, err
		}
		rec[colSubmit], rec[colJob] = num(int64(j.Submit), 1e9), j.ID
		rec[colPriority], rec[colType] = strconv.Itoa(int(j.Priority)), j.Type.String()
		rec[colDistinct], rec[colLabels] = strconv.FormatBool(j.DistinctMachines), FormatLabels(j.MatchLabels)
		for _, t := range j.Tasks {
			rec[colIndex], rec[colCPU], rec[colMemory] = strconv.Itoa(int(t.Index)), num(t.CPU, 1000), num(t.Memory, 1<<30)
			rec[colDuration] = ""
			if t.Duration > 0 {
				rec[colDuration] = num(int64(t.Duration), 1e9)
			}
			if err := cw.Write(rec); err != nil {
				return n, err
			}
		}
	}
}
