package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/troupe-cluster/troupe/cellstore/authz"
	"github.com/troupe-cluster/troupe/cellstore/engine"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	"github.com/troupe-cluster/troupe/cellstore/watch"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// fakeCluster records membership calls and backs up each shard as size
// bytes of a pattern, at the revision its state machine in backend is at.
type fakeCluster struct {
	sizes   []int
	calls   []string
	backend *MemBackend
}

func (f *fakeCluster) Members(context.Context) ([]*storev1.Member, error) { return nil, nil }

func (f *fakeCluster) AddMember(context.Context, uint64, string) error {
	f.calls = append(f.calls, "add")
	return nil
}

func (f *fakeCluster) RemoveMember(context.Context, uint64) error {
	f.calls = append(f.calls, "remove")
	return nil
}

func (f *fakeCluster) PinShard(_ context.Context, shard uint32) (ShardSnapshot, error) {
	pin, err := f.backend.StateMachine(shard).PinBackup()
	if err != nil {
		return nil, err
	}
	defer pin.Close()
	return fakePin{shard: shard, size: f.sizes[shard], status: pin.Status()}, nil
}

// fakePin is a shard pinned with status, holding size bytes of a pattern.
type fakePin struct {
	shard  uint32
	size   int
	status engine.FreezeStatus
}

func (p fakePin) Status() engine.FreezeStatus { return p.status }

func (p fakePin) WriteTo(w io.Writer, _ <-chan struct{}) error {
	data := shardData(p.shard, p.size)
	for len(data) > 0 { // in uneven writes, as a bufio.Writer would
		n := min(len(data), 300<<10)
		if _, err := w.Write(data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

func (fakePin) Close() error { return nil }

func shardData(shard uint32, size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*7) + byte(shard)
	}
	return b
}

// chunkStream is an Admin_BackupServer that keeps what is sent.
type chunkStream struct {
	grpc.ServerStream
	chunks []*storev1.BackupChunk
}

func (s *chunkStream) Send(c *storev1.BackupChunk) error {
	s.chunks = append(s.chunks, c)
	return nil
}

func (s *chunkStream) Context() context.Context { return context.Background() }

// denyChanges is an Authorizer that refuses membership changes.
type denyChanges struct{}

func (denyChanges) Authorize(_ context.Context, a Access) error {
	if a.Call == authz.CallChangeMembers {
		return storeerr.PermissionDenied.With("read only")
	}
	return nil
}

// newTestAdmin returns the Admin service of a server over unreplicated
// state machines; a fakeCluster backs up those.
func newTestAdmin(t *testing.T, shards uint32, auth Authorizer, c Cluster) *Admin {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Authorizer = auth
	hub := watch.NewHub(watch.DefaultConfig(), shards)
	b := newMemBackend(t, shards, hub)
	if f, ok := c.(*fakeCluster); ok {
		f.backend = b
	}
	s, err := New(cfg, b, hub, shards)
	if err != nil {
		t.Fatal(err)
	}
	return NewAdmin(s, c)
}

// Backup sends each shard in order, in chunks of at most backupChunkBytes,
// the last with the shard's revision and the CRC of all its data.
func TestAdminBackupChunks(t *testing.T) {
	sizes := []int{backupChunkBytes*2 + 12345, 0, backupChunkBytes}
	a := newTestAdmin(t, 3, AllowAll{}, &fakeCluster{sizes: sizes})
	// Shard i is at revision i+1.
	for sh := range uint32(3) {
		for n := 0; n <= int(sh); n++ {
			k := fmt.Sprintf("/k/%d", n)
			for i := 0; a.s.router.Shard(k) != sh; i++ {
				k = fmt.Sprintf("/k/%d-%d", n, i)
			}
			if _, err := a.s.Commit(context.Background(), &storev1.CommitRequest{TxnId: k, Groups: []*storev1.Group{{Ops: []*storev1.Op{put(k, "v")}}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	stream := &chunkStream{}
	if err := a.Backup(&storev1.BackupRequest{}, stream); err != nil {
		t.Fatal(err)
	}
	shard, data := uint32(0), []byte(nil)
	for i, c := range stream.chunks {
		if c.GetShard() != shard || c.GetShardCount() != 3 || len(c.GetData()) > backupChunkBytes {
			t.Fatalf("chunk %d: shard %d of %d, %d bytes; want shard %d", i, c.GetShard(), c.GetShardCount(), len(c.GetData()), shard)
		}
		data = append(data, c.GetData()...)
		if !c.GetLast() {
			continue
		}
		if !bytes.Equal(data, shardData(shard, sizes[shard])) {
			t.Fatalf("shard %d: %d bytes arrived, want %d", shard, len(data), sizes[shard])
		}
		if c.GetRevision() != uint64(shard)+1 || c.GetCrc32C() != storev1.UpdateBackupCRC(0, data) {
			t.Fatalf("shard %d: last chunk has revision %d and crc %x", shard, c.GetRevision(), c.GetCrc32C())
		}
		shard, data = shard+1, nil
	}
	if shard != 3 {
		t.Fatalf("%d shards complete, want 3", shard)
	}
}

// Membership requests are validated and authorized before the cluster
// sees them.
func TestAdminMembershipChecks(t *testing.T) {
	c := &fakeCluster{}
	a := newTestAdmin(t, 2, AllowAll{}, c)
	ctx := context.Background()
	for name, tc := range map[string]struct {
		req  *storev1.AddMemberRequest
		code codes.Code
		def  *storeerr.Error
	}{
		"no id":          {&storev1.AddMemberRequest{RaftAddress: "127.0.0.1:1"}, codes.InvalidArgument, storeerr.NoMemberID},
		"bad address":    {&storev1.AddMemberRequest{NodeId: 2, RaftAddress: "nowhere"}, codes.InvalidArgument, storeerr.BadMemberAddress},
		"shard count":    {&storev1.AddMemberRequest{NodeId: 2, RaftAddress: "127.0.0.1:1", ShardCount: 3}, codes.FailedPrecondition, storeerr.ShardCountDiffers},
		"same count":     {&storev1.AddMemberRequest{NodeId: 2, RaftAddress: "127.0.0.1:1", ShardCount: 2}, codes.OK, nil},
		"count not sent": {&storev1.AddMemberRequest{NodeId: 3, RaftAddress: "127.0.0.1:2"}, codes.OK, nil},
	} {
		if _, err := a.AddMember(ctx, tc.req); status.Code(err) != tc.code || storeerr.Of(err) != tc.def {
			t.Errorf("%s: %v, want %s", name, err, tc.code)
		}
	}
	if _, err := a.RemoveMember(ctx, &storev1.RemoveMemberRequest{}); status.Code(err) != codes.InvalidArgument || !storeerr.Is(err, storeerr.NoMemberID) {
		t.Errorf("remove without id: %v", err)
	}
	if len(c.calls) != 2 {
		t.Errorf("the cluster saw %v, want the two valid adds", c.calls)
	}

	ro := newTestAdmin(t, 2, denyChanges{}, c)
	if _, err := ro.RemoveMember(ctx, &storev1.RemoveMemberRequest{NodeId: 2}); status.Code(err) != codes.PermissionDenied || !storeerr.Is(err, storeerr.PermissionDenied) {
		t.Errorf("unauthorized remove: %v", err)
	}
	if _, err := ro.ListMembers(ctx, &storev1.ListMembersRequest{}); err != nil {
		t.Errorf("authorized list: %v", err)
	}
}
