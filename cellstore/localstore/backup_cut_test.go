package localstore_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/cellstore/localstore"
	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/cellstore/statemachine"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// A backup taken while cross-shard transfers and ordered writes run is a
// consistent cut of the cell: restored into a new cell whose clock is a
// month later (every remembered decision has expired there, so nothing
// half-done could be settled from memory), it holds no prepared
// transaction, the accounts' total is intact, and of two writes made one
// after the other on different shards it never holds the second without
// the first. The writers keep going through the backup: they are held
// back while the cell is frozen, never failed.
func TestBackupIsConsistentCut(t *testing.T) {
	const (
		shards   = 4
		perShard = 2
		start    = 1000
		workers  = 8
	)
	c := startCell(t, 3, shards, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 2*testTimeout)
	defer cancel()
	var accounts []string
	for sh := range uint32(shards) {
		for j := range perShard {
			k := c.keyOnShard(fmt.Sprintf("/bank/a%d-%%d", j), sh)
			accounts = append(accounts, k)
			c.commit(ctx, 0, &storev1.CommitRequest{TxnId: c.txnID(), Groups: []*storev1.Group{group(addOp(k, start, 0, math.MaxInt64))}})
		}
	}
	total := int64(len(accounts) * start)
	// first is written before second, each after the other is
	// acknowledged: shard 0 first, the shard a sequential backup reads
	// first, then the last one.
	first, second := c.keyOnShard("/order/x%d", 0), c.keyOnShard("/order/y%d", shards-1)

	stop := make(chan struct{})
	var (
		wg        sync.WaitGroup
		transfers atomic.Int64
		orders    atomic.Int64
		slowest   atomic.Int64 // nanoseconds, of any commit while the backup ran
		during    atomic.Bool
	)
	timed := func(fn func() error) error {
		t0 := time.Now()
		err := fn()
		if d := time.Since(t0); during.Load() && int64(d) > slowest.Load() {
			slowest.Store(int64(d))
		}
		return err
	}
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				from := rng.IntN(len(accounts))
				to := (from + perShard*(1+rng.IntN(shards-1))) % len(accounts) // another shard
				amount := int64(1 + rng.IntN(50))
				req := &storev1.CommitRequest{TxnId: fmt.Sprintf("transfer-%d-%d", w, n), Groups: []*storev1.Group{
					group(addOp(accounts[from], -amount, 0, math.MaxInt64), addOp(accounts[to], amount, 0, math.MaxInt64))}}
				if err := timed(func() error { _, _, err := c.tryCommitTo(ctx, w%c.Size(), req); return err }); err != nil {
					t.Errorf("transfer %s: %v", req.GetTxnId(), err)
					return
				}
				transfers.Add(1)
			}
		})
	}
	wg.Go(func() {
		for n := 1; ; n++ {
			for _, k := range []string{first, second} {
				select {
				case <-stop:
					return
				default:
				}
				req := &storev1.CommitRequest{TxnId: fmt.Sprintf("order-%s-%d", k, n), Groups: []*storev1.Group{group(putOp(k, strconv.Itoa(n)))}}
				if err := timed(func() error { _, _, err := c.tryCommitTo(ctx, n%c.Size(), req); return err }); err != nil {
					t.Errorf("order %s: %v", req.GetTxnId(), err)
					return
				}
			}
			orders.Add(1)
		}
	})
	wait.Until(ctx, t, "load to run", func() (bool, string) {
		return transfers.Load() >= 50 && orders.Load() >= 10, fmt.Sprintf("%d transfers, %d ordered pairs", transfers.Load(), orders.Load())
	})
	path := filepath.Join(t.TempDir(), "cell.backup")
	before := transfers.Load()
	during.Store(true)
	t0 := time.Now()
	backup(ctx, t, c.admin(0), path)
	took := time.Since(t0)
	during.Store(false)
	done := transfers.Load()
	wait.Until(ctx, t, "transfers after the backup", func() (bool, string) {
		return transfers.Load() >= done+20, fmt.Sprintf("%d transfers", transfers.Load())
	})
	close(stop)
	wg.Wait()
	frozen, refusals := 0.0, 0.0
	for i := range c.Size() {
		frozen += metric(t, c.Node(i), "troupe_store_backup_freeze_seconds")
		refusals += metric(t, c.Node(i), "troupe_store_frozen_refusals_total")
	}
	t.Logf("backup took %v under load, writes frozen %v of it (%v proposals refused meanwhile); %d transfers committed during it; slowest commit meanwhile %v",
		took, time.Duration(frozen*float64(time.Second)), refusals, done-before, time.Duration(slowest.Load()))

	later := time.Now().Add(30 * 24 * time.Hour)
	r := startCellWith(t, localstore.Config{Replicas: 1, Shards: shards, RestoreFrom: path, Tune: func(nc *node.Config) {
		nc.Server.Now = func() time.Time { return later.Add(time.Since(t0)) }
	}})
	for sh := range uint32(shards) {
		res, err := r.Node(0).StateMachine(sh).Lookup(statemachine.OverdueQuery{Now: math.MaxInt64, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if ids := res.(*statemachine.OverdueResult).IDs; len(ids) > 0 {
			t.Errorf("the backup holds transactions prepared on shard %d: %q", sh, ids)
		}
	}
	var sum int64
	balances := make([]int64, len(accounts))
	for i, k := range accounts {
		balances[i], _ = strconv.ParseInt(string(r.get(ctx, 0, k, false).GetKv().GetValue()), 10, 64)
		sum += balances[i]
	}
	if sum != total {
		t.Errorf("restored accounts %v add up to %d, want %d: a transfer is half in the backup", balances, sum, total)
	}
	x, _ := strconv.Atoi(string(r.get(ctx, 0, first, false).GetKv().GetValue()))
	y, _ := strconv.Atoi(string(r.get(ctx, 0, second, false).GetKv().GetValue()))
	if y > x {
		t.Errorf("the backup holds write %d of %s but only %d of %s, which was acknowledged before it", y, second, x, first)
	}
	// The restored cell is not frozen: a transfer commits at once.
	resp := r.commit(ctx, 0, &storev1.CommitRequest{TxnId: r.txnID(), Groups: []*storev1.Group{
		group(addOp(accounts[0], -1, 0, math.MaxInt64), addOp(accounts[len(accounts)-1], 1, 0, math.MaxInt64))}})
	if !slices.ContainsFunc(resp.GetGroups(), (*storev1.GroupResult).GetCommitted) {
		t.Errorf("a transfer on the restored cell: %v", resp)
	}
}

// metric is the value of a node's counter, or the sum of its histogram,
// named name (0 if it has none).
func metric(t testing.TB, n *node.Node, name string) float64 {
	t.Helper()
	fams, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetHistogram().GetSampleSum()
		}
	}
	return sum
}
