package node

import (
	"context"
	"fmt"
	"sync/atomic"

	sm "github.com/lni/dragonboat/v4/statemachine"

	"github.com/troupe-cluster/troupe/cellstore/statemachine"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Group commit: a shard's proposals go to Raft through one proposer. While
// entries are being replicated, up to the proposer's limit, new proposals
// queue, and the next entry carries all of them (up to maxBatchProposals
// or maxBatchBytes). Under light load every proposal goes out at once, in
// an entry of its own, from its caller's goroutine; under heavy load the
// per-entry costs of Raft (log writes and fsyncs, replication messages,
// request tracking, a state machine batch) are shared.
//
// The limit is two entries in flight, or one while the process's CPU is
// what limits it (cpuload.go). Where the network sets a round's length,
// the second entry overlaps the first's round: one in flight cost place
// 20% of its ops/s and 32% on p50 at 64 clients over 5 ms links. Where
// the CPU is the limit there is no idle round to overlap, and one entry
// carrying twice the proposals spends 8-11% less CPU per commit
// (docs/measurements.md, 2026-11-25, fourth session).
const (
	maxBatchesInFlight = 2
	maxBatchProposals  = 128
	maxBatchBytes      = 4 << 20
)

type proposalResult struct {
	out *storev1.Outcome
	err error
}

type pendingProposal struct {
	p    *storev1.Proposal
	size int
	done chan proposalResult // buffered: the proposer never blocks on it
}

// proposer group-commits the proposals of one shard.
type proposer struct {
	b     *raftBackend
	shard uint32
	load  *cpuLoad // nil: always up to maxBatchesInFlight
	queue chan *pendingProposal
	// waiting counts the proposals queued or held by run, not yet in an
	// entry; a proposal may skip the queue only when it is 0.
	waiting  atomic.Int32
	inFlight atomic.Int32  // entries being replicated
	finished chan struct{} // (1) an entry finished: run may start the next
	stop     <-chan struct{}
}

func newProposer(b *raftBackend, shard uint32, load *cpuLoad, queueLen int, stop <-chan struct{}) *proposer {
	return &proposer{b: b, shard: shard, load: load, queue: make(chan *pendingProposal, queueLen),
		finished: make(chan struct{}, 1), stop: stop}
}

// limit is how many entries may be in flight now.
func (pr *proposer) limit() int32 {
	if pr.load != nil && pr.load.Bound() {
		return 1
	}
	return maxBatchesInFlight
}

// tryStart counts a new entry in flight if the limit allows one.
func (pr *proposer) tryStart() bool {
	for {
		n := pr.inFlight.Load()
		if n >= pr.limit() {
			return false
		}
		if pr.inFlight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// finish counts an entry out of flight and wakes run if it waits.
func (pr *proposer) finish() {
	pr.inFlight.Add(-1)
	select {
	case pr.finished <- struct{}{}:
	default:
	}
}

// propose queues p and waits for its outcome or for ctx to end. A proposal
// whose caller gave up may still be applied: the outcome is then unknown
// to the caller, who retries with the same txn_id.
func (pr *proposer) propose(ctx context.Context, p *storev1.Proposal) (*storev1.Outcome, error) {
	// Nothing waits and an entry may start: this proposal is its own
	// entry, replicated from this goroutine, without the two hand-offs to
	// the proposer's goroutines (each a wake-up on a lone commit's path).
	// Its caller is the entry's only one, so the caller's ctx bounds it;
	// a caller that gives up frees its place at once, while Raft may
	// still carry the entry. The limit shapes batches; what bounds the
	// load is MaxInflight, the slots a request takes in the server.
	if pr.waiting.Load() == 0 && pr.tryStart() {
		select {
		case <-pr.stop:
			pr.finish()
			return nil, storeerr.NodeStopping.With("commit: shard %d", pr.shard)
		default:
		}
		defer pr.finish()
		outs, err := pr.replicate(ctx, []*pendingProposal{{p: p}})
		if err != nil {
			return nil, err
		}
		return outs[0], nil
	}
	// Queued: its size for the batch's bound, and where run answers.
	pp := &pendingProposal{p: p, size: p.SizeVT(), done: make(chan proposalResult, 1)}
	pr.waiting.Add(1)
	select {
	case pr.queue <- pp:
	case <-ctx.Done():
		pr.waiting.Add(-1)
		return nil, raftError("commit", pr.shard, ctx.Err())
	case <-pr.stop:
		pr.waiting.Add(-1)
		return nil, storeerr.NodeStopping.With("commit: shard %d", pr.shard)
	}
	select {
	case r := <-pp.done:
		return r.out, r.err
	case <-ctx.Done():
		return nil, raftError("commit", pr.shard, ctx.Err())
	}
}

// run forms batches until stop is closed.
func (pr *proposer) run() {
	for {
		var first *pendingProposal
		select {
		case first = <-pr.queue:
		case <-pr.stop:
			return
		}
		for !pr.tryStart() {
			select {
			case <-pr.finished:
			case <-pr.stop:
				first.done <- proposalResult{err: storeerr.NodeStopping.With("commit: shard %d", pr.shard)}
				return
			}
		}
		batch, size := []*pendingProposal{first}, first.size
	fill:
		for len(batch) < maxBatchProposals && size < maxBatchBytes {
			select {
			case pp := <-pr.queue:
				batch, size = append(batch, pp), size+pp.size
			default:
				break fill
			}
		}
		pr.waiting.Add(-int32(len(batch)))
		go pr.commit(batch)
	}
}

// commit replicates one batch and hands each proposal its outcome.
func (pr *proposer) commit(batch []*pendingProposal) {
	defer pr.finish()
	outs, err := pr.replicate(context.Background(), batch)
	for i, pp := range batch {
		if err != nil {
			pp.done <- proposalResult{err: err}
		} else {
			pp.done <- proposalResult{out: outs[i]}
		}
	}
}

// replicate proposes batch as one entry and returns its outcomes, trying
// until the entry is applied or ctx ends.
func (pr *proposer) replicate(ctx context.Context, batch []*pendingProposal) ([]*storev1.Outcome, error) {
	ps := make([]*storev1.Proposal, len(batch))
	for i, pp := range batch {
		ps[i] = pp.p
	}
	cmd, err := statemachine.EncodeEntry(ps...)
	if err != nil {
		return nil, storeerr.Internal.With("commit: encode entry: %v", err)
	}
	var res sm.Result
	err = pr.b.attempt(ctx, func(ctx context.Context) (err error) {
		res, err = pr.b.nh.SyncPropose(ctx, pr.b.sessions[pr.shard], cmd)
		return err
	})
	if err != nil {
		return nil, raftError("commit", pr.shard, err)
	}
	outs, err := statemachine.DecodeResult(res)
	if err == nil && len(outs) != len(batch) {
		err = fmt.Errorf("%d outcomes for %d proposals", len(outs), len(batch))
	}
	if err != nil {
		return nil, storeerr.Internal.With("commit: shard %d: %v", pr.shard, err)
	}
	return outs, nil
}
