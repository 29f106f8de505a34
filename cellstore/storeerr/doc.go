// Package storeerr defines, once each, the errors the cell store returns
// to its clients: the gRPC code, a stable reason and a fixed message of
// every one. The server, the node and the client library share these
// definitions (the model is etcd's api/v3rpc/rpctypes).
//
//	  store node                           wire                        client
//	storeerr.Frozen ──GRPCStatus()──► code UNAVAILABLE          ──► storeerr.Is(err, storeerr.Frozen)
//	storeerr.Compacted.With(…)        message "…: detail"            errors.Is(storeerr.FromError(err), …)
//	                                  ErrorInfo{Domain: "troupe.cell",
//	                                            Reason: "FROZEN"}
//
// # Server side
//
// A handler returns a definition as it is (it is an error), or an
// occurrence of it with detail:
//
//	return nil, storeerr.EmptyTxnID
//	return nil, storeerr.OverLimit.With("commit: %d groups, limit %d", n, max)
//
// Both carry the definition's code, and the definition's reason in an
// errdetails.ErrorInfo of Domain "troupe.cell", so that the client knows
// which error it got without reading the message. An occurrence's message
// is the definition's, then ": " and the detail. Wrapping either with
// fmt.Errorf("...: %w", err) keeps both: gRPC sends the status of the
// error wrapped, with the whole text as its message. Errors that the store
// does not define (a broken stream's, a storage failure's) pass through
// with their own code.
//
// # Client side
//
// A gRPC call returns a plain status error. Is and Of read the definition
// from it, wrapped or not; FromError turns it into an error that
// errors.Is matches against its definition, and leaves any other error
// as it is (clientlib does this for every attempt it makes).
//
//	if storeerr.Is(err, storeerr.Frozen) { ... }
//	switch storeerr.Of(err) { case storeerr.Overloaded, storeerr.Throttled: ... }
//
// Codes stay the contract for retries: a client retries Unavailable,
// DeadlineExceeded and ResourceExhausted whoever sent them (gRPC itself
// sends them too, without a reason), and keys on a definition where it
// needs to know which error it is: a compacted watch cursor, say.
//
// # Adding an error
//
// Add it to definitions.go with define, with a reason no other uses and
// the code the behaviour calls for; the table test checks that it
// crosses gRPC and is matched after. Never change the code or reason of
// a definition in use: clients of other versions key on them.
package storeerr
