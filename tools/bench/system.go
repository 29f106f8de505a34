package bench

import (
	"context"
	"errors"
	"sync"
)

// System is a store under test, already running and reachable. It hands out
// sessions; NewSession may be called from several goroutines at once.
type System interface {
	// Name labels the system's result lines ("troupe", "etcd").
	Name() string
	// NewSession opens the session of client id (0..n-1). A system with
	// several endpoints spreads sessions over them by id, round-robin.
	NewSession(ctx context.Context, id int) (Session, error)
}

// Session is one benchmark client. Only one goroutine uses a session at a
// time. A conflict is an Outcome with Committed false, never an error; an
// error means the request could not be carried out and aborts the run.
type Session interface {
	// Put writes value at key unconditionally and returns the version the
	// write gave the key.
	Put(ctx context.Context, key string, value []byte) (version uint64, err error)
	// PutEach writes value at each of keys unconditionally, each key in a
	// commit of its own, the commits sent at once (the one use of a
	// session by several goroutines), and returns when all are done.
	PutEach(ctx context.Context, keys []string, value []byte) error
	// CompareAndPut writes value at key if the key's version is version
	// (0: the key must not exist). On commit Outcome.Version is the
	// version the write gave the key; on conflict it is the key's current
	// version (0: absent).
	CompareAndPut(ctx context.Context, key string, version uint64, value []byte) (Outcome, error)
	// Place commits a placement as one atomic unit (see Placement). On
	// commit Outcome.Version is the task key's new version.
	Place(ctx context.Context, p Placement) (Outcome, error)
	// Close releases the session's resources (not the system's).
	Close() error
}

// Outcome is the result of a conditional commit.
type Outcome struct {
	Committed bool
	// Version: see the Session method that returned it.
	Version uint64
}

// Placement is a scheduler's commit binding a task to a machine:
//
//   - condition: Task does not exist yet (version 0),
//   - put TaskValue at Task,
//   - put BindingValue at Binding,
//   - add Delta to the int64 counter at Counter (no effective bound).
type Placement struct {
	Task         string
	TaskValue    []byte
	Binding      string
	BindingValue []byte
	Counter      string
	Delta        int64
}

// AtOnce calls f for each of keys, each call in a goroutine of its own,
// and returns their errors joined once all have returned: the fan-out of
// a Session's PutEach.
func AtOnce(keys []string, f func(i int, key string) error) error {
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, key := range keys {
		wg.Go(func() { errs[i] = f(i, key) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
