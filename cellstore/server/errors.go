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
	errFrozen          = status.Error(codes.Unavailable, "commit: a shard stayed frozen for a backup until the request's deadline; nothing was applied, retry")
	errBackupBusy      = status.Error(codes.Unavailable, "backup: another backup holds the cell frozen; retry")
	errCompactedCode   = codes.OutOfRange
	errUnavailableCode = codes.Unavailable
)

func errf(c codes.Code, format string, args ...any) error {
	return status.Errorf(c, format, args...)
}
