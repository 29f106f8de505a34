package clientlib

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/clientlib/cache"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// NewInformer returns a cache of the objects of kind k whose keys start
// with k.Prefix+within, kept current by s's watch, with the given
// indexes. Run it, and read it after WaitForSync. Values that are not
// valid objects of the kind at their keys (see DecodeAt) are skipped,
// logged once to s's logger (its Logger method, if it has one) and
// reported to the handlers' OnUnreadable (see
// EventRecorder.RecordUnreadable).
func NewInformer[T Object](s Store, k Kind[T], within string, indexes map[string]cache.IndexFunc[T]) *cache.Informer[T] {
	return cache.NewInformer(cache.InformerConfig[T]{
		Prefix:      k.Prefix + within,
		List:        s.List,
		Watch:       s.WatchStream,
		IsCompacted: IsCompacted,
		Decode:      func(key string, value []byte, version uint64) (T, error) { return DecodeAt(k, key, value, version) },
		Reread:      func(_ string, value []byte, version uint64) (T, error) { return Decode(k, value, version) },
		Indexes:     indexes,
		Logger:      loggerOf(s),
	})
}

// IsCompacted reports whether err says a watch cursor was compacted.
func IsCompacted(err error) bool { return errors.Is(err, ErrCompacted) }

// Index names and functions for the common caches.
const (
	IndexJob       = "job"       // tasks by "<namespace>/<job>"
	IndexMachine   = "machine"   // tasks, bindings and runs by machine
	IndexScheduler = "scheduler" // pending (unbound) tasks by scheduler name
)

// TaskIndexes index tasks by job, by machine (bound ones) and, for
// pending ones, by scheduler.
func TaskIndexes() map[string]cache.IndexFunc[*troupev1.Task] {
	return map[string]cache.IndexFunc[*troupev1.Task]{
		IndexJob: func(t *troupev1.Task) []string {
			return []string{t.GetMetadata().GetNamespace() + "/" + t.GetSpec().GetJob()}
		},
		IndexMachine: func(t *troupev1.Task) []string { return nonEmpty(t.GetBinding().GetMachine()) },
		IndexScheduler: func(t *troupev1.Task) []string {
			if !Pending(t) {
				return nil
			}
			return []string{t.GetSpec().GetScheduler()}
		},
	}
}

// BindingIndexes index bindings by machine.
func BindingIndexes() map[string]cache.IndexFunc[*troupev1.Binding] {
	return map[string]cache.IndexFunc[*troupev1.Binding]{
		IndexMachine: func(b *troupev1.Binding) []string { return nonEmpty(b.GetMachine()) },
	}
}

// Pending reports whether t waits for a scheduler: not bound, and not in
// a final phase (a finished task is unbound too).
func Pending(t *troupev1.Task) bool {
	if t.GetBinding().GetMachine() != "" {
		return false
	}
	switch t.GetStatus().GetPhase() {
	case troupev1.TaskPhase_TASK_PHASE_UNSPECIFIED, troupev1.TaskPhase_TASK_PHASE_PENDING, troupev1.TaskPhase_TASK_PHASE_PREEMPTED:
		return true
	}
	return false
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// StartPolicies loads the cell's ValidationPolicies and keeps following
// them until ctx ends; from then on typed writes through c enforce them,
// as every other client that started its policies does.
func (c *Client) StartPolicies(ctx context.Context) error {
	v, err := NewValidator()
	if err != nil {
		return err
	}
	inf := NewInformer(c, ValidationPolicies, "", nil)
	v.Follow(inf, func(err error) {
		if err != nil {
			c.log.Warn("clientlib: some validation policies do not compile and are not enforced", zap.Error(err))
		}
	})
	go inf.Run(ctx)
	if err := inf.WaitForSync(ctx); err != nil {
		return fmt.Errorf("clientlib: load validation policies: %w", err)
	}
	c.validator.Store(v)
	return nil
}

// Validator is the validator typed writes through c use (nil before
// StartPolicies: the built-in rules).
func (c *Client) Validator() *Validator { return c.validator.Load() }
