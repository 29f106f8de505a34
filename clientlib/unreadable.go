package clientlib

import (
	"errors"
	"fmt"
	"strings"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
)

// ErrUnreadable matches (errors.Is) the error of a stored value that is not
// a valid object of its kind at its key (see DecodeAt).
var ErrUnreadable = errors.New("unreadable object")

// ReasonUnreadable is the reason of the Warning events that say a reader
// skipped an unreadable value (EventRecorder.RecordUnreadable).
const ReasonUnreadable = "Unreadable"

// UnreadableError says why the value at Key, written at Version, is not a
// valid object of kind Kind there: Err is the decoding or validation
// error.
type UnreadableError struct {
	Kind    string
	Key     string
	Version uint64
	Err     error
}

func (e *UnreadableError) Error() string {
	return fmt.Sprintf("unreadable %s at %s (version %d): %v", e.Kind, e.Key, e.Version, e.Err)
}

// Is makes errors.Is(err, ErrUnreadable) true.
func (e *UnreadableError) Is(target error) bool { return target == ErrUnreadable }

// Unwrap returns the decoding or validation error.
func (e *UnreadableError) Unwrap() error { return e.Err }

// Unreadables is List's error when it skipped unreadable values, one
// *UnreadableError each, in key order; the objects List returned with it
// are all the others.
type Unreadables []*UnreadableError

func (u Unreadables) Error() string {
	parts := make([]string, len(u))
	for i, e := range u {
		parts[i] = e.Error()
	}
	return fmt.Sprintf("%d unreadable value(s) skipped: %s", len(u), strings.Join(parts, "; "))
}

// Is makes errors.Is(err, ErrUnreadable) true.
func (u Unreadables) Is(target error) bool { return target == ErrUnreadable }

// DecodeAt decodes the value stored at key, written at version, as an
// object of kind k, and checks it as every reader must, since any client
// allowed to write under k.Prefix may bypass the library: it must be the
// kind's protobuf, belong at key (k.Key of it is key), and pass the
// kind's built-in rules (Validate; the cell's ValidationPolicies judge
// writes, not reads). Otherwise the error is an *UnreadableError, and
// readers skip the value.
func DecodeAt[T Object](k Kind[T], key string, value []byte, version uint64) (T, error) {
	obj, err := decodeAt(k, key, value, version)
	if err != nil {
		var zero T
		return zero, err
	}
	return obj, nil
}

func decodeAt[T Object](k Kind[T], key string, value []byte, version uint64) (T, *UnreadableError) {
	obj, err := Decode(k, value, version)
	if err == nil {
		err = Validate(k, obj)
	}
	if err == nil {
		var at string
		if at, err = k.Key(obj); err == nil && at != key {
			err = fmt.Errorf("%s %q belongs at %s", k.Name, objectName(obj), at)
		}
	}
	if err != nil {
		return obj, &UnreadableError{Kind: k.Name, Key: key, Version: version, Err: err}
	}
	return obj, nil
}

// RecordUnreadable records, as a Warning with reason ReasonUnreadable
// and err's message, that the reader could not read the value at key. The
// event involves what the key is kept with (see keyspace.ShardKey): the
// job of a job-scoped key (/jobs/, /tasks/, /events/), the machine of a
// machine-scoped one (/machines/, /leases/, /bindings/, /runs/, /alloc/,
// /machineevents/); for other keys (/schedulers/, /policies/) no event
// fits, and none is recorded. Like Record, it never blocks and does
// nothing on a nil recorder; its signature is cache.Handler's
// OnUnreadable.
func (r *EventRecorder) RecordUnreadable(key string, err error) {
	tag, scope, _ := strings.Cut(keyspace.ShardKey(key), "/")
	switch ns, job, ok := strings.Cut(scope, "/"); {
	case tag == "m" && scope != "":
		r.Record(Machines.Name, "", scope, scope, EventWarning, ReasonUnreadable, err.Error())
	case tag == "j" && ok && ns != "" && job != "":
		r.Record(Jobs.Name, ns, job, job, EventWarning, ReasonUnreadable, err.Error())
	}
}
