package faults

import (
	"context"

	"github.com/anishathalye/porcupine"
)

// A Workload is what a round's clients do and how their history is
// judged: operations through the store, each recorded with its call and
// return, and the porcupine model that says which histories are
// linearizable. Op runs concurrently in every client, each with its own
// *Client; Final runs once, alone.
type Workload interface {
	// Name names the workload in reports and file names.
	Name() string
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
