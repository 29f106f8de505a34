package node

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/server"
)

// recoverTxns resolves, on the shards this node leads, the cross-shard
// transactions whose driver did not finish them by their deadline (it
// died, or lost its way), until the node stops. It looks every half
// TxnTimeout, so a transaction stays held at most 1.5 TxnTimeouts after
// its driver stopped.
func (n *Node) recoverTxns(srv *server.Server, timeout time.Duration) {
	tick := time.NewTicker(max(timeout/2, 50*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-tick.C:
		}
		for i := range n.cfg.Shards {
			if leader, _, ok, err := n.nh.GetLeaderID(shardID(i)); err != nil || !ok || leader != n.cfg.NodeID {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			if _, err := srv.ResolveOverdue(ctx, i); err != nil {
				n.log.Warn("resolving overdue cross-shard transactions", zap.Uint32("shard", i), zap.Error(err))
			}
			cancel()
		}
	}
}
