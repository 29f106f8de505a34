package storeerr

import (
	"fmt"

	"google.golang.org/grpc/status"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// WatchCompacted is the occurrence of Compacted that ends a watch whose
// cursor is older than a shard's change log; d rides in its status, for
// the client to resume from d.OldestCursor (CompactedDetailOf).
func WatchCompacted(d *storev1.CompactedDetail) error {
	return Compacted.occur(fmt.Sprintf("watch: shard %d: revision %d is compacted; oldest kept is %d; relist and watch from the new cursor",
		d.GetShard(), d.GetRequestedRevision(), d.GetOldestRevision()), d)
}

// CompactedDetailOf returns the CompactedDetail err's status carries, or
// nil. The detail is only ever sent with Compacted, so it identifies that
// error too, also from a store that sends it without the reason.
func CompactedDetailOf(err error) *storev1.CompactedDetail {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if cd, ok := d.(*storev1.CompactedDetail); ok {
			return cd
		}
	}
	return nil
}
