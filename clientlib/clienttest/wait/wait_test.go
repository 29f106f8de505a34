package wait

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Each kind of condition is polled until it holds, and no longer.
func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	Until(t.Context(), t, "a bool", func() bool { return n.Add(1) == 3 })
	if got := n.Load(); got != 3 {
		t.Fatalf("looked %d times, want 3", got)
	}
	n.Store(0)
	Until(t.Context(), t, "a bool and what it saw", func() (bool, string) {
		return n.Add(1) == 3, fmt.Sprint("look ", n.Load())
	})
	if got := n.Load(); got != 3 {
		t.Fatalf("looked %d times, want 3", got)
	}
	n.Store(0)
	Until(t.Context(), t, "an error", func() error {
		if n.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if got := n.Load(); got != 3 {
		t.Fatalf("looked %d times, want 3", got)
	}
}

// recorder is a testing.TB that keeps what Fatal says.
type recorder struct {
	testing.TB
	fatal string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatal(args ...any) { r.fatal = fmt.Sprint(args...) }

// When time is up, Until fails the test naming what it waited for and
// what the condition saw last; Poll's error wraps the context's.
func TestUntilFailsNamingWhatItAwaited(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	r := &recorder{TB: t}
	Until(ctx, r, "the moon", func() (bool, string) { return false, "only stars" })
	for _, want := range []string{"the moon", "only stars", "deadline exceeded"} {
		if !strings.Contains(r.fatal, want) {
			t.Errorf("failure %q does not say %q", r.fatal, want)
		}
	}
	err := Poll(ctx, "the sun", func() error { return errors.New("night") })
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "the sun") || !strings.Contains(err.Error(), "night") {
		t.Errorf("Poll after the deadline: %v", err)
	}
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Poll(canceled, "anything", func() bool { return false }); !errors.Is(err, context.Canceled) {
		t.Errorf("Poll with a canceled context: %v", err)
	}
}
