package clienttest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Garbage is a value that no kind decodes: its first field's length runs
// past its end.
var Garbage = []byte("\x0a\x7fnot a protobuf")

// PutRaw writes value at key in a commit of its own, as a client using the
// store's API directly may (an untyped put: no encoding, no validation),
// and returns the key's new version.
func PutRaw(ctx context.Context, t testing.TB, s clientlib.Store, key string, value []byte) uint64 {
	t.Helper()
	tx := clientlib.NewTxn(s)
	tx.Group().Put(key, value)
	out, err := tx.Commit(ctx)
	if err == nil {
		err = out.Err()
	}
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return out.Groups[0].Revision
}

// Encoded returns obj's stored form, unvalidated: an invalid object as a
// client bypassing clientlib could write it.
func Encoded[T clientlib.Object](t testing.TB, obj T) []byte {
	t.Helper()
	b, err := clientlib.Encode(obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Reports are how a reader reported the unreadable value at a key: the
// errors it logged naming the key, and the Unreadable events its recorder
// wrote about it.
type Reports struct {
	Logged int
	// Recorded sums the counts of the events (repeats aggregate).
	Events, Recorded int
}

// Reported returns how the reader logging to logs and recording events as
// source ("": no recorder) reported the unreadable value at key.
func Reported(ctx context.Context, t testing.TB, s clientlib.Store, logs *observer.ObservedLogs, key, source string) Reports {
	t.Helper()
	r := Reports{Logged: logs.FilterLevelExact(zap.ErrorLevel).FilterField(zap.String("key", key)).Len()}
	if source == "" {
		return r
	}
	for _, k := range []clientlib.Kind[*troupev1.Event]{clientlib.Events, clientlib.MachineEvents} {
		events, _, err := clientlib.List(ctx, s, k, "")
		if err != nil && !errors.Is(err, clientlib.ErrUnreadable) {
			t.Fatal(err)
		}
		for _, e := range events {
			if e.GetReason() == clientlib.ReasonUnreadable && e.GetSource() == source && strings.Contains(e.GetMessage(), key) {
				r.Events++
				r.Recorded += int(e.GetCount())
			}
		}
	}
	return r
}

// WaitReported waits until the reader logging to logs and recording
// events as source ("": no recorder) has reported the unreadable value at
// each of keys, and fails t if ctx ends first.
func WaitReported(ctx context.Context, t testing.TB, s clientlib.Store, logs *observer.ObservedLogs, source string, keys ...string) {
	t.Helper()
	Until(ctx, t, func() error {
		for _, key := range keys {
			if r := Reported(ctx, t, s, logs, key, source); r.Logged == 0 || source != "" && r.Events == 0 {
				return fmt.Errorf("%s not reported yet: %+v", key, r)
			}
		}
		return nil
	})
}

// CheckReportedOnce fails t unless the reader reported the unreadable
// value at each of keys once: one error logged and, with a source, one
// event recorded once.
func CheckReportedOnce(ctx context.Context, t testing.TB, s clientlib.Store, logs *observer.ObservedLogs, source string, keys ...string) {
	t.Helper()
	want := Reports{Logged: 1}
	if source != "" {
		want.Events, want.Recorded = 1, 1
	}
	for _, key := range keys {
		if r := Reported(ctx, t, s, logs, key, source); r != want {
			t.Errorf("%s reported %+v, want %+v", key, r, want)
		}
	}
}

// Until polls cond until it returns nil, and fails t with cond's last
// error if ctx ends first: wait.Until without a name for what it awaits
// (prefer that, which names it in the failure).
func Until(ctx context.Context, t testing.TB, cond func() error) {
	t.Helper()
	wait.Until(ctx, t, "the condition", cond)
}

// Observed starts a cell for a test of what a reader does with values it
// cannot read: the cell, an admin client of it, and a logger whose
// entries (Info and above) logs holds.
func Observed(ctx context.Context, t testing.TB) (*Store, *clientlib.Client, *zap.Logger, *observer.ObservedLogs) {
	t.Helper()
	cell := Start(ctx, t)
	core, logs := observer.New(zap.InfoLevel)
	return cell, cell.Client(), zap.New(core), logs
}
