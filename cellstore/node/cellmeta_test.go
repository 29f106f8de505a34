package node

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/cellstore/pki"
)

// localCreds returns a store identity of a new local cell (its own CA).
func localCreds(t *testing.T) *pki.Source {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pki")
	if _, err := pki.EnsureLocal(dir, pki.LocalCell{Hosts: []string{"127.0.0.1"}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	s, err := pki.NewSource(pki.DirFiles(dir, pki.LocalStore), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A data directory records its node and cell at first start; started as
// another node, at another Raft address, or with another cell's
// credentials, it fails naming what it holds and what to do, and is left
// as it was. A directory from
// before the node was recorded is checked against its Raft logs.
func TestDataDirOfAnotherNodeOrCell(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "node-2")
	cfg := testConfig(t, dir)
	cfg.NodeID = 2
	cfg.Shards = 1
	cfg.TLS = localCreds(t)
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
	meta, err := readCellMeta(dir)
	if err != nil || meta.NodeID != 2 || meta.RaftAddr != cfg.RaftAddr || meta.Cell == nil || meta.Cell.Name != "troupe-local" || meta.Cell.CAKeyID == "" || meta.Created.IsZero() {
		t.Fatalf("cell.json after the first start: %+v %v", meta, err)
	}
	before, _ := os.ReadFile(cellMetaPath(dir))

	other := cfg
	other.TLS = localCreds(t) // another cell of the same name
	if c := cellOf(other.TLS); c.CAKeyID == meta.Cell.CAKeyID {
		t.Fatalf("two CAs with one key ID %s", c.CAKeyID)
	}
	for name, tc := range map[string]struct {
		cfg  Config
		want []string
	}{
		"another cell": {other, []string{dir + " holds node 2 of \"troupe-local\" (CA key " + meta.Cell.CAKeyID[:16] + "), created ",
			"not of \"troupe-local\" (CA key " + cellOf(other.TLS).CAKeyID[:16] + "), whose certificate this node has",
			"start with --data-dir pointing at this cell's directory", "or remove the directory to join afresh"}},
		"another node": {func() Config { c := cfg; c.NodeID = 3; return c }(), []string{dir + " holds node 2 of \"troupe-local\"",
			"not node 3; start it as node 2 (--node-id 2), or point --data-dir at node 3's directory, or remove the directory to join afresh"}},
		"another Raft address": {func() Config { c := cfg; c.RaftAddr = "127.0.0.1:1"; return c }(), []string{dir + " holds node 2 of \"troupe-local\"",
			"at Raft address " + cfg.RaftAddr + ", not 127.0.0.1:1; a node keeps its Raft address: start it with --raft-addr " + cfg.RaftAddr}},
	} {
		_, err := Start(tc.cfg)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want it to say %q", name, err, w)
			}
		}
		if after, _ := os.ReadFile(cellMetaPath(dir)); string(after) != string(before) {
			t.Errorf("%s: cell.json changed: %s", name, after)
		}
	}

	// A directory from before cell.json recorded the node: its Raft logs
	// say whose it is.
	b, err := json.Marshal(cellMeta{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cellMetaPath(dir), b, 0o644); err != nil {
		t.Fatal(err)
	}
	third := cfg
	third.NodeID = 3
	if _, err := Start(third); err == nil || !strings.Contains(err.Error(), "holds node 2 of") || !strings.Contains(err.Error(), "not node 3") {
		t.Fatalf("old directory of node 2 started as node 3: %v", err)
	}
	// Started as itself, it records the node and the cell again.
	n, err = Start(cfg)
	if err != nil {
		t.Fatalf("old directory started as its node: %v", err)
	}
	n.Close()
	if meta, err := readCellMeta(dir); err != nil || meta.NodeID != 2 || meta.RaftAddr != cfg.RaftAddr || meta.Cell == nil {
		t.Fatalf("cell.json after the old directory's start: %+v %v", meta, err)
	}
}
