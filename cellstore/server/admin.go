package server

import (
	"context"
	"fmt"
	"net"

	"github.com/troupe-cluster/troupe/cellstore/authz"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Cluster is the membership and backup side of a store node; cellstore/node
// implements it with Dragonboat. Its methods are safe for concurrent use
// and return gRPC status errors.
type Cluster interface {
	// Members lists every shard's replicas, merged by node.
	Members(ctx context.Context) ([]*storev1.Member, error)
	// AddMember adds node id, reached at raftAddr, to every shard that
	// lacks it.
	AddMember(ctx context.Context, id uint64, raftAddr string) error
	// RemoveMember removes node id from every shard that has it.
	RemoveMember(ctx context.Context, id uint64) error
	// PinShard pins this node's replica of shard, read after a ReadIndex
	// (so it holds every commit acknowledged before the call), for a
	// backup. The caller closes it.
	PinShard(ctx context.Context, shard uint32) (ShardSnapshot, error)
}

// backupChunkBytes bounds a BackupChunk's data, well within what a default
// gRPC client accepts.
const backupChunkBytes = 1 << 20

var _ storev1.AdminServer = (*Admin)(nil)

// Admin implements storev1.AdminServer: the cell's membership and backups,
// authorized through the Server's hook like every other request.
type Admin struct {
	storev1.UnimplementedAdminServer
	s       *Server
	cluster Cluster
}

// NewAdmin returns the Admin service of the node that s serves.
func NewAdmin(s *Server, cluster Cluster) *Admin {
	return &Admin{s: s, cluster: cluster}
}

// ListMembers implements storev1.AdminServer.
func (a *Admin) ListMembers(ctx context.Context, _ *storev1.ListMembersRequest) (*storev1.ListMembersResponse, error) {
	if err := a.s.admit(ctx, Access{Method: "ListMembers", Call: authz.CallListMembers}); err != nil {
		return nil, err
	}
	ms, err := a.cluster.Members(ctx)
	if err != nil {
		return nil, err
	}
	return &storev1.ListMembersResponse{Members: ms, ShardCount: a.s.router.Shards()}, nil
}

// AddMember implements storev1.AdminServer.
func (a *Admin) AddMember(ctx context.Context, req *storev1.AddMemberRequest) (*storev1.AddMemberResponse, error) {
	if req.GetNodeId() == 0 {
		return nil, storeerr.NoMemberID
	}
	if _, _, err := net.SplitHostPort(req.GetRaftAddress()); err != nil {
		return nil, storeerr.BadMemberAddress
	}
	if n := req.GetShardCount(); n != 0 && n != a.s.router.Shards() {
		return nil, storeerr.ShardCountDiffers.With("add member: node %d has %d shards, the cell %d; the shard count cannot change", req.GetNodeId(), n, a.s.router.Shards())
	}
	if err := a.s.admit(ctx, Access{Method: "AddMember", Call: authz.CallChangeMembers}); err != nil {
		return nil, err
	}
	if err := a.cluster.AddMember(ctx, req.GetNodeId(), req.GetRaftAddress()); err != nil {
		return nil, err
	}
	ms, err := a.cluster.Members(ctx)
	return &storev1.AddMemberResponse{Members: ms}, err
}

// RemoveMember implements storev1.AdminServer.
func (a *Admin) RemoveMember(ctx context.Context, req *storev1.RemoveMemberRequest) (*storev1.RemoveMemberResponse, error) {
	if req.GetNodeId() == 0 {
		return nil, storeerr.NoMemberID
	}
	if err := a.s.admit(ctx, Access{Method: "RemoveMember", Call: authz.CallChangeMembers}); err != nil {
		return nil, err
	}
	if err := a.cluster.RemoveMember(ctx, req.GetNodeId()); err != nil {
		return nil, err
	}
	ms, err := a.cluster.Members(ctx)
	return &storev1.RemoveMemberResponse{Members: ms}, err
}

// Backup implements storev1.AdminServer: every shard pinned at one
// consistent cut (backup.go), then sent in turn, cut into chunks, the last
// with the shard's revision and checksum.
func (a *Admin) Backup(_ *storev1.BackupRequest, stream storev1.Admin_BackupServer) error {
	ctx := stream.Context()
	if err := a.s.admit(ctx, Access{Method: "Backup", Call: authz.CallBackup}); err != nil {
		return err
	}
	pins, err := a.s.consistentCut(ctx, a.cluster)
	if err != nil {
		return err
	}
	defer closeAll(pins)
	for sh, pin := range pins {
		w := &chunkWriter{stream: stream, shards: a.s.router.Shards(), shard: uint32(sh)}
		if err := pin.WriteTo(w, ctx.Done()); err != nil {
			if ctx.Err() != nil {
				return storeerr.Canceled.With("backup: shard %d: %v", sh, ctx.Err())
			}
			return fmt.Errorf("backup: shard %d: %w", sh, err) // keeps err's code
		}
		if err := w.send(true, pin.Status().Revision); err != nil {
			return err
		}
	}
	return nil
}

// chunkWriter cuts one shard's backup into BackupChunks.
type chunkWriter struct {
	stream        storev1.Admin_BackupServer
	shards, shard uint32
	buf           []byte
	crc           uint32
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	w.crc = storev1.UpdateBackupCRC(w.crc, p)
	for n := 0; n < len(p); {
		k := min(len(p)-n, backupChunkBytes-len(w.buf))
		w.buf = append(w.buf, p[n:n+k]...)
		n += k
		if len(w.buf) == backupChunkBytes {
			if err := w.send(false, 0); err != nil {
				return n, err
			}
		}
	}
	return len(p), nil
}

// send sends the buffered data, as the shard's last chunk if last.
func (w *chunkWriter) send(last bool, rev uint64) error {
	c := &storev1.BackupChunk{ShardCount: w.shards, Shard: w.shard, Data: w.buf, Last: last}
	if last {
		c.Revision, c.Crc32C = rev, w.crc
	}
	if err := w.stream.Send(c); err != nil {
		return fmt.Errorf("backup: shard %d: %w", w.shard, err) // keeps err's code
	}
	w.buf = nil
	return nil
}
