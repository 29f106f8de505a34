package localstore_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	"github.com/troupe-cluster/troupe/cellstore/localstore"
	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// BenchmarkBackupUnderLoad measures how long a backup pauses writes on a
// 3-replica, 4-shard cell under load: 8 clients making cross-shard
// transfers and 8 making single-shard puts, spread over the nodes, as
// fast as they can; a backup every 300 ms. It reports how long each
// backup kept the cell frozen (the server's measure, FREEZE to THAW) and
// the commit latencies of the commits that overlapped a backup and of
// the others.
//
//	go test ./cellstore/localstore -run '^$' -bench BackupUnderLoad -benchtime 20x
func BenchmarkBackupUnderLoad(b *testing.B) {
	const shards, workers = 4, 16
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := localstore.Start(ctx, localstore.Config{Dir: b.TempDir(), Replicas: 3, Shards: shards})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	creds, err := c.Admin()
	if err != nil {
		b.Fatal(err)
	}
	var clients []storev1.StoreClient
	for _, addr := range c.Endpoints() {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(pki.StoreCredentials(creds)))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		clients = append(clients, storev1.NewStoreClient(conn))
	}
	// commit sends req to node i until it is answered (the same txn_id
	// each time).
	commit := func(i int, req *storev1.CommitRequest) error {
		for {
			actx, acancel := context.WithTimeout(ctx, attemptTimeout)
			_, err := clients[i].Commit(actx, req)
			acancel()
			if err == nil || !retryable(err) || ctx.Err() != nil {
				return err
			}
		}
	}
	router := keyspace.NewRouter(shards)
	var accounts []string
	for sh := range uint32(shards) {
		for j := 0; len(accounts) < 2*int(sh+1); j++ {
			if k := fmt.Sprintf("/bank/a%d", j); router.Shard(k) == sh {
				accounts = append(accounts, k)
			}
		}
	}
	for _, k := range accounts {
		if err := commit(0, &storev1.CommitRequest{TxnId: "open-" + k, Groups: []*storev1.Group{group(addOp(k, 1e9, 0, math.MaxInt64))}}); err != nil {
			b.Fatal(err)
		}
	}
	type span struct{ start, end time.Time }
	commits := make([][]span, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for n := 0; ctx.Err() == nil; n++ {
				from := rng.IntN(len(accounts))
				to := (from + 2*(1+rng.IntN(shards-1))) % len(accounts)
				req := &storev1.CommitRequest{TxnId: fmt.Sprintf("w%d-%d", w, n), Groups: []*storev1.Group{
					group(addOp(accounts[from], -1, 0, math.MaxInt64), addOp(accounts[to], 1, 0, math.MaxInt64))}}
				if w%2 == 1 {
					req.Groups = []*storev1.Group{group(putOp(fmt.Sprintf("/load/w%d-%d", w, n%100), "x"))}
				}
				s := span{start: time.Now()}
				if err := commit(w%len(clients), req); err != nil {
					return
				}
				s.end = time.Now()
				commits[w] = append(commits[w], s)
			}
		})
	}
	conn, err := grpc.NewClient(c.Node(0).GRPCAddr(), grpc.WithTransportCredentials(pki.StoreCredentials(creds)))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	admin := storev1.NewAdminClient(conn)
	var backups []span
	var freezes []time.Duration
	frozenBefore := metric(b, c.Node(0), "troupe_store_backup_freeze_seconds")
	b.ResetTimer()
	for range b.N {
		pace := time.NewTimer(300 * time.Millisecond)
		<-pace.C
		s := span{start: time.Now()}
		stream, err := admin.Backup(ctx, &storev1.BackupRequest{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := node.WriteBackup(io.Discard, stream.Recv); err != nil {
			b.Fatal(err)
		}
		s.end = time.Now()
		backups = append(backups, s)
		frozen := metric(b, c.Node(0), "troupe_store_backup_freeze_seconds")
		freezes = append(freezes, time.Duration((frozen-frozenBefore)*float64(time.Second)))
		frozenBefore = frozen
	}
	b.StopTimer()
	cancel()
	wg.Wait()
	var during, outside []time.Duration
	for _, ws := range commits {
		for _, s := range ws {
			overlaps := slices.ContainsFunc(backups, func(bk span) bool { return s.start.Before(bk.end) && s.end.After(bk.start) })
			if overlaps {
				during = append(during, s.end.Sub(s.start))
			} else {
				outside = append(outside, s.end.Sub(s.start))
			}
		}
	}
	slices.Sort(freezes)
	slices.Sort(during)
	slices.Sort(outside)
	q := func(ds []time.Duration, f float64) float64 {
		if len(ds) == 0 {
			return 0
		}
		return float64(ds[min(len(ds)-1, int(f*float64(len(ds))))]) / 1e6
	}
	b.ReportMetric(q(freezes, 0.5), "freeze-p50-ms")
	b.ReportMetric(q(freezes, 1), "freeze-max-ms")
	b.ReportMetric(q(outside, 0.5), "commit-p50-ms")
	b.ReportMetric(q(outside, 0.99), "commit-p99-ms")
	b.ReportMetric(q(during, 0.5), "during-p50-ms")
	b.ReportMetric(q(during, 0.99), "during-p99-ms")
	b.ReportMetric(q(during, 1), "during-max-ms")
	b.ReportMetric(float64(len(during)+len(outside))/time.Since(backups[0].start).Seconds(), "commits/s")
}
