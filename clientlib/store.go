package clientlib

import (
	"context"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/clientlib/cache"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Store is what the typed layer, informers, controllers, agents and
// schedulers need of a connection to a cell: read, list, watch, commit.
// *Client is one; cellstore/memstore's Store is another, for tests and the
// simulator. Every method may be called by any goroutine, concurrently.
//
// An implementation may also have Logger() *zap.Logger (informers log to
// it) and Validator() *Validator (typed writes enforce it).
type Store interface {
	// Commit sends one transaction; conflicts are in the response, an
	// error means the request failed (see Client.Commit).
	Commit(ctx context.Context, req *storev1.CommitRequest) (*storev1.CommitResponse, error)
	// Get reads key: nil, nil when it does not exist.
	Get(ctx context.Context, key string) (*storev1.KeyValue, error)
	// List reads every key under prefix, with the cursor to watch from.
	List(ctx context.Context, prefix string) (kvs []*storev1.KeyValue, cursor []byte, err error)
	// WatchStream follows the changes under prefix after cursor (from
	// List or an earlier response; empty: from now) until ctx ends or the
	// Stream is closed, as Client.Watch does. A cursor older than the
	// store keeps ends the stream with an error IsCompacted matches.
	WatchStream(ctx context.Context, prefix string, cursor []byte) Stream
}

// Stream is a watch as a Store gives it: Next blocks until the next
// response (events of consecutive revisions in commit order, and the
// cursor after them) or returns the error that ended the watch; Close
// ends it. *Watcher is one.
type Stream = cache.Stream

var _ Store = (*Client)(nil)

// WatchStream is Watch as a Store: the *Watcher as a Stream.
func (c *Client) WatchStream(ctx context.Context, prefix string, cursor []byte) Stream {
	return c.Watch(ctx, prefix, cursor)
}

// Logger is the client's logger (Config.Logger).
func (c *Client) Logger() *zap.Logger { return c.log }

// loggerOf returns s's logger, or a no-op one when s has none.
func loggerOf(s Store) *zap.Logger {
	if ls, ok := s.(interface{ Logger() *zap.Logger }); ok && ls.Logger() != nil {
		return ls.Logger()
	}
	return zap.NewNop()
}

// Logger passes the wrapped store's logger on, so that WithValidator
// keeps it.
func (s validatedStore) Logger() *zap.Logger { return loggerOf(s.Store) }
