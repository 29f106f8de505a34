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

	"github.com/troupe-cluster/troupe/cellstore/localstore"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// TestStoreOperations drives the store's operations as a user would, with
// `troupe store` processes: a one-node cell, a second node that joins it
// with --join (non-voting until caught up), `members add` of a node that
// is not running (which times out, leaving it non-voting), `members list`
// and `members remove`, then `backup`, `restore` and a node started on the
// restored directory that serves the same keys at the same versions.
func TestStoreOperations(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the troupe binary")
	}
	dir := t.TempDir()
	bin := buildTroupe(t)
	ports, err := localstore.FreePorts(7)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	flags, admin := localPKI(t, dir)
	store := func(id int, raft, grpcAddr, dataDir string, extra ...string) *exec.Cmd {
		args := append([]string{"store", "--node-id", fmt.Sprint(id), "--data-dir", dataDir, "--raft-addr", raft,
			"--grpc-addr", grpcAddr, "--http-addr", "", "--rtt", "5ms", "--logdb-memory", "tiny"}, append(flags(pki.LocalStore), extra...)...)
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	// The admin's commands, with its credentials (restore works on files).
	troupe := func(args ...string) string {
		t.Helper()
		if args[1] != "restore" {
			args = append(args, flags(pki.LocalAdmin)...)
		}
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("troupe %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	client := func(grpcAddr string) storev1.StoreClient {
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(pki.StoreCredentials(admin)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return storev1.NewStoreClient(conn)
	}
	put := func(c storev1.StoreClient, n int) error {
		_, err := c.Commit(ctx, &storev1.CommitRequest{TxnId: fmt.Sprintf("ops-%d", n), Groups: []*storev1.Group{{
			Ops: []*storev1.Op{{Op: &storev1.Op_Put{Put: &storev1.Put{Key: fmt.Sprintf("/machines/m%d", n), Value: []byte(fmt.Sprint(n))}}}},
		}}})
		return err
	}

	first := store(1, addr(0), addr(1), filepath.Join(dir, "d1"), "--shards", "2")
	c1 := client(addr(1))
	wait.Until(ctx, t, "a commit through node 1", func() error { return put(c1, 0) })
	second := store(2, addr(2), addr(3), filepath.Join(dir, "d2"), "--join", addr(1))
	c2 := client(addr(3))
	for n := 1; n <= 20; n++ {
		wait.Until(ctx, t, fmt.Sprintf("commit %d through node 2", n), func() error { return put(c2, n) })
	}
	// Each member's line: NODE, GRPC ADDRESS, RAFT ADDRESS, SHARDS,
	// NON-VOTING, LEADS, VERSION.
	member := func(out string, id int) []string {
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 7 && f[0] == fmt.Sprint(id) {
				return f[2:5]
			}
		}
		return nil
	}
	wait.Until(ctx, t, "node 2 to vote in every shard", func() error {
		if out := troupe("store", "members", "list", "--endpoint", addr(1)); fmt.Sprint(member(out, 2)) != fmt.Sprint([]string{addr(2), "0-1", "-"}) {
			return fmt.Errorf("node 2 does not vote in every shard:\n%s", out)
		}
		return nil
	})
	// Both nodes are healthy and each says what it leads.
	wait.Until(ctx, t, "both nodes to be healthy", func() error {
		out := troupe("status", "--endpoint", addr(1)+","+addr(3))
		if n := strings.Count(out, " ok "); n != 2 {
			return fmt.Errorf("status of the two nodes:\n%s", out)
		}
		return nil
	})
	// Node 3 is not running: its add times out and leaves it non-voting.
	out, err := exec.CommandContext(ctx, bin, append([]string{"store", "members", "add", "--endpoint", addr(1), "--node-id", "3", "--raft-addr", addr(6),
		"--shards", "2", "--timeout", "1s"}, flags(pki.LocalAdmin)...)...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "node 3 has not caught up") {
		t.Fatalf("members add of a node that is down: %v\n%s", err, out)
	}
	if out := troupe("store", "members", "list", "--endpoint", addr(1)); fmt.Sprint(member(out, 3)) != fmt.Sprint([]string{addr(6), "0-1", "0-1"}) {
		t.Fatalf("members list after adding node 3:\n%s", out)
	}
	if out := troupe("store", "members", "remove", "--endpoint", addr(1), "--node-id", "3"); member(out, 3) != nil || member(out, 2) == nil {
		t.Fatalf("members remove of non-voting node 3:\n%s", out)
	}
	if out := troupe("store", "members", "remove", "--endpoint", addr(1), "--node-id", "2"); member(out, 2) != nil || member(out, 1) == nil {
		t.Fatalf("members remove:\n%s", out)
	}
	second.Process.Signal(syscall.SIGTERM)
	second.Wait()
	versions := map[string]uint64{}
	for n := 0; n <= 20; n++ {
		key := fmt.Sprintf("/machines/m%d", n)
		g, err := c1.Get(ctx, &storev1.GetRequest{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		versions[key] = g.GetKv().GetVersion()
	}

	backup := filepath.Join(dir, "cell.backup")
	troupe("store", "backup", "--endpoint", addr(1), "--out", backup)
	first.Process.Signal(syscall.SIGTERM)
	first.Wait()
	restored := filepath.Join(dir, "restored")
	troupe("store", "restore", "--in", backup, "--data-dir", restored)
	store(1, addr(4), addr(5), restored) // the shard count comes from the restored directory
	c3 := client(addr(5))
	for n := 0; n <= 20; n++ {
		key := fmt.Sprintf("/machines/m%d", n)
		var g *storev1.GetResponse
		wait.Until(ctx, t, "restored "+key, func() (err error) { g, err = c3.Get(ctx, &storev1.GetRequest{Key: key}); return err })
		if string(g.GetKv().GetValue()) != fmt.Sprint(n) || g.GetKv().GetVersion() != versions[key] {
			t.Fatalf("restored %s: %v, want version %d", key, g.GetKv(), versions[key])
		}
	}
}
