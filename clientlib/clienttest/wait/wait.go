// Package wait is how tests wait for something to happen without
// sleeping: they poll a condition until it holds, in a bounded loop.
//
//	wait.Until(ctx, t, "node 2 to lead shard 0", func() (bool, string) {
//		l, ok := leader(0)
//		return ok && l == 2, fmt.Sprintf("leader %d (known %v)", l, ok)
//	})
//
// The condition is looked at right away, then after pauses of 1 ms, 2 ms,
// ... up to MaxInterval, until it holds (Until returns) or time is up:
// ctx ends, or DefaultTimeout passes when ctx has no deadline. Then Until
// fails the test with a message naming what was awaited, how long, and
// what the condition saw last. Poll is the same loop returning an error,
// for goroutines other than the test's, which must not fail the test.
//
// A condition is one of
//
//	func() bool           // holds or not
//	func() (bool, string) // holds or not, and what it saw
//	func() error          // nil: holds; otherwise what it saw
//
// It runs on the caller's goroutine, one call at a time.
//
// The package imports only the standard library, so the tests of every
// package of the module, in-package tests of the store included, can use
// it without an import cycle.
package wait

import (
	"context"
	"fmt"
	"testing"
	"time"
)

const (
	// DefaultTimeout bounds a wait whose context has no deadline.
	DefaultTimeout = 10 * time.Second
	// MaxInterval is the longest pause between two looks at a condition.
	MaxInterval = 10 * time.Millisecond
	// firstInterval is the pause after the first look.
	firstInterval = time.Millisecond
)

// Cond is the type of a condition that Until and Poll wait for.
type Cond interface {
	func() bool | func() (bool, string) | func() error
}

// Until polls cond until it holds, failing t (from the test's goroutine)
// when ctx ends first or, if ctx has no deadline, after DefaultTimeout.
// what names what is awaited in the failure ("node 2 to lead shard 0").
func Until[C Cond](ctx context.Context, t testing.TB, what string, cond C) {
	t.Helper()
	if err := Poll(ctx, what, cond); err != nil {
		t.Fatal(err)
	}
}

// Poll polls cond until it holds (nil) or ctx ends first or, if ctx has
// no deadline, DefaultTimeout passes: then the error names what, says
// what cond saw last and wraps ctx's error.
func Poll[C Cond](ctx context.Context, what string, cond C) error {
	look := observe(cond)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	start := time.Now()
	interval := firstInterval
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		ok, saw := look()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			waited := time.Since(start).Round(time.Millisecond)
			if saw == "" {
				return fmt.Errorf("gave up waiting for %s after %v: %w", what, waited, ctx.Err())
			}
			return fmt.Errorf("gave up waiting for %s after %v: %w; last saw: %s", what, waited, ctx.Err(), saw)
		case <-timer.C:
		}
		interval = min(2*interval, MaxInterval)
		timer.Reset(interval)
	}
}

// observe returns cond as a look that says whether it holds and what it
// saw.
func observe[C Cond](cond C) func() (bool, string) {
	switch c := any(cond).(type) {
	case func() bool:
		return func() (bool, string) { return c(), "" }
	case func() (bool, string):
		return c
	case func() error:
		return func() (bool, string) {
			if err := c(); err != nil {
				return false, err.Error()
			}
			return true, ""
		}
	}
	panic(fmt.Sprintf("wait: condition of type %T", cond)) // Cond admits no other type
}
