package faults

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	"github.com/troupe-cluster/troupe/clientlib"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Bank is the bank workload: accounts spread over the shards of a cell,
// each a counter opened with the same balance. Clients transfer random
// amounts between random accounts, one group of two adds bounded to [0,
// total] (a transfer that would overdraw fails with BOUND_EXCEEDED, a
// result), and take snapshots: they read every balance, then validate
// what they read with a condition-only commit on every account's version
// (across shards its conditions become read intents at prepare, which
// writers cannot pass). A validated snapshot is the state at one point,
// so its balances add up to the total.
//
// Checks: BankModel, per account; every validated snapshot adds up to
// the total; and, once the cell is healed (Final), every transfer that
// ended ambiguous is settled, retried with its txn_id for the outcome
// the store remembered, and every account must hold its opening balance
// plus the transfers that committed: a transfer applied on one side
// only, twice, or lost shows there by account, and in the total.
type Bank struct {
	shards   int
	accounts []string
	opening  int64
}

var (
	_ Workload    = (*Bank)(nil)
	_ Initializer = (*Bank)(nil)
	_ Pinned      = (*Bank)(nil)
	_ Tallier     = (*Bank)(nil)
)

// bankOpening is each account's opening balance; a transfer moves 1 to
// half of it.
const bankOpening = 100

// NewBank returns the workload over accounts accounts spread over shards
// shards.
func NewBank(shards, accounts int) *Bank {
	return &Bank{shards: shards, accounts: spreadKeys("/faults/acct", shards, accounts), opening: bankOpening}
}

// Name implements Workload.
func (b *Bank) Name() string { return "bank" }

// Shards implements Workload.
func (b *Bank) Shards() int { return b.shards }

// Accounts are the accounts' keys.
func (b *Bank) Accounts() []string { return b.accounts }

// Total is the money in the bank: what every validated snapshot and the
// final balances add up to. No account may hold more.
func (b *Bank) Total() int64 { return b.opening * int64(len(b.accounts)) }

// Model implements Workload.
func (b *Bank) Model() porcupine.Model { return BankModel(b.Total()) }

// Init implements Initializer: it opens every account, in one group
// across the shards, retried with its txn_id until the store answers.
func (b *Bank) Init(ctx context.Context, c *Client) error {
	in := BankInput{Kind: bankOpen, Txn: "bank-open", Accounts: b.accounts, Amount: b.opening}
	call := c.Call(in)
	var out BankOutput
	err := untilDone(ctx, func(ctx context.Context) error {
		if out = b.send(ctx, c.Store, in); out.Ambiguous {
			return errors.New("no answer")
		}
		return nil
	})
	if err != nil {
		call.Ambiguous(out)
		return fmt.Errorf("opening the accounts: %w", err)
	}
	call.Return(out)
	if !out.Committed {
		return fmt.Errorf("opening the accounts: %s on %s", out.Failure, out.Key)
	}
	return nil
}

// Op implements Workload: 60% transfers, 40% snapshots.
func (b *Bank) Op(ctx context.Context, c *Client) {
	if c.Rand.IntN(100) < 60 {
		from := c.Rand.IntN(len(b.accounts))
		to := (from + 1 + c.Rand.IntN(len(b.accounts)-1)) % len(b.accounts)
		b.transfer(ctx, c, b.accounts[from], b.accounts[to], false)
		return
	}
	b.snapshot(ctx, c)
}

// OpAt implements Pinned: a transfer between accounts on different
// shards, which the node c reaches drives. One refused because a key is
// held (another client's cross-shard transaction in progress: a
// snapshot's validation holds every account) prepared nothing there, so
// it is tried again, as a new transfer, up to pinnedTries times while
// ctx lasts: what the node is to be killed driving must be prepared.
func (b *Bank) OpAt(ctx context.Context, c *Client) {
	router := keyspace.NewRouter(uint32(b.shards))
	for range pinnedTries {
		from := b.accounts[c.Rand.IntN(len(b.accounts))]
		var others []string
		for _, a := range b.accounts {
			if a != from && (router.Shard(a) != router.Shard(from) || b.shards == 1) {
				others = append(others, a)
			}
		}
		out := b.transfer(ctx, c, from, others[c.Rand.IntN(len(others))], true)
		if out.Failure != intentHeld || ctx.Err() != nil {
			return
		}
	}
}

// pinnedTries bounds OpAt's transfers.
const pinnedTries = 20

// transfer moves a random amount from one account to another.
func (b *Bank) transfer(ctx context.Context, c *Client, from, to string, pinned bool) BankOutput {
	return b.commit(ctx, c, BankInput{Kind: bankTransfer, Txn: "bank-" + c.Unique(), From: from, To: to,
		Amount: 1 + c.Rand.Int64N(b.opening/2), Pinned: pinned})
}

// snapshot reads every balance, then validates what it read. A failed
// read ends it.
func (b *Bank) snapshot(ctx context.Context, c *Client) (BankInput, BankOutput) {
	in := BankInput{Kind: bankValidate, Txn: "bank-" + c.Unique(), Accounts: b.accounts}
	for _, a := range b.accounts {
		balance, version, err := b.get(ctx, c, a)
		if err != nil {
			return in, BankOutput{Ambiguous: true}
		}
		in.Balances, in.Versions = append(in.Balances, balance), append(in.Versions, version)
	}
	return in, b.commit(ctx, c, in)
}

// get reads account a and records the read; a failed read had no effect
// and is not recorded.
func (b *Bank) get(ctx context.Context, c *Client, a string) (balance int64, version uint64, err error) {
	call := c.Call(BankInput{Kind: bankGet, Key: a})
	kv, err := c.Store.Get(ctx, a)
	if err != nil {
		call.Discard()
		return 0, 0, err
	}
	out := BankOutput{Version: kv.GetVersion()}
	if kv != nil {
		if out.Balance, err = strconv.ParseInt(string(kv.GetValue()), 10, 64); err != nil {
			out.Failure = fmt.Sprintf("not a counter: %q", kv.GetValue())
		}
	}
	call.Return(out)
	return out.Balance, out.Version, nil
}

// commit sends in's commit and records it.
func (b *Bank) commit(ctx context.Context, c *Client, in BankInput) BankOutput {
	call := c.Call(in)
	out := b.send(ctx, c.Store, in)
	if out.Ambiguous {
		call.Ambiguous(out)
	} else {
		call.Return(out)
	}
	return out
}

// send commits in through s. Any error leaves the outcome unknown.
func (b *Bank) send(ctx context.Context, s clientlib.Store, in BankInput) BankOutput {
	resp, err := s.Commit(ctx, b.request(in))
	switch {
	case err != nil:
		return BankOutput{Ambiguous: true}
	case len(resp.GetGroups()) != 1:
		return BankOutput{Failure: fmt.Sprintf("%d group results for 1 group", len(resp.GetGroups()))}
	}
	g := resp.GetGroups()[0]
	out := BankOutput{Committed: g.GetCommitted(), Duplicate: resp.GetDuplicate()}
	if !out.Committed {
		f := g.GetFailure()
		out.Failure, out.Key, out.Version = f.GetReason().String(), f.GetKey(), f.GetCurrentVersion()
		return out
	}
	router := keyspace.NewRouter(resp.GetShardCount())
	for _, k := range in.written() {
		out.Versions = append(out.Versions, versionOf(g, router, k))
	}
	return out
}

// versionOf is the version key has after committed group g wrote it: the
// revision g committed at on key's shard (0: the reply does not say).
func versionOf(g *storev1.GroupResult, router keyspace.Router, key string) uint64 {
	if len(g.GetShardRevisions()) == 0 {
		return g.GetRevision()
	}
	return g.GetShardRevisions()[router.Shard(key)]
}

// request is the commit of in (a settle's is its transfer's).
func (b *Bank) request(in BankInput) *storev1.CommitRequest {
	g := &storev1.Group{}
	add := func(k string, delta int64) {
		g.Ops = append(g.Ops, &storev1.Op{Op: &storev1.Op_Add{Add: &storev1.Add{Key: k, Delta: delta, Min: 0, Max: b.Total()}}})
	}
	switch in.Kind {
	case bankOpen:
		for _, a := range in.Accounts {
			g.Conditions = append(g.Conditions, &storev1.Condition{Key: a})
			add(a, in.Amount)
		}
	case bankTransfer, bankSettle:
		add(in.From, -in.Amount)
		add(in.To, in.Amount)
	case bankValidate:
		for i, a := range in.Accounts {
			g.Conditions = append(g.Conditions, &storev1.Condition{Key: a, Version: in.Versions[i]})
		}
	}
	return &storev1.CommitRequest{TxnId: in.Txn, Groups: []*storev1.Group{g}}
}

// Final implements Workload: it settles every transfer that ended
// ambiguous (retrying it with its txn_id until the store answers: the
// outcome it remembered, or the transfer applied now), takes a snapshot
// until one validates, and checks the money: every validated snapshot,
// the final one included, adds up to the total, and every account holds
// its opening balance plus the transfers that committed.
func (b *Bank) Final(ctx context.Context, c *Client, before []porcupine.Operation) []string {
	var problems []string
	balances := map[string]int64{}
	var snapshots []BankInput // validated
	for _, op := range before {
		in, out := op.Input.(BankInput), op.Output.(BankOutput)
		switch {
		case in.Kind == bankValidate && out.Committed:
			snapshots = append(snapshots, in)
		case in.Kind == bankTransfer && out.Ambiguous:
			settle := in
			settle.Kind = bankSettle
			var got BankOutput
			err := untilDone(ctx, func(ctx context.Context) error {
				if got = b.commit(ctx, c, settle); got.Ambiguous {
					return errors.New("no answer")
				}
				return nil
			})
			if err != nil {
				problems = append(problems, fmt.Sprintf("transfer %s: no outcome once the cell was healed: %v", in.Txn, err))
				continue
			}
			out = got
		}
		if out.Committed && (in.Kind == bankTransfer || in.Kind == bankOpen) {
			for _, a := range in.written() {
				balances[a] += in.delta(a)
			}
		}
	}
	var final BankInput
	err := untilDone(ctx, func(ctx context.Context) error {
		var out BankOutput
		if final, out = b.snapshot(ctx, c); !out.Committed {
			return fmt.Errorf("not validated: %+v", out)
		}
		return nil
	})
	if err != nil {
		return append(problems, fmt.Sprintf("no final snapshot validated: %v", err))
	}
	var unbalanced []BankInput
	for _, s := range append(snapshots, final) {
		if sum(s.Balances) != b.Total() {
			unbalanced = append(unbalanced, s)
		}
	}
	if len(unbalanced) > 0 {
		s := unbalanced[0]
		problems = append(problems, fmt.Sprintf("%d of %d validated snapshots do not add up to %d; the first, %s, validated balances %v totalling %d",
			len(unbalanced), len(snapshots)+1, b.Total(), s.Txn, s.Balances, sum(s.Balances)))
	}
	for i, a := range final.Accounts {
		if got, want := final.Balances[i], balances[a]; got != want {
			problems = append(problems, fmt.Sprintf("%s holds %d at the end; its opening balance and the transfers that committed make %d "+
				"(a transfer applied on one side only, twice, or lost)", a, got, want))
		}
	}
	return problems
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

// Tally implements Tallier: transfers by outcome (settled ones by what
// the settle told; pinned ones, aimed at a driver that KillDriver
// killed, apart), and snapshots taken and validated.
func (b *Bank) Tally(ops []porcupine.Operation) map[string]int {
	t := map[string]int{}
	settled := map[string]BankOutput{}
	for _, op := range ops {
		if in := op.Input.(BankInput); in.Kind == bankSettle {
			settled[in.Txn] = op.Output.(BankOutput)
		}
	}
	router := keyspace.NewRouter(uint32(b.shards))
	for _, op := range ops {
		in, out := op.Input.(BankInput), op.Output.(BankOutput)
		switch in.Kind {
		case bankValidate:
			t["snapshots"]++
			if out.Committed {
				t["snapshots validated"]++
			}
		case bankTransfer:
			what := "transfers"
			if in.Pinned {
				what = "pinned transfers"
			}
			t[what]++
			if router.Shard(in.From) != router.Shard(in.To) {
				t[what+" across shards"]++
			}
			if out.Ambiguous {
				t[what+" ambiguous"]++
				if s, ok := settled[in.Txn]; ok {
					out, what = s, what+" settled"
				}
			}
			switch {
			case out.Committed:
				t[what+" committed"]++
			case out.Ambiguous:
				t[what+" unknown"]++
			default:
				t[what+" "+strings.ToLower(strings.TrimPrefix(out.Failure, "FAILURE_REASON_"))]++
			}
		}
	}
	return t
}
