package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/troupe-cluster/troupe/cellstore/localcell"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// TestThreeProcessCell runs a three-node cell as three `troupe store`
// processes on loopback, commits through one node, reads through another,
// kills one process with SIGKILL and keeps committing through the rest.
func TestThreeProcessCell(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the troupe binary")
	}
	dir := t.TempDir()
	bin := buildTroupe(t)
	ports, err := localcell.FreePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	var members []string
	for i := range 3 {
		members = append(members, fmt.Sprintf("%d=127.0.0.1:%d", i+1, ports[i]))
	}
	procs := make([]*exec.Cmd, 3)
	grpcAddr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[3+i]) }
	for i := range procs {
		cmd := exec.Command(bin, "store", "--node-id", fmt.Sprint(i+1), "--shards", "2",
			"--data-dir", filepath.Join(dir, fmt.Sprintf("d%d", i+1)),
			"--raft-addr", fmt.Sprintf("127.0.0.1:%d", ports[i]), "--grpc-addr", grpcAddr(i), "--http-addr", "",
			"--rtt", "5ms", "--logdb-memory", "tiny", "--initial-members", strings.Join(members, ","))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[i] = cmd
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clients := make([]storev1.StoreClient, 3)
	for i := range clients {
		conn, err := grpc.NewClient(grpcAddr(i), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		clients[i] = storev1.NewStoreClient(conn)
	}
	commit := func(c storev1.StoreClient, n int) error {
		key := fmt.Sprintf("/machines/m%d", n)
		resp, err := c.Commit(ctx, &storev1.CommitRequest{TxnId: fmt.Sprintf("p-%d", n), Groups: []*storev1.Group{{
			Ops: []*storev1.Op{{Op: &storev1.Op_Put{Put: &storev1.Put{Key: key, Value: []byte(fmt.Sprint(n))}}}},
		}}})
		if err == nil && !resp.GetGroups()[0].GetCommitted() {
			err = fmt.Errorf("commit %d failed: %v", n, resp.GetGroups()[0].GetFailure())
		}
		return err
	}
	// The cell is ready when a commit goes through; until then nodes
	// answer UNAVAILABLE or time out while electing.
	waitFor(t, ctx, func() error { return commit(clients[2], 0) })
	for n := 1; n <= 20; n++ {
		if err := commit(clients[n%3], n); err != nil {
			t.Fatal(err)
		}
	}
	if err := procs[0].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	procs[0].Wait()
	for n := 21; n <= 40; n++ {
		n := n
		waitFor(t, ctx, func() error { return commit(clients[1+n%2], n) })
	}
	for n := 0; n <= 40; n++ {
		g, err := clients[1].Get(ctx, &storev1.GetRequest{Key: fmt.Sprintf("/machines/m%d", n)})
		if err != nil || string(g.GetKv().GetValue()) != fmt.Sprint(n) {
			t.Fatalf("read back key %d: %v, %v", n, g, err)
		}
	}
	for _, p := range procs[1:] {
		p.Process.Signal(syscall.SIGTERM)
		if err := p.Wait(); err != nil {
			t.Errorf("node did not shut down cleanly on SIGTERM: %v", err)
		}
	}
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// buildTroupe builds the troupe binary once for the package's tests.
func buildTroupe(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "troupe-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "troupe")
		if out, err := exec.Command("go", "build", "-o", builtBin, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// waitFor retries fn until it succeeds or ctx ends.
func waitFor(t *testing.T, ctx context.Context, fn func() error) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := fn()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("gave up: %v", err)
		case <-tick.C:
		}
	}
}
