package node

import (
	"context"
	"fmt"

	sm "github.com/lni/dragonboat/v4/statemachine"

	"github.com/troupe-cluster/troupe/cellstore/statemachine"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Group commit: a shard's proposals go to Raft through one proposer. While
// maxBatchesInFlight of its entries are being replicated, new proposals
// queue, and the next entry carries all of them (up to maxBatchProposals
// or maxBatchBytes). Under light load every proposal goes out at once, in
// an entry of its own; under heavy load the per-entry costs of Raft (log
// writes and fsyncs, replication messages, request tracking, a state
// machine batch) are shared. Two entries in flight, not one: where the
// network sets a round's length, the second entry overlaps the first's
// round (one in flight cost place 20% of its ops/s and 32% on p50 at 64
// clients over 5 ms links), though where CPU is the limit, as on one
// 2-core machine, one in flight spends 8-11% less CPU per op
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
	queue chan *pendingProposal
	slots chan struct{} // one per entry in flight
	stop  <-chan struct{}
}

func newProposer(b *raftBackend, shard uint32, queueLen int, stop <-chan struct{}) *proposer {
	return &proposer{b: b, shard: shard, queue: make(chan *pendingProposal, queueLen),
		slots: make(chan struct{}, maxBatchesInFlight), stop: stop}
}

// propose queues p and waits for its outcome or for ctx to end. A proposal
// whose caller gave up may still be applied: the outcome is then unknown
// to the caller, who retries with the same txn_id.
func (pr *proposer) propose(ctx context.Context, p *storev1.Proposal) (*storev1.Outcome, error) {
	pp := &pendingProposal{p: p, size: p.SizeVT(), done: make(chan proposalResult, 1)}
	select {
	case pr.queue <- pp:
	case <-ctx.Done():
		return nil, raftError("commit", pr.shard, ctx.Err())
	case <-pr.stop:
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
		select {
		case pr.slots <- struct{}{}:
		case <-pr.stop:
			first.done <- proposalResult{err: storeerr.NodeStopping.With("commit: shard %d", pr.shard)}
			return
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
		go pr.commit(batch)
	}
}

// commit replicates one batch and hands each proposal its outcome.
func (pr *proposer) commit(batch []*pendingProposal) {
	defer func() { <-pr.slots }()
	outs, err := pr.replicate(batch)
	for i, pp := range batch {
		if err != nil {
			pp.done <- proposalResult{err: err}
		} else {
			pp.done <- proposalResult{out: outs[i]}
		}
	}
}

func (pr *proposer) replicate(batch []*pendingProposal) ([]*storev1.Outcome, error) {
	ps := make([]*storev1.Proposal, len(batch))
	for i, pp := range batch {
		ps[i] = pp.p
	}
	cmd, err := statemachine.EncodeEntry(ps...)
	if err != nil {
		return nil, storeerr.Internal.With("commit: encode entry: %v", err)
	}
	var res sm.Result
	err = pr.b.attempt(context.Background(), func(ctx context.Context) (err error) {
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
