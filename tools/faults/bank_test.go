package faults

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/clientlib"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// bankRun is what runBank found.
type bankRun struct {
	ops      []porcupine.Operation
	problems []string // Final's
	result   porcupine.CheckResult
	tally    map[string]int
}

// runBank opens the bank on s, runs clients clients of ops operations
// each from seed at once, then Final, and checks the history.
func runBank(t *testing.T, s clientlib.Store, seed uint64, clients, ops int) bankRun {
	t.Helper()
	w := NewBank(1, 8)
	h := NewHistory()
	if err := w.Init(t.Context(), h.NewClient(s, rand.New(rand.NewPCG(seed, 0)))); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range clients {
		c := h.NewClient(s, rand.New(rand.NewPCG(seed, uint64(i+1))))
		wg.Go(func() { drive(t.Context(), w, c, time.Second, ops) })
	}
	wg.Wait()
	problems := w.Final(t.Context(), h.NewClient(s, rand.New(rand.NewPCG(seed, 99))), h.Operations())
	return bankRun{ops: h.Operations(), problems: problems, tally: w.Tally(h.Operations()),
		result: porcupine.CheckOperationsTimeout(w.Model(), h.Operations(), 10*time.Second)}
}

// TestBankOnMemstore: the store's own engine, without Raft, keeps the
// books: linearizable per account, every validated snapshot and the
// final balances add up. Transfers commit and overdraw, and snapshots
// validate and conflict, so every check had something to check.
func TestBankOnMemstore(t *testing.T) {
	r := runBank(t, memstore.New(time.Now, time.Minute), 1, 4, 150)
	if r.result != porcupine.Ok || len(r.problems) > 0 {
		t.Fatalf("check = %v, want Ok; final problems %q", r.result, r.problems)
	}
	for _, what := range []string{"transfers committed", "transfers bound_exceeded", "snapshots validated"} {
		if r.tally[what] == 0 {
			t.Errorf("no %s: %v", what, r.tally)
		}
	}
	t.Log(r.tally)
}

// halfway applies one side only (the first add) of every third transfer
// and then acknowledges it, or, with lost, returns an error as a
// store that lost its answer: a transfer half-applied.
type halfway struct {
	clientlib.Store
	lost      bool
	mu        sync.Mutex
	transfers int
}

var errLostAnswer = errors.New("the answer was lost")

func (s *halfway) Commit(ctx context.Context, req *storev1.CommitRequest) (*storev1.CommitResponse, error) {
	g := req.GetGroups()[0]
	if len(g.GetOps()) != 2 || len(g.GetConditions()) > 0 { // not a transfer
		return s.Store.Commit(ctx, req)
	}
	s.mu.Lock()
	s.transfers++
	half := s.transfers%3 == 0
	s.mu.Unlock()
	if !half {
		return s.Store.Commit(ctx, req)
	}
	resp, err := s.Store.Commit(ctx, &storev1.CommitRequest{TxnId: req.GetTxnId(), Groups: []*storev1.Group{{Ops: g.GetOps()[:1]}}})
	if s.lost && err == nil {
		return nil, errLostAnswer
	}
	return resp, err
}

// twice applies every fifth transfer twice (under another txn_id).
type twice struct {
	clientlib.Store
	mu        sync.Mutex
	transfers int
}

func (s *twice) Commit(ctx context.Context, req *storev1.CommitRequest) (*storev1.CommitResponse, error) {
	if len(req.GetGroups()[0].GetOps()) == 2 {
		s.mu.Lock()
		s.transfers++
		again := s.transfers%5 == 0
		s.mu.Unlock()
		if again {
			if _, err := s.Store.Commit(ctx, &storev1.CommitRequest{TxnId: req.GetTxnId() + "-again", Groups: req.GetGroups()}); err != nil {
				return nil, err
			}
		}
	}
	return s.Store.Commit(ctx, req)
}

// TestCheckerCatchesHalfTransfers: the bank's checks are not vacuous. A
// store that applies one side of some transfers is caught, whether it
// acknowledges them (the per-account model sees the missing side) or
// loses its answer, where each account alone looks fine and only the
// money shows it: the snapshots' totals and the final balances. One
// that applies transfers twice is caught too.
func TestCheckerCatchesHalfTransfers(t *testing.T) {
	for name, tc := range map[string]struct {
		s       clientlib.Store
		illegal bool   // the per-account model must refuse the history
		final   string // a problem Final must report
	}{
		"acknowledged": {&halfway{Store: memstore.New(time.Now, time.Minute)}, true, "on one side only"},
		"ambiguous":    {&halfway{Store: memstore.New(time.Now, time.Minute), lost: true}, false, "totalling"},
		"twice":        {&twice{Store: memstore.New(time.Now, time.Minute)}, true, "on one side only, twice"},
	} {
		t.Run(name, func(t *testing.T) {
			r := runBank(t, tc.s, 1, 2, 60)
			if tc.illegal && r.result != porcupine.Illegal {
				t.Errorf("check = %v, want Illegal", r.result)
			}
			if !strings.Contains(strings.Join(r.problems, "\n"), tc.final) {
				t.Errorf("final problems %q, want one with %q", r.problems, tc.final)
			}
			t.Logf("check %v; final problems:\n%s", r.result, strings.Join(r.problems, "\n"))
		})
	}
}
