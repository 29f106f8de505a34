package framework

import (
	"fmt"
	"strings"
)

// ConflictMode is how a commit detects that a machine changed under it.
//
// The Omega paper compares fine-grained conflict detection (a claim
// fails only if the machine no longer has room for it) with
// coarse-grained detection (a claim fails if the machine's state changed
// at all since the scheduler's snapshot). Google's lightweight simulator
// (google/cluster-scheduler-simulator, CellState.commit) implements them
// as conflictMode "resource-fit" and "sequence-numbers": Fine and
// CoarseClaims here. Coarse is Troupe's own stricter reading of "any
// change".
type ConflictMode int

const (
	// Fine: take the task's requests with bounded counter adds; two
	// schedulers placing on one machine both succeed while it has room.
	// Google's "resource-fit": a claim conflicts when
	// "availableCpusPerMachine(id) < delta.cpus ||
	// availableMemPerMachine(id) < delta.mem".
	Fine ConflictMode = iota
	// Coarse: require the machine's resource counters (/alloc/<m>/<r>)
	// to be at the versions the snapshot saw. Every change to them
	// conflicts: another scheduler's placement on the machine, a
	// preemption there, and also a task ending on it or being stopped,
	// evicted or lost (its requests are given back to the same
	// counters). Agents' status writes and changes to the machine object
	// do not (they touch other keys).
	Coarse
	// CoarseClaims: coarse-grained detection on claims only, as Google's
	// lightweight simulator does it ("sequence-numbers": "if
	// (delta.machineSeqNum != machineSeqNums(delta.machineID))" →
	// conflict, where only ClaimDelta.apply bumps a machine's sequence
	// number and a task's end, unApply, does not). A commit requires
	// the machine's claims counter (clientlib.ClaimsKey) at the version
	// the snapshot saw and adds the number of its placements there to it;
	// the resources are taken with bounded adds, as in Fine, so a
	// snapshot that missed a task's end stays correct and a stale one
	// cannot overcommit. Another scheduler's placement on the machine
	// (or its preemption there: eviction commits with a placement)
	// conflicts; a task ending, stopped or lost does not. Only commits in
	// this mode bump the claims counter: run every scheduler of a cell
	// (or simulation) in this mode, as Google's simulator does, or a
	// CoarseClaims commit sees only CoarseClaims schedulers' claims
	// (others' placements still cannot overcommit it).
	CoarseClaims
)

// TxnMode is how a plan's placements commit.
//
// Google's lightweight simulator has "incremental" (apply each claim
// that does not conflict) and "all-or-nothing" (on the first conflicted
// claim "rollback = true", undoing every claim of the transaction):
// Incremental and Atomic here. Its all-or-nothing commits whatever the
// job's placement found room for; Troupe's gang rule (AllOrNothing)
// commits nothing unless every task fits.
type TxnMode int

const (
	// Incremental: one group per placement (per machine in Coarse and
	// CoarseClaims); each commits or fails alone.
	Incremental TxnMode = iota
	// AllOrNothing: the gang rule. Nothing commits unless every task
	// fits: a scheduler drops a plan with failures before committing it
	// (GangRule), and commits a whole plan in one atomic request.
	AllOrNothing
	// Atomic: Google's all-or-nothing. Whatever the plan placed
	// commits in one atomic request, tasks that fit nowhere or not, and a
	// conflict on any placement rolls every placement back; without a
	// conflict a partial plan commits, and its unfit tasks are tried
	// again as in Incremental.
	Atomic
)

// Modes are a scheduler's commit modes.
type Modes struct {
	Conflict ConflictMode
	Txn      TxnMode
}

// GangRule reports whether a plan must place every task to commit
// anything (AllOrNothing): a scheduler commits nothing of a plan with
// failures. Atomic and Incremental plans commit what they placed.
func (t TxnMode) GangRule() bool { return t == AllOrNothing }

// atomic reports whether a plan commits in one atomic request.
func (t TxnMode) atomic() bool { return t == AllOrNothing || t == Atomic }

// The names of the modes in configuration (ParseConflictMode,
// ParseTxnMode), by value.
var (
	conflictModeNames = []string{Fine: "fine", Coarse: "coarse", CoarseClaims: "coarse-claims"}
	txnModeNames      = []string{Incremental: "incremental", AllOrNothing: "gang", Atomic: "atomic"}
)

// ConflictModes returns the names ParseConflictMode accepts, in order of
// value.
func ConflictModes() []string { return append([]string(nil), conflictModeNames...) }

// TxnModes returns the names of the transaction modes, in order of
// value; ParseTxnMode also accepts "all-or-nothing" for gang.
func TxnModes() []string { return append([]string(nil), txnModeNames...) }

func (c ConflictMode) String() string {
	if c >= 0 && int(c) < len(conflictModeNames) {
		return conflictModeNames[c]
	}
	return fmt.Sprintf("ConflictMode(%d)", int(c))
}

func (t TxnMode) String() string {
	if t >= 0 && int(t) < len(txnModeNames) {
		return txnModeNames[t]
	}
	return fmt.Sprintf("TxnMode(%d)", int(t))
}

// ParseConflictMode returns the mode named s: "fine", "coarse" or
// "coarse-claims".
func ParseConflictMode(s string) (ConflictMode, error) {
	for i, n := range conflictModeNames {
		if s == n {
			return ConflictMode(i), nil
		}
	}
	return 0, fmt.Errorf("unknown conflict mode %q (%s)", s, strings.Join(conflictModeNames, ", "))
}

// ParseTxnMode returns the mode named s: "incremental", "gang" (or
// "all-or-nothing", the name Troupe's tools gave the gang rule before
// Atomic existed) or "atomic" (Google's all-or-nothing).
func ParseTxnMode(s string) (TxnMode, error) {
	if s == "all-or-nothing" {
		return AllOrNothing, nil
	}
	for i, n := range txnModeNames {
		if s == n {
			return TxnMode(i), nil
		}
	}
	return 0, fmt.Errorf("unknown transaction mode %q (%s; all-or-nothing is gang)", s, strings.Join(txnModeNames, ", "))
}
