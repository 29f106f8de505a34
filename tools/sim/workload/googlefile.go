package workload

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
)

// googleRow is one line of a Google trace file, split at its commas.
// The fields point into the reader's buffer until the next line.
type googleRow struct {
	file   string
	line   int
	fields [googleFields][]byte
}

// readGoogleFile streams a gzip-compressed Google trace table and calls
// row for each line; an error from row ends the reading and comes back.
func readGoogleFile(path string, row func(*googleRow) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(bufio.NewReaderSize(f, 64<<10))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	br := bufio.NewReaderSize(zr, 64<<10)
	r := &googleRow{file: path}
	for {
		text, err := br.ReadSlice('\n')
		if len(text) > 0 {
			r.line++
			if errors.Is(err, bufio.ErrBufferFull) {
				return &RowError{File: path, Line: r.line, Err: errors.New("line longer than 64 KiB")}
			}
			if err := r.split(bytes.TrimSuffix(text, []byte("\n"))); err != nil {
				return err
			}
			if err := row(r); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: line %d: %w", path, r.line+1, err)
		}
	}
}

func (r *googleRow) split(text []byte) error {
	if n := bytes.Count(text, []byte(",")) + 1; n != googleFields {
		return &RowError{File: r.file, Line: r.line, Err: fmt.Errorf("%d fields, want %d", n, googleFields)}
	}
	for i := range googleFields - 1 {
		j := bytes.IndexByte(text, ',')
		r.fields[i], text = text[:j], text[j+1:]
	}
	r.fields[googleFields-1] = text
	return nil
}

func (r *googleRow) errorf(col int, format string, args ...any) error {
	return &RowError{File: r.file, Line: r.line, Column: col + 1, Name: googleColumns[col], Err: fmt.Errorf(format, args...)}
}

// int reads a required integer field that fits in bits.
func (r *googleRow) int(col, bits int) (int64, error) {
	f := r.fields[col]
	if len(f) == 0 {
		return 0, r.errorf(col, "missing")
	}
	v, err := strconv.ParseInt(string(f), 10, bits)
	if err != nil {
		return 0, r.errorf(col, "%q is not an integer of %d bits", f, bits)
	}
	return v, nil
}

// float reads an optional number; ok is false when the field is empty.
func (r *googleRow) float(col int) (v float64, ok bool, err error) {
	f := r.fields[col]
	if len(f) == 0 {
		return 0, false, nil
	}
	v, err = strconv.ParseFloat(string(f), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false, r.errorf(col, "%q is not a number", f)
	}
	return v, true, nil
}
