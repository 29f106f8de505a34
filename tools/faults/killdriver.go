package faults

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// KillDriver's timing: the node holds every cross-shard transaction it
// drives for driverHold after its prepare (for good: the node is killed
// long before); driverTxns operations are aimed at it; it is killed
// driverPrepare RTTs after they start, time enough for their prepares
// (one Raft round on each shard) and well within the cell's TxnTimeout.
const (
	driverHold    = time.Hour
	driverTxns    = 3
	driverPrepare = 20
	// driverReady bounds waiting for the restarted node's leaders.
	driverReady = 10 * time.Second
)

// KillDriver kills a node with SIGKILL while it drives cross-shard
// transactions, after their prepares and before their resolution and
// replies. It kills a
// random node and starts it again with --fault-prepare-delay, so that
// every cross-shard transaction it drives waits after its prepare;
// once it is back it gets driverTxns operations of the workload at once
// (Target.Through; the bank's are cross-shard transfers), and it is
// killed with SIGKILL while they wait. Healing starts it again without
// the delay. The survivors must settle what it left prepared (commit it
// if every participant prepared, else fence and abort it, once the
// cell's TxnTimeout has passed), and a retry of an operation must get
// that outcome. Meanwhile the round's own clients
// reach the node too: their transactions wait there until the attempt
// times out, and the retry through another node decides them.
func KillDriver() Fault {
	return Fault{Name: "kill-driver", Inject: func(ctx context.Context, t Target) (string, func() error, error) {
		if t.Through == nil {
			return "", nil, errors.New("faults: kill-driver: the workload cannot aim operations at a node (it is not Pinned)")
		}
		c := t.Cluster
		i := t.Rand.IntN(c.Size())
		if err := c.Kill(i); err != nil {
			return "", nil, err
		}
		if err := startDriver(ctx, c, i); err != nil {
			return "", nil, err
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			t.Through(ctx, i, driverTxns)
		}()
		pause(ctx, driverPrepare*c.cfg.RTT) // cut short when the load ends
		err := c.Kill(i)
		<-done
		what := fmt.Sprintf("kill -9 node %d after the prepares of the %d cross-shard transactions it drives", i+1, driverTxns)
		return what, func() error { return c.Start(i) }, err
	}}
}

// startDriver starts node i as a driver that holds its cross-shard
// transactions after their prepare and waits for it to know the
// leaders. If it does not, it starts the node as usual again: a fault
// that is not injected must leave nothing behind.
func startDriver(ctx context.Context, c *Cluster, i int) error {
	if err := c.Start(i, "--fault-prepare-delay", driverHold.String()); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, driverReady)
	defer cancel()
	err := c.WaitReady(rctx)
	if err == nil {
		return nil
	}
	return errors.Join(err, c.Kill(i), c.Start(i))
}
