package node

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/troupe-cluster/troupe/cellstore/pki"
)

// cellMeta is what a node's data directory records about its cell
// (cell.json): written at the first start, checked on every start, so
// that a directory started as another node, or with another cell's
// credentials, fails with an error naming what it holds.
type cellMeta struct {
	Shards uint32 `json:"shards"`
	// NodeID is the node whose replicas the directory holds (0: a
	// directory from before it was recorded; the first start records it).
	NodeID uint64 `json:"node_id,omitempty"`
	// RaftAddr is the node's Raft address, which Dragonboat binds the
	// directory to (empty: a directory from before it was recorded).
	RaftAddr string `json:"raft_addr,omitempty"`
	// Cell names the cell, by its CA (cellOf), when the node ran with TLS
	// (empty: an --insecure cell, whose directory names no cell).
	Cell *cellIdentity `json:"cell,omitempty"`
	// Created is when the directory was first started.
	Created time.Time `json:"created,omitzero"`
	// Restored: the state machines hold restored state that the Raft log
	// does not, until the first start compacts the log (compactRestored).
	Restored bool `json:"restored,omitempty"`
	// Joined: the node joined an existing cell (Config.Join) and its
	// replicas start as non-voting members (learner.go).
	Joined bool `json:"joined,omitempty"`
	// Removed: the cell removed this node (removal.go); it never serves
	// again.
	Removed *removal `json:"removed,omitempty"`

	// unrecorded: NodeID and Cell were filled in at this start, to be
	// written once the Raft logs agree (Node.checkReplicaIDs).
	unrecorded bool
}

// cellIdentity names a cell by the CA that issues its certificates: the
// CA's name (its subject's organization, else its common name) and its
// key ID, which the node's certificate carries (AuthorityKeyId). Two
// cells may share a name, never a CA key.
type cellIdentity struct {
	Name    string `json:"name"`
	CAKeyID string `json:"ca_key_id"`
}

func (c *cellIdentity) String() string {
	if c == nil {
		return "an insecure cell"
	}
	id := c.CAKeyID
	if len(id) > 16 {
		id = id[:16]
	}
	return fmt.Sprintf("%q (CA key %s)", c.Name, id)
}

// cellOf identifies the cell whose CA issued creds' certificate (nil
// without TLS).
func cellOf(creds *pki.Source) *cellIdentity {
	if creds == nil {
		return nil
	}
	leaf := creds.Leaf()
	if leaf == nil {
		return nil
	}
	name := leaf.Issuer.CommonName
	if len(leaf.Issuer.Organization) > 0 {
		name = leaf.Issuer.Organization[0]
	}
	key := leaf.AuthorityKeyId
	if len(key) == 0 { // a CA without a key ID: its name, whole
		sum := sha256.Sum256(leaf.RawIssuer)
		key = sum[:]
	}
	return &cellIdentity{Name: name, CAKeyID: hex.EncodeToString(key)}
}

func cellMetaPath(dir string) string { return filepath.Join(dir, "cell.json") }

// readCellMeta returns what dir records about its cell (Shards 0: no
// cell yet).
func readCellMeta(dir string) (cellMeta, error) {
	var m cellMeta
	path := cellMetaPath(dir)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("node: %s: %w", path, err)
	}
	return m, nil
}

// CellShards returns the shard count recorded in a node's data directory,
// or 0 if it holds no cell yet.
func CellShards(dir string) (uint32, error) {
	m, err := readCellMeta(dir)
	return m.Shards, err
}

// checkCellMeta records, on first start, the shard count, the node, its
// Raft address and the cell (cfg.TLS's CA), and refuses to start the
// directory later with another shard count, as another node, at another
// Raft address or with another cell's
// credentials, or at all once the node was removed from its cell. A
// directory that records no node or cell yet (one from before they were
// recorded, or an insecure cell's started with TLS) gets them filled in,
// unrecorded until the Raft logs agree (recordCellMeta).
func checkCellMeta(cfg Config, now time.Time) (cellMeta, error) {
	dir := cfg.DataDir
	m, err := readCellMeta(dir)
	if err != nil {
		return m, err
	}
	if m.Shards == 0 {
		m = cellMeta{Shards: cfg.Shards, NodeID: cfg.NodeID, RaftAddr: cfg.RaftAddr, Cell: cellOf(cfg.TLS), Created: now.UTC(), Restored: m.Restored}
		return m, writeCellMeta(dir, m)
	}
	if err := m.check(cfg); err != nil {
		return m, err
	}
	if m.NodeID == 0 || m.RaftAddr == "" || (m.Cell == nil && cfg.TLS != nil) {
		m.NodeID, m.RaftAddr, m.Cell = cfg.NodeID, cfg.RaftAddr, cellOf(cfg.TLS)
		if m.Created.IsZero() {
			m.Created = now.UTC()
		}
		m.unrecorded = true
	}
	return m, nil
}

// recordCellMeta writes what checkCellMeta filled in.
func recordCellMeta(dir string, m cellMeta) error {
	if !m.unrecorded {
		return nil
	}
	return writeCellMeta(dir, m)
}

// check compares what the directory records with cfg.
func (m cellMeta) check(cfg Config) error {
	dir := cfg.DataDir
	holds := fmt.Sprintf("%s holds node %d of %s", dir, m.NodeID, m.Cell)
	if !m.Created.IsZero() {
		holds += fmt.Sprintf(", created %s", m.Created.Format(time.RFC3339))
	}
	switch cur := cellOf(cfg.TLS); {
	case m.Removed != nil:
		return fmt.Errorf("node: %s; %s: it cannot serve again: remove the directory and join the cell afresh as a new node, with another node ID",
			holds, m.Removed)
	case m.Cell != nil && cur != nil && m.Cell.CAKeyID != cur.CAKeyID:
		return fmt.Errorf("node: %s, not of %s, whose certificate this node has; "+
			"start with --data-dir pointing at this cell's directory (or with that cell's credentials), or remove the directory to join afresh",
			holds, cur)
	case m.NodeID != 0 && m.NodeID != cfg.NodeID:
		return fmt.Errorf("node: %s, not node %d; start it as node %d (--node-id %d), or point --data-dir at node %d's directory, or remove the directory to join afresh",
			holds, cfg.NodeID, m.NodeID, m.NodeID, cfg.NodeID)
	case m.RaftAddr != "" && m.RaftAddr != cfg.RaftAddr:
		return fmt.Errorf("node: %s at Raft address %s, not %s; a node keeps its Raft address: start it with --raft-addr %s "+
			"(--raft-listen-addr sets where it listens, if that differs)", holds, m.RaftAddr, cfg.RaftAddr, m.RaftAddr)
	case m.Shards != cfg.Shards:
		return fmt.Errorf("node: the cell in %s was created with %d shards, not %d; the shard count cannot change", dir, m.Shards, cfg.Shards)
	}
	return nil
}

func writeCellMeta(dir string, m cellMeta) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return pki.WriteFileAtomic(cellMetaPath(dir), b, 0o644)
}
