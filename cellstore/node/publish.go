package node

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	"github.com/troupe-cluster/troupe/cellstore/statemachine"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// The node's record. As an etcd member publishes its name and client
// URLs through Raft when it starts, a store node publishes what the
// cell's members do not otherwise know of it: the gRPC address it
// advertises to clients, its Raft address and the version of its binary,
// as a storev1.NodeRecord at storev1.NodeRecordKey(id) (/store/nodes/<id>;
// the records share one shard key, so one shard holds them all). Once it
// can commit, at every start, it reads its record and writes it only if
// it differs, conditioned on the version it read. It writes through its
// own proposers, as the store, not through the Store service: no client
// identity but an admin (whose rules allow every key) may write there,
// so no node or client can forge another node's record. ListMembers
// (Members) fills each member's gRPC address and version from the
// records, ignoring those of nodes that are not members; RemoveMember
// deletes the removed node's.

// maxPublishPause bounds the pause between two attempts to publish.
const maxPublishPause = 2 * time.Second

// record is what the node publishes about itself.
func (n *Node) record() *storev1.NodeRecord {
	return &storev1.NodeRecord{NodeId: n.cfg.NodeID, GrpcAddress: n.advertisedGRPC(), RaftAddress: n.cfg.RaftAddr, Version: n.cfg.Version}
}

// advertisedGRPC is the gRPC address the node gives others:
// AdvertiseGRPCAddr if set, else GRPCAddr with the port the listener got (port 0 picks one) and, when GRPCAddr names no
// host or an unspecified one (0.0.0.0, ::), the host of the Raft address,
// by which the other nodes know this one.
func (n *Node) advertisedGRPC() string {
	if n.cfg.AdvertiseGRPCAddr != "" {
		return n.cfg.AdvertiseGRPCAddr
	}
	host, _, err := net.SplitHostPort(n.cfg.GRPCAddr)
	_, port, lerr := net.SplitHostPort(n.GRPCAddr())
	if err != nil || lerr != nil {
		return n.GRPCAddr()
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if raftHost, _, err := net.SplitHostPort(n.cfg.RaftAddr); err == nil {
			host = raftHost
		}
	}
	return net.JoinHostPort(host, port)
}

// publish publishes the node's record, retrying until it is stored (or
// found stored), the node stops, or the cell removes it; then it closes
// n.published. A joining node retries until the cell has added it.
func (n *Node) publish() {
	defer close(n.published)
	ctx, cancel := stopContext(n.stop)
	defer cancel()
	rec := n.record()
	pause := n.cfg.RTT
	for {
		wrote, err := n.backend.publishRecord(ctx, rec)
		if err == nil {
			if wrote {
				n.log.Info("published the node's record", zap.String("key", storev1.NodeRecordKey(rec.GetNodeId())),
					zap.String("grpc", rec.GetGrpcAddress()), zap.String("version", rec.GetVersion()))
			}
			return
		}
		if ctx.Err() != nil || len(n.RemovedShards()) > 0 {
			return
		}
		n.log.Debug("publishing the node's record", zap.Error(err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, maxPublishPause)
	}
}

// recordShard is the shard holding the nodes' records.
func (b *raftBackend) recordShard() uint32 {
	return keyspace.NewRouter(b.n.cfg.Shards).Shard(storev1.NodeRecordPrefix)
}

// publishRecord stores rec unless it is stored already (wrote: it was
// not).
func (b *raftBackend) publishRecord(ctx context.Context, rec *storev1.NodeRecord) (wrote bool, err error) {
	key := storev1.NodeRecordKey(rec.GetNodeId())
	shard := b.recordShard()
	res, err := b.Read(ctx, shard, statemachine.GetQuery{Key: key}, true)
	if err != nil {
		return false, err
	}
	kv := res.(*statemachine.GetResult).KV
	if kv != nil {
		cur := &storev1.NodeRecord{}
		if proto.Unmarshal(kv.GetValue(), cur) == nil && proto.Equal(cur, rec) {
			return false, nil
		}
	}
	value, err := proto.MarshalOptions{Deterministic: true}.Marshal(rec)
	if err != nil {
		return false, err
	}
	return true, b.commitInternal(ctx, shard, "publish", &storev1.Group{
		Conditions: []*storev1.Condition{{Key: key, Version: kv.GetVersion()}},
		Ops:        []*storev1.Op{{Op: &storev1.Op_Put{Put: &storev1.Put{Key: key, Value: value}}}},
	})
}

// forgetRecord deletes the record of node id, removed from the cell. It
// is best effort: Members ignores the records of nodes that are not
// members.
func (b *raftBackend) forgetRecord(ctx context.Context, id uint64) {
	key := storev1.NodeRecordKey(id)
	err := b.commitInternal(ctx, b.recordShard(), "forget", &storev1.Group{
		Ops: []*storev1.Op{{Op: &storev1.Op_Delete{Delete: &storev1.Delete{Key: key}}}},
	})
	if err != nil {
		b.n.log.Warn("deleting a removed node's record", zap.Uint64("node", id), zap.String("key", key), zap.Error(err))
	}
}

// nodeRecords returns the published records by node ID: read after a
// ReadIndex, or from this node's replica if that fails (a record changes
// only when its node restarts changed).
func (b *raftBackend) nodeRecords(ctx context.Context) (map[uint64]*storev1.NodeRecord, error) {
	out := map[uint64]*storev1.NodeRecord{}
	q := statemachine.RangeQuery{Prefix: storev1.NodeRecordPrefix, Limit: 1000}
	shard := b.recordShard()
	for {
		res, err := b.Read(ctx, shard, q, true)
		if err != nil {
			if res, err = b.Read(ctx, shard, q, false); err != nil {
				return nil, err
			}
		}
		r := res.(*statemachine.RangeResult)
		for _, kv := range r.KVs {
			rec := &storev1.NodeRecord{}
			// A record under another node's key is not that node's.
			if proto.Unmarshal(kv.GetValue(), rec) == nil && kv.GetKey() == storev1.NodeRecordKey(rec.GetNodeId()) {
				out[rec.GetNodeId()] = rec
			}
		}
		if !r.More || len(r.KVs) == 0 {
			return out, nil
		}
		q.After = r.KVs[len(r.KVs)-1].GetKey()
	}
}

// errFrozen: a backup holds the shard frozen; the write is tried again.
var errFrozen = errors.New("the shard is frozen for a backup")

// commitInternal commits group g on shard as the store itself: proposed
// through this node's proposer, past the Store service and its
// authorization. what names the write in its txn_id.
func (b *raftBackend) commitInternal(ctx context.Context, shard uint32, what string, g *storev1.Group) error {
	cfg := b.n.cfg.Server
	now := cfg.Now()
	h := fnv.New64a()
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(g)
	if err != nil {
		return err
	}
	h.Write(body)
	p := &storev1.Proposal{
		TxnId:             fmt.Sprintf("store-node-%d-%s-%d", b.n.cfg.NodeID, what, now.UnixNano()),
		Groups:            []*storev1.Group{g},
		GroupIndexes:      []uint32{0},
		NowUnixNanos:      now.UnixNano(),
		DedupeWindowNanos: int64(cfg.DedupeWindow),
		LogRetention:      cfg.LogRetention,
		RequestHash:       h.Sum64(),
	}
	out, err := b.Propose(ctx, shard, p)
	switch {
	case err != nil:
		return err
	case out.GetFrozen():
		return errFrozen
	case len(out.GetGroups()) != 1:
		return fmt.Errorf("node: %s: shard %d returned %d results for 1 group", what, shard, len(out.GetGroups()))
	case !out.GetGroups()[0].GetCommitted():
		f := out.GetGroups()[0].GetFailure()
		return fmt.Errorf("node: %s: %s %s: %s", what, f.GetReason(), f.GetKey(), f.GetMessage())
	}
	return nil
}
