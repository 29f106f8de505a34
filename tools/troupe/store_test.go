package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// TestThreeProcessCell runs a three-node cell as three `troupe store`
// processes on loopback, commits through one node, reads through another,
// kills one process with SIGKILL and keeps committing through the rest.
func TestThreeProcessCell(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the troupe binary")
	}
	cell := startStores(t, buildTroupe(t), t.TempDir(), 3, 2, func(int) []string { return nil })
	procs, clients := cell.procs, cell.clients
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
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
	wait.Until(ctx, t, "a commit through node 2", func() error { return commit(clients[2], 0) })
	for n := 1; n <= 20; n++ {
		if err := commit(clients[n%3], n); err != nil {
			t.Fatal(err)
		}
	}
	cell.kill(t, 0)
	for n := 21; n <= 40; n++ {
		n := n
		wait.Until(ctx, t, fmt.Sprintf("commit %d", n), func() error { return commit(clients[1+n%2], n) })
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
