package workload

import (
	"compress/gzip"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
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
	}
	return j, err
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

// parseLabels reads "k=v;k=v"; "" is no labels.
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
		labels[k] = strings.TrimSpace(v)
	}
	return labels, nil
}

// formatLabels writes labels as parseLabels reads them, sorted by key.
func formatLabels(labels map[string]string) string {
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
		rec[colDistinct], rec[colLabels] = strconv.FormatBool(j.DistinctMachines), formatLabels(j.MatchLabels)
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
