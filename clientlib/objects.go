package clientlib

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ErrNotFound is returned by Get when the key does not exist.
var ErrNotFound = errors.New("not found")

// Get reads the object of kind k at key. A value there that is not a
// valid object of the kind (see DecodeAt) is an *UnreadableError.
func Get[T Object](ctx context.Context, s Store, k Kind[T], key string) (T, error) {
	kv, err := s.Get(ctx, key)
	if err != nil {
		var zero T
		return zero, fmt.Errorf("get %s %s: %w", k.Name, key, err)
	}
	if kv == nil {
		var zero T
		return zero, fmt.Errorf("get %s %s: %w", k.Name, key, ErrNotFound)
	}
	return DecodeAt(k, key, kv.GetValue(), kv.GetVersion())
}

// List reads every object of kind k whose key starts with k.Prefix+within
// (within "" lists the kind; for a job's tasks, "<namespace>/<job>/"). It
// also returns the cursor to watch from for what changes after the list.
// Values that are not valid objects of the kind (see DecodeAt) are
// skipped: List then returns the other objects and the cursor with an
// Unreadables error naming them (errors.Is(err, ErrUnreadable)); with any
// other error it returns no objects.
func List[T Object](ctx context.Context, s Store, k Kind[T], within string) ([]T, []byte, error) {
	kvs, cursor, err := s.List(ctx, k.Prefix+within)
	if err != nil {
		return nil, nil, fmt.Errorf("list %s %s: %w", k.Name, k.Prefix+within, err)
	}
	out := make([]T, 0, len(kvs))
	var skipped Unreadables
	for _, kv := range kvs {
		obj, uerr := decodeAt(k, kv.GetKey(), kv.GetValue(), kv.GetVersion())
		if uerr != nil {
			skipped = append(skipped, uerr)
			continue
		}
		out = append(out, obj)
	}
	if len(skipped) > 0 {
		return out, cursor, skipped
	}
	return out, cursor, nil
}

// Create stores a new object, failing with a *ConflictError if its key
// exists and a *ValidationError if it breaks a rule. It fills in defaults,
// metadata.uid and metadata.created, and returns the stored object with
// its version; obj itself is not changed.
func Create[T Object](ctx context.Context, s Store, k Kind[T], obj T) (T, error) {
	if obj.GetMetadata() == nil {
		var zero T
		return zero, fmt.Errorf("create %s: metadata is required", k.Name)
	}
	return write(ctx, s, k, newObject(obj), "create")
}

// CreateObject writes obj into g as Create stores it (a copy with
// metadata.uid and metadata.created filled in, on condition that its key
// does not exist yet), for a caller that commits it with other writes or
// conditions. A nil metadata fails the transaction's Commit.
func CreateObject[T Object](g *Group, k Kind[T], obj T) *Group {
	if obj.GetMetadata() == nil {
		g.t.fail(fmt.Errorf("create %s: metadata is required", k.Name))
		return g
	}
	return PutObject(g, k, newObject(obj))
}

// newObject returns a copy of obj (with metadata) as a new object: no
// version, and a uid and creation time unless it has them.
func newObject[T Object](obj T) T {
	obj = proto.Clone(obj).(T)
	m := obj.GetMetadata()
	m.Version = 0
	if m.Uid == "" {
		m.Uid = newUID()
	}
	if m.Created == nil {
		m.Created = timestamppb.Now()
	}
	return obj
}

// Update stores obj over the version it was read at, failing with a
// *ConflictError if the object changed (or vanished) since. It returns the
// stored object with its new version.
func Update[T Object](ctx context.Context, s Store, k Kind[T], obj T) (T, error) {
	if obj.GetMetadata().GetVersion() == 0 {
		var zero T
		return zero, fmt.Errorf("update %s %q: no version: read the object first (or Create it)", k.Name, obj.GetMetadata().GetName())
	}
	return write(ctx, s, k, proto.Clone(obj).(T), "update")
}

// write stores obj (a copy the caller does not hold) over its version;
// PutObject defaults and validates it.
func write[T Object](ctx context.Context, s Store, k Kind[T], obj T, op string) (T, error) {
	var zero T
	Default(obj)
	t := NewTxn(s)
	PutObject(t.Group(), k, obj)
	out, err := t.Commit(ctx)
	if err == nil {
		err = out.Err()
	}
	if err != nil {
		return zero, fmt.Errorf("%s %s %q: %w", op, k.Name, obj.GetMetadata().GetName(), err)
	}
	obj.GetMetadata().Version = out.Groups[0].Revision
	return obj, nil
}

// Delete deletes obj if it still has the version it was read at (version
// 0: whatever it has).
func Delete[T Object](ctx context.Context, s Store, k Kind[T], obj T) error {
	t := NewTxn(s)
	if obj.GetMetadata().GetVersion() == 0 {
		key, err := k.Key(obj)
		if err != nil {
			return err
		}
		g := t.Group().Delete(key) // whatever its version
		if k.onDelete != nil {
			k.onDelete(g, obj)
		}
	} else {
		DeleteObject(t.Group(), k, obj)
	}
	out, err := t.Commit(ctx)
	if err == nil {
		err = out.Err()
	}
	if err != nil {
		return fmt.Errorf("delete %s %q: %w", k.Name, obj.GetMetadata().GetName(), err)
	}
	return nil
}

func newUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}
