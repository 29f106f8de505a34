package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	"github.com/troupe-cluster/troupe/cellstore/localstore"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// storeProcs is a cell of `troupe store` processes on loopback.
type storeProcs struct {
	procs   []*exec.Cmd
	clients []storev1.StoreClient
	// admin are the credential flags of the cell's admin.
	admin []string
}

// localPKI makes a local cell's certificates under dir/pki (store, admin,
// ...; pki.EnsureLocal) and returns the credential flags of one by name,
// and the admin's credentials.
func localPKI(t *testing.T, dir string) (flags func(name string) []string, admin *pki.Source) {
	t.Helper()
	pkiDir := filepath.Join(dir, "pki")
	if _, err := pki.EnsureLocal(pkiDir, pki.LocalCell{Hosts: []string{"127.0.0.1"}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	admin, err := pki.NewSource(pki.DirFiles(pkiDir, pki.LocalAdmin), nil)
	if err != nil {
		t.Fatal(err)
	}
	return func(name string) []string {
		f := pki.DirFiles(pkiDir, name)
		return []string{"--ca", f.CA, "--cert", f.Cert, "--key", f.Key}
	}, admin
}

// startStores starts n store processes of a cell of shards shards under
// dir, node i with the extra flags extra(i); they are killed when the
// test ends.
func startStores(t *testing.T, bin, dir string, n, shards int, extra func(i int) []string) *storeProcs {
	t.Helper()
	ports, err := localstore.FreePorts(2 * n)
	if err != nil {
		t.Fatal(err)
	}
	var members []string
	for i := range n {
		members = append(members, fmt.Sprintf("%d=127.0.0.1:%d", i+1, ports[i]))
	}
	flags, admin := localPKI(t, dir)
	c := &storeProcs{admin: flags(pki.LocalAdmin)}
	for i := range n {
		grpcAddr := fmt.Sprintf("127.0.0.1:%d", ports[n+i])
		args := append([]string{"store", "--node-id", fmt.Sprint(i + 1), "--shards", fmt.Sprint(shards),
			"--data-dir", filepath.Join(dir, fmt.Sprintf("d%d", i+1)),
			"--raft-addr", fmt.Sprintf("127.0.0.1:%d", ports[i]), "--grpc-addr", grpcAddr, "--http-addr", "",
			"--rtt", "5ms", "--logdb-memory", "tiny", "--initial-members", strings.Join(members, ",")}, append(flags(pki.LocalStore), extra(i)...)...)
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c.procs = append(c.procs, cmd)
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(pki.StoreCredentials(admin)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		c.clients = append(c.clients, storev1.NewStoreClient(conn))
	}
	return c
}

// kill kills node i with SIGKILL.
func (c *storeProcs) kill(t *testing.T, i int) {
	t.Helper()
	if err := c.procs[i].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.procs[i].Wait()
}

// The node driving a cross-shard transaction is killed with SIGKILL after
// every participant prepared, before its resolution and reply: the keys
// it prepared refuse other writers at once; the transaction committed
// (every participant prepared), so the surviving leaders finish it after
// its timeout: the keys take writes again, a holds the write, and a
// retry of the request (through another node) gets the committed
// outcome.
func TestKillDriverAfterPrepare(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the troupe binary")
	}
	bin := buildTroupe(t)
	cell := startStores(t, bin, t.TempDir(), 3, 2, func(i int) []string {
		args := []string{"--txn-timeout", "1s"}
		if i == 0 {
			args = append(args, "--fault-prepare-delay", "1h")
		}
		return args
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	router := keyspace.NewRouter(2)
	a, b := router.KeyOn(0, "/machines/a%d"), router.KeyOn(1, "/machines/b%d")
	put := func(k, v string) *storev1.Op {
		return &storev1.Op{Op: &storev1.Op_Put{Put: &storev1.Put{Key: k, Value: []byte(v)}}}
	}
	write := func(node int, txn string, k string) (*storev1.CommitResponse, error) {
		return cell.clients[node].Commit(ctx, &storev1.CommitRequest{TxnId: txn, Groups: []*storev1.Group{{Ops: []*storev1.Op{put(k, txn)}}}})
	}
	// The cell is ready when a single-shard commit goes through node 1.
	wait.Until(ctx, t, "a commit through node 1", func() error { _, err := write(1, "ready", "/machines/ready"); return err })

	cross := &storev1.CommitRequest{TxnId: "cross", Groups: []*storev1.Group{{Ops: []*storev1.Op{put(a, "x"), put(b, "x")}}}}
	go cell.clients[0].Commit(ctx, cross) // node 0 prepares, then waits
	// Once prepared, writers of b fail at once, naming it.
	wait.Until(ctx, t, "writes of "+b+" to meet the prepared intent", func() error {
		resp, err := write(2, fmt.Sprintf("probe-%d", time.Now().UnixNano()), b)
		if err != nil {
			return err
		}
		if f := resp.GetGroups()[0].GetFailure(); f.GetReason() != storev1.FailureReason_FAILURE_REASON_INTENT || f.GetKey() != b {
			return fmt.Errorf("write of %s: %v, want INTENT", b, resp.GetGroups()[0])
		}
		return nil
	})
	cell.kill(t, 0)
	// The survivors resolve it after its timeout: b takes writes again.
	wait.Until(ctx, t, "writes of "+b+" after the driver died", func() error {
		resp, err := write(1, fmt.Sprintf("after-%d", time.Now().UnixNano()), b)
		if err == nil && !resp.GetGroups()[0].GetCommitted() {
			err = fmt.Errorf("write of %s after the driver died: %v", b, resp.GetGroups()[0])
		}
		return err
	})
	if g, err := cell.clients[2].Get(ctx, &storev1.GetRequest{Key: a}); err != nil || string(g.GetKv().GetValue()) != "x" {
		t.Fatalf("%s after recovery: %v %v; want the committed write", a, g, err)
	}
	var resp *storev1.CommitResponse
	wait.Until(ctx, t, "the retry of the killed driver's request", func() (err error) { resp, err = cell.clients[1].Commit(ctx, cross); return err })
	if !resp.GetGroups()[0].GetCommitted() || !resp.GetDuplicate() {
		t.Fatalf("retry of the killed driver's request: %v", resp)
	}
}
