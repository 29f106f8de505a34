package faults

import (
	"context"
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
)

// A Workload is what a round's clients do and how their history is
// judged: operations through the store, each recorded with its call and
// return, and the porcupine model that says which histories are
// linearizable. Op runs concurrently in every client, each with its own
// *Client; Final runs once, alone.
//
// A workload may also implement Initializer, Pinned, Tallier: each is
// one more thing a round can do with it.
type Workload interface {
	// Name names the workload in reports and file names.
	Name() string
	// Shards is the shard count of the cells it runs on: its keys are
	// spread over that many shards.
	Shards() int
	// Model is the sequential specification the history is checked
	// against. It must accept both outcomes of an operation recorded as
	// ambiguous.
	Model() porcupine.Model
	// Op performs one operation (or a few) chosen with c.Rand, and
	// records each. ctx bounds it: an operation ctx cuts short is
	// recorded as ambiguous if it may have taken effect, discarded if
	// not.
	Op(ctx context.Context, c *Client)
	// Final runs after the faults are healed: it reads the final state
	// (recorded like any operation) and checks what a linearizability
	// check does not say plainly, such as that no acknowledged commit was
	// lost; before is the history until then. It returns the problems
	// found.
	Final(ctx context.Context, c *Client, before []porcupine.Operation) []string
}

// An Initializer is a workload that sets the cell up before its clients
// start: once, alone, before any fault, recorded like any operation. An
// error means the round cannot run.
type Initializer interface {
	Init(ctx context.Context, c *Client) error
}

// A Pinned workload can aim an operation at one node: faults that need a
// node to carry traffic of some kind use it (KillDriver: cross-shard
// transactions that the node drives). c.Store reaches that node only.
// OpAt may try again, as new operations, one refused before it carried
// the traffic wanted.
type Pinned interface {
	OpAt(ctx context.Context, c *Client)
}

// A Tallier is a workload that counts, for the report, what its
// operations did (say, snapshots validated): name → count.
type Tallier interface {
	Tally(ops []porcupine.Operation) map[string]int
}

// spreadKeys returns n keys of the form <prefix><i> spread over shards
// shards as evenly as the count allows (the first n%shards shards get one
// more).
func spreadKeys(prefix string, shards, n int) []string {
	router := keyspace.NewRouter(uint32(shards))
	room := make([]int, shards)
	for s := range room {
		room[s] = n / shards
		if s < n%shards {
			room[s]++
		}
	}
	var keys []string
	// FNV spreads consecutive names well; the bound only keeps the loop
	// finite.
	for i := 0; len(keys) < n && i < 100*n; i++ {
		k := fmt.Sprintf("%s%d", prefix, i)
		if s := router.Shard(k); room[s] > 0 {
			room[s]--
			keys = append(keys, k)
		}
	}
	return keys
}

// Final operations: each try bounded by finalTryTimeout, a new one every
// finalTryEvery at most.
const (
	finalTryTimeout = 2 * time.Second
	finalTryEvery   = 100 * time.Millisecond
)

// untilDone calls try, each time bounded by finalTryTimeout, until it
// returns nil or ctx ends; it returns try's last error.
func untilDone(ctx context.Context, try func(ctx context.Context) error) error {
	tick := time.NewTicker(finalTryEvery)
	defer tick.Stop()
	for {
		tctx, cancel := context.WithTimeout(ctx, finalTryTimeout)
		err := try(tctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-tick.C:
		}
	}
}
