//go:build !linux

package node

import "errors"

// allocate is Linux's fallocate; elsewhere tan keeps its own way.
func allocate(int, int64) error { return errors.ErrUnsupported }
