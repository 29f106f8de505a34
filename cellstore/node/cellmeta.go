package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// cellMeta is what a node's data directory records about its cell.
type cellMeta struct {
	Shards uint32 `json:"shards"`
	// Restored: the state machines hold restored state that the Raft log
	// does not, until the first start compacts the log (compactRestored).
	Restored bool `json:"restored,omitempty"`
	// Joined: the node joined an existing cell (Config.Join) and its
	// replicas start as non-voting members (learner.go).
	Joined bool `json:"joined,omitempty"`
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

// checkCellMeta records the shard count on first start and refuses to
// start with another one later.
func checkCellMeta(dir string, shards uint32) (cellMeta, error) {
	m, err := readCellMeta(dir)
	switch {
	case err != nil:
		return m, err
	case m.Shards == 0:
		m.Shards = shards
		return m, writeCellMeta(dir, m)
	case m.Shards != shards:
		return m, fmt.Errorf("node: the cell in %s was created with %d shards, not %d; the shard count cannot change", dir, m.Shards, shards)
	}
	return m, nil
}

func writeCellMeta(dir string, m cellMeta) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return os.WriteFile(cellMetaPath(dir), b, 0o644)
}
