package server

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The store's gRPC errors, each defined once with its code. Handlers wrap
// them with detail through errf; clients match on the code.
var (
	errEmptyTxnID      = status.Error(codes.InvalidArgument, "commit: txn_id is required")
	errNoGroups        = status.Error(codes.InvalidArgument, "commit: request has no groups")
	errInvalid         = codes.InvalidArgument
	errOverloaded      = status.Error(codes.ResourceExhausted, "store node overloaded: too many proposals in flight; retry with backoff")
	errFrozen          = status.Error(codes.Unavailable, "commit: a shard stayed frozen for a backup until the request's deadline; the request's part there was not applied (parts on other shards may have been), retry with the same txn_id")
	errBackupBusy      = status.Error(codes.Unavailable, "backup: a shard did not freeze: another backup holds it, or this node's clock is behind the shard's by more than the freeze timeout; retry")
	errCompactedCode   = codes.OutOfRange
	errUnavailableCode = codes.Unavailable
)

func errf(c codes.Code, format string, args ...any) error {
	return status.Errorf(c, format, args...)
}
