package faults

import (
	"context"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/clientlib"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// runRegister drives the register workload through s, one client, ops
// operations from seed, then the final reads, and checks the history.
func runRegister(t *testing.T, s clientlib.Store, seed uint64, ops int) (*History, []string, porcupine.CheckResult) {
	t.Helper()
	w := NewRegister(2, 2)
	h := NewHistory()
	c := h.NewClient(s, rand.New(rand.NewPCG(seed, 1)))
	drive(t.Context(), w, c, time.Second, ops)
	problems := w.Final(t.Context(), h.NewClient(s, rand.New(rand.NewPCG(seed, 2))), h.Operations())
	return h, problems, porcupine.CheckOperationsTimeout(w.Model(), h.Operations(), 10*time.Second)
}

// TestRegisterOnMemstore: the store's own engine, without Raft, gives
// linearizable histories.
func TestRegisterOnMemstore(t *testing.T) {
	h, problems, res := runRegister(t, memstore.New(time.Now, time.Minute), 1, 300)
	if res != porcupine.Ok || len(problems) > 0 {
		t.Fatalf("check = %v, want Ok; final problems %q", res, problems)
	}
	if n := len(h.Operations()); n < 300 {
		t.Errorf("recorded %d operations, want at least 300", n)
	}
}

// forgetful acknowledges every third commit without applying it, as a
// store that loses acknowledged writes.
type forgetful struct {
	clientlib.Store
	mu      sync.Mutex
	commits int
}

func (f *forgetful) Commit(ctx context.Context, req *storev1.CommitRequest) (*storev1.CommitResponse, error) {
	f.mu.Lock()
	f.commits++
	lose := f.commits%3 == 0
	f.mu.Unlock()
	if lose {
		return &storev1.CommitResponse{Groups: []*storev1.GroupResult{{Committed: true, Revision: 1 << 40}}}, nil
	}
	return f.Store.Commit(ctx, req)
}

// stale serves every get from the first answer it saw for the key, as a
// store that reads from a replica that stopped applying.
type stale struct {
	clientlib.Store
	mu   sync.Mutex
	seen map[string]*storev1.KeyValue
}

func (s *stale) Get(ctx context.Context, key string) (*storev1.KeyValue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if kv, ok := s.seen[key]; ok {
		return kv, nil
	}
	kv, err := s.Store.Get(ctx, key)
	if err == nil {
		s.seen[key] = kv
	}
	return kv, err
}

// TestCheckerCatchesBrokenStores: the harness's checks are not vacuous.
// Stores that lose acknowledged writes or read stale data give histories
// the check refuses, and the history and its visualization are written.
func TestCheckerCatchesBrokenStores(t *testing.T) {
	for name, s := range map[string]clientlib.Store{
		"forgetful": &forgetful{Store: memstore.New(time.Now, time.Minute)},
		"stale":     &stale{Store: memstore.New(time.Now, time.Minute), seen: map[string]*storev1.KeyValue{}},
	} {
		t.Run(name, func(t *testing.T) {
			h, _, res := runRegister(t, s, 1, 100)
			if res != porcupine.Illegal {
				t.Fatalf("check = %v, want Illegal", res)
			}
			dir := t.TempDir()
			files, err := WriteHistory(dir, name, RegisterModel(), h.Operations(), nil, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				if st, err := os.Stat(f); err != nil {
					t.Error(err)
				} else if st.Size() == 0 {
					t.Errorf("%s is empty", f)
				}
			}
		})
	}
}

// TestFinalFindsLostCommits: a store that loses acknowledged commits is
// caught by the final reads too, with a message naming the key.
func TestFinalFindsLostCommits(t *testing.T) {
	w := NewRegister(1, 1)
	s := memstore.New(time.Now, time.Minute)
	h := NewHistory()
	c := h.NewClient(s, rand.New(rand.NewPCG(1, 1)))
	w.put(t.Context(), c, w.Keys()[0], false, 0)
	w.put(t.Context(), c, w.Keys()[0], false, 0)
	// A fresh, empty store plays the one that lost both commits.
	problems := w.Final(t.Context(), h.NewClient(memstore.New(time.Now, time.Minute), c.Rand), h.Operations())
	if len(problems) != 1 {
		t.Fatalf("problems = %q, want one lost commit", problems)
	}
	t.Log(problems[0])
}
