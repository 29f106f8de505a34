package workload

import "fmt"

// RowError is a malformed row of a trace file: which file, line (from
// 1, in the decompressed text) and column (from 1, with its name).
type RowError struct {
	File   string
	Line   int
	Column int
	Name   string
	Err    error
}

func (e *RowError) Error() string {
	if e.Column == 0 {
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	}
	return fmt.Sprintf("%s:%d: column %d (%s): %v", e.File, e.Line, e.Column, e.Name, e.Err)
}

func (e *RowError) Unwrap() error { return e.Err }
