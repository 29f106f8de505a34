package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/lni/dragonboat/v4"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protodelim"

	"github.com/troupe-cluster/troupe/cellstore/server"
	"github.com/troupe-cluster/troupe/cellstore/statemachine"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Backup and restore. A backup holds every key of every shard's state
// machine: data with versions, the change log, the remembered txn
// outcomes and the revision, so a restored cell serves the same versions
// and revisions, resumes watch cursors of the old cell that its change
// log still covers, and answers retried txn_ids as the old one would.
// The shards are read at one consistent cut of the cell (the server
// package's backup.go freezes them, pins each through PinShard, thaws
// them, then streams the pins).
//
// A backup file is backupMagic followed by the Admin.Backup stream's
// chunks, each length-delimited (protodelim).
const backupMagic = "troupe-backup 1\n"

// PinShard implements server.Cluster: after a ReadIndex, this node's
// replica holds every commit acknowledged before the call.
func (b *raftBackend) PinShard(ctx context.Context, shard uint32) (server.ShardSnapshot, error) {
	if _, err := b.Read(ctx, shard, statemachine.GetQuery{}, true); err != nil {
		return nil, err
	}
	m := b.n.stateMachine(shard)
	if m == nil {
		return nil, storeerr.ShardUnavailable.With("backup: shard %d is not open on this node", shard)
	}
	pin, err := m.PinBackup()
	if err != nil {
		return nil, storeerr.ShardUnavailable.With("backup: shard %d: %v", shard, err)
	}
	return pin, nil
}

// BackupSummary describes a backup.
type BackupSummary struct {
	Shards    uint32
	Revisions []uint64 // by shard
}

// backupCheck follows a backup's chunks and checks that they make a whole
// backup: every shard once, in order, each with its checksum.
type backupCheck struct {
	sum   BackupSummary
	shard uint32 // whose chunks come next
	crc   uint32
}

func (bc *backupCheck) add(c *storev1.BackupChunk) error {
	if bc.sum.Shards == 0 {
		bc.sum.Shards = c.GetShardCount()
	}
	switch {
	case c.GetShardCount() == 0 || c.GetShardCount() != bc.sum.Shards:
		return fmt.Errorf("backup: a chunk of a %d-shard cell in a %d-shard backup", c.GetShardCount(), bc.sum.Shards)
	case bc.shard == bc.sum.Shards:
		return errors.New("backup: data after the last shard")
	case c.GetShard() != bc.shard:
		return fmt.Errorf("backup: a chunk of shard %d where shard %d's come", c.GetShard(), bc.shard)
	}
	bc.crc = storev1.UpdateBackupCRC(bc.crc, c.GetData())
	if c.GetLast() {
		if bc.crc != c.GetCrc32C() {
			return fmt.Errorf("backup: shard %d: checksum mismatch, the backup is damaged", bc.shard)
		}
		bc.sum.Revisions = append(bc.sum.Revisions, c.GetRevision())
		bc.shard, bc.crc = bc.shard+1, 0
	}
	return nil
}

// complete checks that every shard has come.
func (bc *backupCheck) complete() error {
	if bc.sum.Shards == 0 || bc.shard < bc.sum.Shards {
		return fmt.Errorf("backup: incomplete: %d of %d shards", bc.shard, bc.sum.Shards)
	}
	return nil
}

// WriteBackup writes the chunks that recv returns, until io.EOF, to w as
// a backup file, and checks that they make a whole backup.
func WriteBackup(w io.Writer, recv func() (*storev1.BackupChunk, error)) (*BackupSummary, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	if _, err := bw.WriteString(backupMagic); err != nil {
		return nil, err
	}
	var bc backupCheck
	for {
		c, err := recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("backup: %w", err)
		}
		if err := bc.add(c); err != nil {
			return nil, err
		}
		if _, err := protodelim.MarshalTo(bw, c); err != nil {
			return nil, err
		}
	}
	if err := bc.complete(); err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	return &bc.sum, nil
}

// Restore creates a store node's data directory, which must be empty or
// absent, from a backup file: the cell's shard count (cell.json) and every
// shard's state. A node started on it starts a new one-node cell serving
// exactly the backed-up state (see compactRestored); add other nodes with
// AddMember. If Restore fails it leaves no state behind.
func Restore(dataDir string, r io.Reader, log *zap.Logger) (*BackupSummary, error) {
	if entries, err := os.ReadDir(dataDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	} else if len(entries) > 0 {
		return nil, fmt.Errorf("restore: %s is not empty", dataDir)
	}
	br := bufio.NewReaderSize(r, 1<<20)
	magic := make([]byte, len(backupMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != backupMagic {
		return nil, errors.New("restore: not a troupe backup file")
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, err
	}
	sum, err := restoreShards(stateDir(dataDir), br, log)
	if err == nil {
		err = writeCellMeta(dataDir, cellMeta{Shards: sum.Shards, Restored: true})
	}
	if err != nil {
		os.RemoveAll(stateDir(dataDir))
		return nil, fmt.Errorf("restore: %w", err)
	}
	return sum, nil
}

func restoreShards(dir string, br *bufio.Reader, log *zap.Logger) (*BackupSummary, error) {
	bc := &backupCheck{}
	for sh := uint32(0); sh == 0 || sh < bc.sum.Shards; sh++ {
		sr := &shardReader{r: br, check: bc}
		rev, err := statemachine.Restore(statemachine.Config{Dir: dir, Logger: log}, sh, sr)
		if err != nil {
			return nil, err
		}
		if _, err := io.Copy(io.Discard, sr); err != nil { // up to the shard's last chunk
			return nil, err
		}
		if rev != bc.sum.Revisions[sh] {
			return nil, fmt.Errorf("shard %d: restored revision %d, the backup says %d", sh, rev, bc.sum.Revisions[sh])
		}
	}
	if _, err := br.Peek(1); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the last shard")
	}
	return &bc.sum, bc.complete()
}

// shardReader reads one shard's data from a backup file, checking each
// chunk, and ends with the shard's last chunk.
type shardReader struct {
	r     *bufio.Reader
	check *backupCheck
	data  []byte
	last  bool
}

func (sr *shardReader) Read(p []byte) (int, error) {
	for len(sr.data) == 0 {
		if sr.last {
			return 0, io.EOF
		}
		c := &storev1.BackupChunk{}
		if err := protodelim.UnmarshalFrom(sr.r, c); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		if err := sr.check.add(c); err != nil {
			return 0, err
		}
		sr.data, sr.last = c.GetData(), c.GetLast()
	}
	n := copy(p, sr.data)
	sr.data = sr.data[n:]
	return n, nil
}

// compactRestored runs at the first start of a restored node. Its state
// is in the state machines but not in the Raft log, so a member joining
// while the log still begins at its first entry would replay the log onto
// an empty state machine and miss it. Each shard therefore applies an
// empty entry (Dragonboat sends a joining member an on-disk state machine
// only if its snapshot is of an index some entry was applied at), takes a
// snapshot and compacts its whole log behind it: joining members are sent
// the snapshot. The node serves nothing until then, and a restored cell
// starts with this node alone, so no member can join earlier.
func (n *Node) compactRestored(meta cellMeta) error {
	b := n.backend
	empty, err := statemachine.EncodeEntry()
	if err != nil {
		return err
	}
	opt := dragonboat.SnapshotOption{OverrideCompactionOverhead: true}
	for sh := range n.cfg.Shards {
		sid := shardID(sh)
		err := b.attempt(context.Background(), func(ctx context.Context) error {
			lr, err := b.nh.GetLogReader(sid)
			if err != nil {
				return err
			}
			if first, _ := lr.GetRange(); first > 1 {
				return nil
			}
			if _, err := b.nh.SyncPropose(ctx, b.sessions[sh], empty); err != nil {
				return err
			}
			if _, err := b.nh.SyncRequestSnapshot(ctx, sid, opt); err != nil {
				return err
			}
			return errWait // the log is compacted after the snapshot
		})
		if err != nil {
			return fmt.Errorf("node: compact the log of restored shard %d: %w", sh, err)
		}
	}
	meta.Restored = false
	return writeCellMeta(n.cfg.DataDir, meta)
}
