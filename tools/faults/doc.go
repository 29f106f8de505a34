// Package faults proves the store under faults: it runs store nodes as
// real `troupe store` processes, breaks them (kill -9, restart, network
// partitions, a node left behind until it needs a snapshot, lost and
// delayed Raft traffic) while clients work through
// clientlib, records every operation with its call and return time, and
// checks the history for linearizability with porcupine.
//
// Each node runs in a network namespace of its own, where it listens on
// the same addresses as every other node: Raft 127.0.0.1:710<id>, gRPC
// 127.0.0.1:7000. In node i's namespace, the harness listens on the other
// nodes' Raft addresses: those listeners are Links, TCP forwarders that
// carry node i's connections to node j into node j's namespace. Every
// node has the same member list, as Dragonboat requires, yet every
// direction of every pair of nodes has its own Link that the harness can
// block or delay. Clients reach node i through a Link from the harness's
// namespace.
//
//	      netns 1                     netns 2
//	┌─────────────────────┐     ┌─────────────────────┐
//	│ troupe store 1      │     │ troupe store 2      │
//	│  :7101 (Raft) ◄─────┼──┐  │  :7102 (Raft) ◄──┐  │
//	│  :7000 (gRPC)       │  │  │  :7000 (gRPC)    │  │
//	│ Link 1->2 at :7102 ─┼──┼──┼──────────────────┘  │
//	│                     │  └──┼─ Link 2->1 at :7101 │
//	└─────────▲───────────┘     └─────────▲───────────┘
//	          └──── Link client->1        └──── Link client->2
//	                 (harness namespace: clients, nemesis, checker)
//
// The cell runs with TLS on, as a production cell does: StartCluster makes
// a CA of the cell's own in its directory, issues each node a store
// certificate naming every host it is dialled at and the harness an
// admin certificate, and starts every node with --ca, --cert and --key
// (certs.go). The Links forward TCP, so TLS runs end to end through
// them (Raft's too, where the nodes secure it) and faults cut or stall
// it as they would plaintext. There is no plaintext mode.
//
// Why namespaces rather than proxies on one loopback: Dragonboat records
// the address a message comes from (its sender's RaftAddress) for the
// sender's replica and panics if that differs from the address it was
// given for it, and `troupe store` listens on its --raft-addr; so nodes
// cannot be told per-link proxy addresses. Namespaces need
// CAP_SYS_ADMIN; the tests skip without it.
//
// A round (RunRound) starts a fresh cell, runs RoundConfig.Clients
// clients of a Workload for RoundConfig.Load while a nemesis injects one
// Fault after another (each cycle takes every fault once, in random
// order), then heals the cell, waits for leaders, lets the workload read
// the final state and check what it must (Workload.Final), and checks the
// history against the workload's porcupine model. A commit that fails
// with an error is recorded as ambiguous (returning Never): the model
// lets it take effect at any point after its call, or not at all. A read
// that fails is dropped. A round with problems writes the history (JSON
// lines) and porcupine's HTML visualization, faults drawn along the
// operations, into RoundConfig.OutDir.
//
// Everything random in a round comes from RoundConfig.Seed: the faults,
// their victims and durations, each client's operations. The OS's
// interleaving of processes is not fixed, so a seed repeats a scenario,
// not an execution. Running rounds:
//
//	make test-faults                       # FAULT_ROUNDS rounds of each workload from a new seed
//	make test-faults FAULT_SEED=1234 FAULT_ROUNDS=1 FAULT_WORKLOADS=bank
//	go test ./tools/faults -run '^TestFaults/bank$' -seed 1234 -load 30s -keep -out /tmp/f
//
// A workload is pluggable: client operations (Workload.Op) plus a
// porcupine model (Workload.Model) and final checks (Workload.Final);
// optional interfaces let it set the cell up first (Initializer), aim
// operations at one node for a fault (Pinned) and count what happened
// (Tallier). Register is a versioned register per key with conditional
// puts, partitioned by key. Bank moves money between accounts on several
// shards in cross-shard transfers and validates snapshots with
// condition-only commits: every validated snapshot and the final
// balances must add up to the total, and once ambiguous transfers are
// settled (retried with their txn_id) each account must hold what the
// committed transfers make, so a transfer applied on one side only is
// caught.
//
// Faults are pluggable too: a Fault injects itself into a Target (the
// cell, the round's random numbers, and a way to send the workload's
// operations through one node) and returns its heal. KillDriver, for
// the bank, restarts a node so that it holds every cross-shard
// transaction it drives after its prepares, sends it transfers and
// kills it with SIGKILL while it holds them: the survivors must settle
// them (they committed when every participant had prepared).
package faults
