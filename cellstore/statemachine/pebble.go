package statemachine

import (
	"errors"
	"io"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/engine"
)

// batchStorage is the engine's Storage over an indexed Pebble batch.
type batchStorage struct{ b *pebble.Batch }

var _ engine.Storage = batchStorage{}

func (s batchStorage) Get(key []byte) ([]byte, error) { return getValue(s.b, key) }

func (s batchStorage) Set(key, value []byte) error { return s.b.Set(key, value, nil) }

func (s batchStorage) Delete(key []byte) error { return s.b.Delete(key, nil) }

func (s batchStorage) Scan(lower, upper []byte, fn func(key, value []byte) bool) error {
	it, err := s.b.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		if !fn(it.Key(), it.Value()) {
			break
		}
	}
	return it.Close()
}

// reader is what Pebble databases, snapshots and batches share for reads.
type reader interface {
	Get(key []byte) ([]byte, io.Closer, error)
}

// getValue returns a copy of key's value, or nil if it does not exist.
func getValue(r reader, key []byte) ([]byte, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := append([]byte{}, v...)
	return out, closer.Close()
}

// pebbleLogger sends Pebble's logs to zap: its info chatter at debug level.
type pebbleLogger struct{ l *zap.SugaredLogger }

func (p pebbleLogger) Infof(format string, args ...any)  { p.l.Debugf(format, args...) }
func (p pebbleLogger) Errorf(format string, args ...any) { p.l.Errorf(format, args...) }
func (p pebbleLogger) Fatalf(format string, args ...any) { p.l.Fatalf(format, args...) }

func openPebble(dir string, log *zap.Logger) (*pebble.DB, error) {
	return pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{log.Sugar()}})
}
