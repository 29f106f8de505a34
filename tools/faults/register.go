package faults

import (
	"context"
	"fmt"

	"github.com/anishathalye/porcupine"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Register is the register workload: clients get keys spread evenly over
// the shards, read-modify-write them (a get, then a put conditional on
// the version read) and put them blindly. Every put writes a value no
// other writes, so a read names the write it saw. Checked against
// RegisterModel.
type Register struct {
	shards int
	keys   []string
}

var _ Workload = (*Register)(nil)

// NewRegister returns the workload over keysPerShard keys on each of
// shards shards.
func NewRegister(shards, keysPerShard int) *Register {
	return &Register{shards: shards, keys: spreadKeys("/faults/r", shards, shards*keysPerShard)}
}

// Name implements Workload.
func (r *Register) Name() string { return "register" }

// Shards implements Workload.
func (r *Register) Shards() int { return r.shards }

// Model implements Workload.
func (r *Register) Model() porcupine.Model { return RegisterModel() }

// Keys are the keys the workload uses.
func (r *Register) Keys() []string { return r.keys }

// Op implements Workload: 40% gets, 45% read-modify-writes, 15% blind
// puts, on a random key.
func (r *Register) Op(ctx context.Context, c *Client) {
	key := r.keys[c.Rand.IntN(len(r.keys))]
	switch p := c.Rand.IntN(100); {
	case p < 40:
		r.get(ctx, c, key)
	case p < 85:
		if version, err := r.get(ctx, c, key); err == nil {
			r.put(ctx, c, key, true, version)
		}
	default:
		r.put(ctx, c, key, false, 0)
	}
}

// get reads key and records the read; a failed read had no effect and
// is not recorded. It returns the version read.
func (r *Register) get(ctx context.Context, c *Client, key string) (uint64, error) {
	call := c.Call(RegisterInput{Key: key, Get: true})
	kv, err := c.Store.Get(ctx, key)
	if err != nil {
		call.Discard()
		return 0, err
	}
	call.Return(RegisterOutput{Value: string(kv.GetValue()), Version: kv.GetVersion()})
	return kv.GetVersion(), nil
}

// put writes a new value to key, if its version is version when
// conditional, and records the outcome. Any error leaves the outcome
// unknown: the commit may have been applied (a refusal would be known not
// to, but calling it ambiguous is never wrong).
func (r *Register) put(ctx context.Context, c *Client, key string, conditional bool, version uint64) {
	in := RegisterInput{Key: key, Value: c.Unique(), Conditional: conditional, IfVersion: version}
	g := &storev1.Group{Ops: []*storev1.Op{{Op: &storev1.Op_Put{Put: &storev1.Put{Key: key, Value: []byte(in.Value)}}}}}
	if conditional {
		g.Conditions = []*storev1.Condition{{Key: key, Version: version}}
	}
	call := c.Call(in)
	resp, err := c.Store.Commit(ctx, &storev1.CommitRequest{Groups: []*storev1.Group{g}})
	switch {
	case err != nil:
		call.Ambiguous(RegisterOutput{Ambiguous: true})
	case len(resp.GetGroups()) != 1:
		call.Return(RegisterOutput{Failure: fmt.Sprintf("%d group results for 1 group", len(resp.GetGroups()))})
	case resp.GetGroups()[0].GetCommitted():
		call.Return(RegisterOutput{Committed: true, Version: resp.GetGroups()[0].GetRevision()})
	default:
		f := resp.GetGroups()[0].GetFailure()
		call.Return(RegisterOutput{Failure: f.GetReason().String(), Version: f.GetCurrentVersion()})
	}
}

// Final implements Workload: it reads every key (trying again until ctx
// ends) and checks that none is older than the last acknowledged commit
// to it: a lost commit that nothing read in between shows here.
func (r *Register) Final(ctx context.Context, c *Client, before []porcupine.Operation) []string {
	acked := map[string]uint64{} // the highest acknowledged version of each key
	for _, op := range before {
		in, out := op.Input.(RegisterInput), op.Output.(RegisterOutput)
		if !in.Get && out.Committed && out.Version > acked[in.Key] {
			acked[in.Key] = out.Version
		}
	}
	var problems []string
	for _, key := range r.keys {
		var version uint64
		err := untilDone(ctx, func(ctx context.Context) (err error) { version, err = r.get(ctx, c, key); return err })
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("final read of %s failed: %v", key, err))
		case version < acked[key]:
			problems = append(problems, fmt.Sprintf("acknowledged commit lost: %s was committed at version %d; the final read finds version %d",
				key, acked[key], version))
		}
	}
	return problems
}
