package clientlib

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Txn builds one commit request: reads recorded with their versions, then
// one or more groups of conditions and operations. Without Atomic each
// group commits or fails alone; with it, all or none. A Txn is used by one
// goroutine and committed once.
//
//	t := clientlib.NewTxn(store)
//	kv, _ := t.Read(ctx, "/machines/m1")
//	t.Group().RequireRead("/machines/m1").Add("/alloc/m1/cpu", 500, 0, 4000)
//	out, err := t.Commit(ctx) // err: the request failed; out: per-group results
type Txn struct {
	s      Store
	atomic bool
	groups []*storev1.Group
	reads  map[string]uint64
	err    error
	arena  arena
}

// NewTxn starts a transaction on s.
func NewTxn(s Store) *Txn { return &Txn{s: s, reads: map[string]uint64{}} }

// Atomic makes the transaction all-or-nothing.
func (t *Txn) Atomic() *Txn {
	t.atomic = true
	return t
}

// Read reads key and records its version for RequireRead. It returns nil
// when the key does not exist (recorded as version 0).
func (t *Txn) Read(ctx context.Context, key string) (*storev1.KeyValue, error) {
	kv, err := t.s.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	t.reads[key] = kv.GetVersion()
	return kv, nil
}

// Group starts a new group.
func (t *Txn) Group() *Group {
	g := next(&t.arena.groups)
	g.group.t, g.group.g = t, &g.msg
	t.groups = append(t.groups, &g.msg)
	return &g.group
}

// Group adds conditions and operations to one group of a Txn.
type Group struct {
	t *Txn
	g *storev1.Group
}

// Require makes the group conditional on key's version (0: absent).
func (g *Group) Require(key string, version uint64) *Group {
	c := next(&g.t.arena.conditions)
	c.Key, c.Version = key, version
	g.g.Conditions = appendShared(&g.t.arena.conditionList, g.g.Conditions, c)
	return g
}

// RequireRead makes the group conditional on key still having the version
// Txn.Read saw.
func (g *Group) RequireRead(key string) *Group {
	v, ok := g.t.reads[key]
	if !ok {
		g.t.fail(fmt.Errorf("RequireRead(%q): the key was not read in this transaction", key))
		return g
	}
	return g.Require(key, v)
}

// Put writes value at key.
func (g *Group) Put(key string, value []byte) *Group {
	o := next(&g.t.arena.puts)
	o.put.Key, o.put.Value = key, value
	o.is.Put, o.op.Op = &o.put, &o.is
	g.g.Ops = appendShared(&g.t.arena.opList, g.g.Ops, &o.op)
	return g
}

// Delete deletes key.
func (g *Group) Delete(key string) *Group {
	o := next(&g.t.arena.deletes)
	o.del.Key = key
	o.is.Delete, o.op.Op = &o.del, &o.is
	g.g.Ops = appendShared(&g.t.arena.opList, g.g.Ops, &o.op)
	return g
}

// Add changes the counter at key by delta if the result stays in [min, max].
func (g *Group) Add(key string, delta, min, max int64) *Group {
	o := next(&g.t.arena.adds)
	o.add.Key, o.add.Delta, o.add.Min, o.add.Max = key, delta, min, max
	o.is.Add, o.op.Op = &o.add, &o.is
	g.g.Ops = appendShared(&g.t.arena.opList, g.g.Ops, &o.op)
	return g
}

// arena makes a transaction's messages in chunks: a scheduler's commit
// adds thousands of groups, conditions and operations, and an allocation
// for each (with the growth of each group's lists) was a good share of
// its cost. An operation's three messages (the Op, its oneof case and
// the operation) are one element. The chunks live as long as the
// request that points into them.
type arena struct {
	groups     []arenaGroup
	conditions []storev1.Condition
	puts       []struct {
		op  storev1.Op
		is  storev1.Op_Put
		put storev1.Put
	}
	deletes []struct {
		op  storev1.Op
		is  storev1.Op_Delete
		del storev1.Delete
	}
	adds []struct {
		op  storev1.Op
		is  storev1.Op_Add
		add storev1.Add
	}
	// The groups' Ops and Conditions are windows of these, in the order
	// the groups were built (see appendShared).
	opList        []*storev1.Op
	conditionList []*storev1.Condition
}

// arenaGroup is a Group and its message.
type arenaGroup struct {
	group Group
	msg   storev1.Group
}

// Chunks start at one element (a transaction of one write allocates as
// much as without chunks) and double up to maxChunk elements (the last
// chunk's unused part is what a large transaction pays in memory).
const (
	minChunk = 1
	maxChunk = 32
)

// next returns a new zero element of chunk, starting a new chunk when it
// is full. A full chunk is left as it is, never moved: its elements are
// pointed to.
func next[T any](chunk *[]T) *T {
	c := *chunk
	if len(c) == cap(c) {
		c = make([]T, 0, min(max(2*cap(c), minChunk), maxChunk))
	}
	c = c[:len(c)+1]
	*chunk = c
	return &c[len(c)-1]
}

// appendShared appends p to list, a group's list, and returns the list.
// A group's list grows inside shared (the lists of the transaction's
// groups, one after the other) while it is the last one there, so that
// the groups of a commit need no array each; once another group's list
// follows it, its capacity is its length, and it grows by append, as any
// slice (a group built after another one was begun).
func appendShared[T any](shared *[]*T, list []*T, p *T) []*T {
	sh := *shared
	if len(list) > 0 && (len(sh) == 0 || &list[len(list)-1] != &sh[len(sh)-1]) {
		return append(list, p) // not the last list in shared
	}
	if len(sh) == cap(sh) {
		// A new array for the lists to come, this one moved to its start.
		moved := make([]*T, 0, max(min(max(2*cap(sh), minChunk), maxChunk), 2*(len(list)+1)))
		sh = append(moved, list...)
	}
	sh = append(sh, p)
	*shared = sh
	return sh[len(sh)-len(list)-1 : len(sh) : len(sh)]
}

// PutObject writes obj at its key, on condition that the key still has
// obj's version (0: that it does not exist yet). Like every typed write it
// applies defaults (to a copy) and validation; a broken rule fails the
// transaction's Commit with a *ValidationError.
func PutObject[T Object](g *Group, k Kind[T], obj T) *Group {
	return PutEncoded(g, k, EncodeObject(g.t.s, k, obj))
}

// Encoded is an object made ready for a PutObject: defaulted, validated
// by a store's rules and encoded (or the error doing so), so that the
// work can be done ahead, on another goroutine (EncodeObject is safe for
// concurrent use), and the write later (PutEncoded).
type Encoded[T Object] struct {
	obj   T
	key   string
	value []byte
	err   error
}

// EncodeObject readies obj for PutEncoded in a transaction on s.
func EncodeObject[T Object](s Store, k Kind[T], obj T) Encoded[T] {
	if hasDefaults(obj) {
		obj = proto.Clone(obj).(T)
		Default(obj)
	}
	e := Encoded[T]{obj: obj}
	v, err := validatorOf(s)
	if err == nil {
		err = ValidateWith(v, k, obj)
	}
	if err == nil {
		e.key, err = k.Key(obj)
	}
	if err == nil {
		e.value, err = Encode(obj)
	}
	e.err = err
	return e
}

// PutEncoded is PutObject of what EncodeObject readied.
func PutEncoded[T Object](g *Group, k Kind[T], e Encoded[T]) *Group {
	if e.err != nil {
		g.t.fail(e.err)
		return g
	}
	g.Require(e.key, e.obj.GetMetadata().GetVersion()).Put(e.key, e.value)
	if k.onPut != nil {
		k.onPut(g, e.obj)
	}
	return g
}

// DeleteObject deletes obj, on condition that its key still has obj's
// version.
func DeleteObject[T Object](g *Group, k Kind[T], obj T) *Group {
	key, err := k.Key(obj)
	if err != nil {
		g.t.fail(err)
		return g
	}
	g.Require(key, obj.GetMetadata().GetVersion()).Delete(key)
	if k.onDelete != nil {
		k.onDelete(g, obj)
	}
	return g
}

func (t *Txn) fail(err error) {
	if t.err == nil {
		t.err = err
	}
}

// Commit sends the transaction. An error means the request itself failed
// (invalid, refused, or its outcome unknown after the retries); conflicts
// are in the Outcome, never retried here.
func (t *Txn) Commit(ctx context.Context) (*Outcome, error) {
	if t.err != nil {
		return nil, t.err
	}
	if len(t.groups) == 0 {
		return nil, errors.New("commit: transaction has no groups")
	}
	resp, err := t.s.Commit(ctx, &storev1.CommitRequest{Groups: t.groups, Atomic: t.atomic})
	if err != nil {
		return nil, err
	}
	if len(resp.GetGroups()) != len(t.groups) {
		return nil, fmt.Errorf("commit: %d results for %d groups", len(resp.GetGroups()), len(t.groups))
	}
	out := &Outcome{Duplicate: resp.GetDuplicate(), Groups: make([]GroupOutcome, len(t.groups))}
	for i, g := range resp.GetGroups() {
		out.Groups[i] = GroupOutcome{Committed: g.GetCommitted(), Revision: g.GetRevision(), Shard: g.GetShard(),
			shardRevisions: g.GetShardRevisions(), router: keyspace.NewRouter(resp.GetShardCount())}
		if f := g.GetFailure(); f != nil {
			out.Groups[i].Conflict = &Conflict{Group: i, Reason: f.GetReason(), Key: f.GetKey(), CurrentVersion: f.GetCurrentVersion(), Message: f.GetMessage()}
		}
	}
	return out, nil
}

// Outcome is what a committed Txn got: a result per group.
type Outcome struct {
	Groups []GroupOutcome
	// Duplicate: the store remembered this outcome from an earlier attempt
	// of the same request rather than applying it now.
	Duplicate bool
}

// GroupOutcome is the result of one group.
type GroupOutcome struct {
	Committed bool
	// Revision is the shard revision the group committed at (its first
	// shard's, when it spans shards: see VersionOf).
	Revision uint64
	Shard    uint32
	// Conflict says why the group did not commit.
	Conflict *Conflict

	shardRevisions map[uint32]uint64
	router         keyspace.Router
}

// VersionOf returns the version key has after the committed group wrote
// it: the revision the group committed at on key's shard.
func (g GroupOutcome) VersionOf(key string) uint64 {
	if rev, ok := g.shardRevisions[g.router.Shard(key)]; ok {
		return rev
	}
	return g.Revision
}

// Committed reports whether every group committed.
func (o *Outcome) Committed() bool { return o.Err() == nil }

// Err returns nil when every group committed, else a *ConflictError
// naming the failed groups.
func (o *Outcome) Err() error {
	var cs []*Conflict
	for _, g := range o.Groups {
		if g.Conflict != nil {
			cs = append(cs, g.Conflict)
		}
	}
	if len(cs) == 0 {
		return nil
	}
	return &ConflictError{Conflicts: cs}
}

// Conflict is why one group failed: the offending key and its current
// version.
type Conflict struct {
	Group          int
	Reason         storev1.FailureReason
	Key            string
	CurrentVersion uint64
	Message        string
}

func (c *Conflict) String() string {
	return fmt.Sprintf("group %d: %s on %q (now at version %d): %s", c.Group, c.Reason, c.Key, c.CurrentVersion, c.Message)
}

// ConflictError is the error form of failed groups.
type ConflictError struct{ Conflicts []*Conflict }

func (e *ConflictError) Error() string {
	parts := make([]string, len(e.Conflicts))
	for i, c := range e.Conflicts {
		parts[i] = c.String()
	}
	return "conflict: " + strings.Join(parts, "; ")
}
