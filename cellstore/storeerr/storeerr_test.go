package storeerr_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// overTheWire sends err as a gRPC server does (status.FromError, the
// status proto marshalled) and returns what a client call would return.
func overTheWire(t *testing.T, err error) error {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("%v is not a gRPC status error", err)
	}
	b, merr := proto.Marshal(st.Proto())
	if merr != nil {
		t.Fatal(merr)
	}
	var p spb.Status
	if uerr := proto.Unmarshal(b, &p); uerr != nil {
		t.Fatal(uerr)
	}
	return status.FromProto(&p).Err()
}

// Every definition crosses gRPC, bare, with detail and wrapped, keeping
// its code and message, and is matched after as itself and as no other.
func TestDefinitionsRoundTrip(t *testing.T) {
	defs := storeerr.All()
	if len(defs) < 30 {
		t.Fatalf("%d definitions", len(defs))
	}
	reasons := map[string]bool{}
	for _, def := range defs {
		if reasons[def.Reason()] || def.Reason() == "" || def.Code() == codes.OK {
			t.Fatalf("%s: reason used twice, empty, or code OK (%s)", def.Reason(), def.Code())
		}
		reasons[def.Reason()] = true
	}
	for _, def := range defs {
		for name, tc := range map[string]struct {
			err     error
			message string
		}{
			"bare":        {def, def.Error()},
			"with detail": {def.With("shard %d", 7), def.Error() + ": shard 7"},
			"wrapped":     {fmt.Errorf("backup: %w", def.With("shard %d", 7)), "backup: rpc error: code = " + def.Code().String() + " desc = " + def.Error() + ": shard 7"},
		} {
			what := def.Reason() + " " + name
			if !storeerr.Is(tc.err, def) || !errors.Is(tc.err, def) {
				t.Errorf("%s: not matched before sending: %v", what, tc.err)
			}
			got := overTheWire(t, tc.err)
			st := status.Convert(got)
			if st.Code() != def.Code() || st.Message() != tc.message {
				t.Errorf("%s: received %s %q, want %s %q", what, st.Code(), st.Message(), def.Code(), tc.message)
			}
			if storeerr.Of(got) != def || !storeerr.Is(fmt.Errorf("clientlib: %w", got), def) {
				t.Errorf("%s: received %v, matched as %v", what, got, storeerr.Of(got))
			}
			conv := storeerr.FromError(got)
			if !errors.Is(conv, def) || conv.Error() != got.Error() || status.Code(conv) != def.Code() {
				t.Errorf("%s: converted %v to %v", what, got, conv)
			}
			for _, other := range defs {
				if other != def && (storeerr.Is(got, other) || errors.Is(conv, other)) {
					t.Errorf("%s: matches %s too", what, other.Reason())
				}
			}
		}
	}
}

// An occurrence prints like the gRPC status error it is sent as.
func TestOccurrencePrintsAsStatus(t *testing.T) {
	err := storeerr.OverLimit.With("commit: %d groups, limit %d", 9, 8)
	want := status.Error(codes.InvalidArgument, "request over a limit: commit: 9 groups, limit 8").Error()
	if err.Error() != want {
		t.Fatalf("%q, want %q", err.Error(), want)
	}
}

// Errors the store does not define go through FromError unchanged and
// match nothing.
func TestForeignErrors(t *testing.T) {
	plain := status.Error(codes.Unavailable, "connection refused")
	other := overTheWire(t, status.Convert(plain).Err())
	for _, err := range []error{nil, plain, other, context.Canceled, errors.New("x"), fmt.Errorf("w: %w", plain)} {
		if got := storeerr.FromError(err); got != err {
			t.Errorf("FromError(%v) = %v", err, got)
		}
		if def := storeerr.Of(err); def != nil {
			t.Errorf("%v matched as %s", err, def.Reason())
		}
	}
	if storeerr.Is(nil, nil) || storeerr.Is(plain, nil) {
		t.Error("matched a nil definition")
	}
}

// A compacted watch carries its CompactedDetail to the client.
func TestWatchCompacted(t *testing.T) {
	d := &storev1.CompactedDetail{Shard: 2, RequestedRevision: 4, OldestRevision: 16, OldestCursor: []byte{1, 2}}
	got := overTheWire(t, storeerr.WatchCompacted(d))
	if !storeerr.Is(got, storeerr.Compacted) || status.Code(got) != codes.OutOfRange {
		t.Fatalf("received %v", got)
	}
	if cd := storeerr.CompactedDetailOf(fmt.Errorf("watch: %w", got)); !proto.Equal(cd, d) {
		t.Fatalf("detail %v, want %v", cd, d)
	}
	if msg := status.Convert(got).Message(); !strings.Contains(msg, "shard 2: revision 4 is compacted; oldest kept is 16") {
		t.Fatalf("message %q", msg)
	}
	if cd := storeerr.CompactedDetailOf(storeerr.Compacted.With("x")); cd != nil {
		t.Fatalf("detail %v on an occurrence without one", cd)
	}
}
