package storeerr

import "google.golang.org/grpc/codes"

// Malformed requests (INVALID_ARGUMENT): an answer, never retried.
var (
	EmptyTxnID       = define(codes.InvalidArgument, "EMPTY_TXN_ID", "commit: txn_id is required")
	NoGroups         = define(codes.InvalidArgument, "NO_GROUPS", "commit: request has no groups")
	EmptyGroup       = define(codes.InvalidArgument, "EMPTY_GROUP", "group has no conditions and no operations")
	EmptyKey         = define(codes.InvalidArgument, "EMPTY_KEY", "empty key")
	NotUTF8          = define(codes.InvalidArgument, "NOT_UTF8", "string is not UTF-8")
	MalformedOp      = define(codes.InvalidArgument, "MALFORMED_OP", "malformed operation")
	OverLimit        = define(codes.InvalidArgument, "OVER_LIMIT", "request over a limit")
	BadCursor        = define(codes.InvalidArgument, "BAD_CURSOR", "malformed cursor")
	BadContinuation  = define(codes.InvalidArgument, "BAD_CONTINUATION", "continuation outside the prefix")
	ProposalTooLarge = define(codes.InvalidArgument, "PROPOSAL_TOO_LARGE", "proposal too large for Raft")
	NoMemberID       = define(codes.InvalidArgument, "NO_MEMBER_ID", "member: node_id is required")
	BadMemberAddress = define(codes.InvalidArgument, "BAD_MEMBER_ADDRESS", "member: raft_address must be host:port")
)

// Refusals for load (RESOURCE_EXHAUSTED): nothing was applied; retried on
// the same node after a backoff.
var (
	Overloaded = define(codes.ResourceExhausted, "OVERLOADED", "store node overloaded: too many proposals in flight; retry with backoff")
	Throttled  = define(codes.ResourceExhausted, "THROTTLED", "caller over its share of the store node's proposals in flight; retry with backoff")
	ShardBusy  = define(codes.ResourceExhausted, "SHARD_BUSY", "shard busy: its Raft queue is full; retry with backoff")
)

// The store cannot serve now (UNAVAILABLE): retried, on another node.
var (
	Frozen = define(codes.Unavailable, "FROZEN", "commit: a shard stayed frozen for a backup until the request's deadline; "+
		"the request's part there was not applied (parts on other shards may have been), retry with the same txn_id")
	BackupBusy = define(codes.Unavailable, "BACKUP_BUSY", "backup: a shard did not freeze: another backup holds it, "+
		"or this node's clock is behind the shard's by more than the freeze timeout; retry")
	NoConsistentCut  = define(codes.Unavailable, "NO_CONSISTENT_CUT", "backup: no consistent cut of the cell; retry")
	ShardUnavailable = define(codes.Unavailable, "SHARD_UNAVAILABLE", "shard unavailable")
	NodeStopping     = define(codes.Unavailable, "NODE_STOPPING", "store node stopping")
)

// Requests that ran out of time or were given up.
var (
	// Timeout: for a commit the outcome is unknown; a retry with the same
	// txn_id is safe and tells.
	Timeout     = define(codes.DeadlineExceeded, "TIMEOUT", "timed out")
	NotCaughtUp = define(codes.DeadlineExceeded, "NOT_CAUGHT_UP", "new member not caught up")
	Canceled    = define(codes.Canceled, "CANCELED", "canceled")
)

// Membership changes the cell's state rules out (FAILED_PRECONDITION,
// ABORTED).
var (
	ShardCountDiffers    = define(codes.FailedPrecondition, "SHARD_COUNT_DIFFERS", "shard count differs")
	MemberAtOtherAddress = define(codes.FailedPrecondition, "MEMBER_AT_OTHER_ADDRESS", "member at another address")
	MemberRemoved        = define(codes.FailedPrecondition, "MEMBER_REMOVED", "member removed for good")
	AddressTaken         = define(codes.FailedPrecondition, "ADDRESS_TAKEN", "address taken")
	RemoveSelf           = define(codes.FailedPrecondition, "REMOVE_SELF", "node removing itself")
	LastReplica          = define(codes.FailedPrecondition, "LAST_REPLICA", "last replica")
	RemovedMeanwhile     = define(codes.Aborted, "REMOVED_MEANWHILE", "member removed meanwhile")
	// NodeRemoved: every answer of a node the cell removed; ask another
	// member.
	NodeRemoved = define(codes.FailedPrecondition, "NODE_REMOVED", "this node was removed from the cell")
)

// Everything else.
var (
	PermissionDenied = define(codes.PermissionDenied, "PERMISSION_DENIED", "permission denied")
	// Compacted: a watch cursor older than a shard's change log; see
	// WatchCompacted.
	Compacted = define(codes.OutOfRange, "COMPACTED", "watch cursor compacted")
	Internal  = define(codes.Internal, "INTERNAL", "internal error")
)
