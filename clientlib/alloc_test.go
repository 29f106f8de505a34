package clientlib_test

import (
	"math"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Unbind deletes a bound task's Binding and gives its requests back, and
// returns a copy without binding, bound or not: changing it leaves the
// task given (a cached object) as it was.
func TestUnbind(t *testing.T) {
	ctx := t.Context()
	s := newMem()
	commit := func(tx *clientlib.Txn) {
		t.Helper()
		out, err := tx.Commit(ctx)
		if err == nil {
			err = out.Err()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	bound := sampleTask()
	seed := clientlib.NewTxn(s)
	g := seed.Group().Put(clientlib.BindingKey(bound), []byte("binding"))
	for r, v := range bound.GetSpec().GetTemplate().GetRequests() {
		g.Add(clientlib.AllocKey("m1", r), v, 0, math.MaxInt64)
	}
	commit(seed)

	tx := clientlib.NewTxn(s)
	u := clientlib.Unbind(tx.Group(), bound)
	if u == bound || u.GetBinding() != nil || bound.GetBinding().GetMachine() != "m1" {
		t.Fatalf("Unbind of a bound task returned %v (given %p, got %p); want a copy without binding, the task given kept", u, bound, u)
	}
	want := proto.Clone(bound).(*troupev1.Task)
	want.Binding = nil
	if !proto.Equal(u, want) {
		t.Fatalf("Unbind changed more than the binding: %v", u)
	}
	commit(tx)
	if kv, err := s.Get(ctx, clientlib.BindingKey(bound)); err != nil || kv != nil {
		t.Fatalf("binding after Unbind: %v %v", kv, err)
	}
	for r := range bound.GetSpec().GetTemplate().GetRequests() {
		if kv, err := s.Get(ctx, clientlib.AllocKey("m1", r)); err != nil || string(kv.GetValue()) != "0" {
			t.Fatalf("counter %s after Unbind: %v %v, want 0", r, kv, err)
		}
	}

	unbound := u
	again := clientlib.Unbind(clientlib.NewTxn(s).Group(), unbound)
	if again == unbound || !proto.Equal(again, unbound) {
		t.Fatalf("Unbind of an unbound task returned %p for %p; want an equal copy", again, unbound)
	}
	again.Status = &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_LOST}
	if unbound.GetStatus().GetPhase() == troupev1.TaskPhase_TASK_PHASE_LOST {
		t.Fatal("changing what Unbind returned changed the task given")
	}
}
