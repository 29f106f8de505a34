package storev1

import "strconv"

// Key returns the key an operation touches ("" for an operation of no
// known type).
func (o *Op) Key() string {
	switch op := o.GetOp().(type) {
	case *Op_Put:
		return op.Put.GetKey()
	case *Op_Delete:
		return op.Delete.GetKey()
	case *Op_Add:
		return op.Add.GetKey()
	}
	return ""
}

// FirstKey returns the key of a group's first condition, or else of its
// first operation ("" for an empty group).
func (g *Group) FirstKey() string {
	if cs := g.GetConditions(); len(cs) > 0 {
		return cs[0].GetKey()
	}
	if ops := g.GetOps(); len(ops) > 0 {
		return ops[0].Key()
	}
	return ""
}

// NodeRecordPrefix holds the store nodes' NodeRecords, one key per node.
// Its keys share one shard key (/store/nodes), so they all live on one
// shard, which one read lists.
const NodeRecordPrefix = "/store/nodes/"

// NodeRecordKey is the key of node id's NodeRecord.
func NodeRecordKey(id uint64) string { return NodeRecordPrefix + strconv.FormatUint(id, 10) }
