package faults

import (
	"fmt"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The kinds of bank operations.
const (
	bankOpen     = "open"
	bankTransfer = "transfer"
	bankGet      = "get"
	bankValidate = "validate"
	bankSettle   = "settle"
)

// BankInput is one bank operation, by Kind:
//   - open: Amount onto each of Accounts, on condition that none exists
//     (one group, across shards);
//   - transfer: Amount from From to To (one group of two adds, each
//     bounded to [0, the bank's total]); Pinned when a fault aimed it at
//     one node (KillDriver's);
//   - get: a linearizable read of Key;
//   - validate: a condition-only commit requiring each of Accounts at
//     Versions, what a snapshot read, with the Balances it read;
//   - settle: transfer Txn again, as it was, once the cell is healed, to
//     learn the outcome of a transfer that ended ambiguous.
//
// Txn is a commit's txn_id.
type BankInput struct {
	Kind     string   `json:"kind"`
	Txn      string   `json:"txn,omitempty"`
	Key      string   `json:"key,omitempty"`
	From     string   `json:"from,omitempty"`
	To       string   `json:"to,omitempty"`
	Amount   int64    `json:"amount,omitempty"`
	Pinned   bool     `json:"pinned,omitempty"`
	Accounts []string `json:"accounts,omitempty"`
	Versions []uint64 `json:"versions,omitempty"`
	Balances []int64  `json:"balances,omitempty"`
}

// written are the keys a commit of in writes, in the order of
// BankOutput.Versions.
func (in BankInput) written() []string {
	switch in.Kind {
	case bankOpen:
		return in.Accounts
	case bankTransfer, bankSettle:
		return []string{in.From, in.To}
	}
	return nil
}

// accounts are the accounts in touches.
func (in BankInput) accounts() []string {
	switch in.Kind {
	case bankGet:
		return []string{in.Key}
	case bankValidate:
		return in.Accounts
	}
	return in.written()
}

// delta is what a commit of in adds to account a.
func (in BankInput) delta(a string) int64 {
	switch {
	case in.Kind == bankOpen:
		return in.Amount
	case a == in.From:
		return -in.Amount
	}
	return in.Amount
}

// BankOutput is what an operation returned. A get: Balance and Version
// (0: absent), or Failure if the value is not a counter. A commit:
// Committed, with the version each key it wrote has now (Versions, in
// the order of BankInput.written; 0 where the reply does not say); or
// Failure (a group failure reason) naming Key at its current Version; or
// Ambiguous, the outcome unknown. Duplicate: the store answered from the
// outcome it remembered for the txn_id.
//
// Settled is set by the model only: a transfer that ended ambiguous whose
// settle told its outcome (Committed or not), no versions.
type BankOutput struct {
	Balance   int64    `json:"balance,omitempty"`
	Version   uint64   `json:"version,omitempty"`
	Committed bool     `json:"committed,omitempty"`
	Versions  []uint64 `json:"versions,omitempty"`
	Failure   string   `json:"failure,omitempty"`
	Key       string   `json:"key,omitempty"`
	Ambiguous bool     `json:"ambiguous,omitempty"`
	Duplicate bool     `json:"duplicate,omitempty"`
	Settled   bool     `json:"-"`
}

// versionOf is the version a committed out gave account a of in (0: not
// told).
func (out BankOutput) versionOf(in BankInput, a string) uint64 {
	if i := slices.Index(in.written(), a); i >= 0 && i < len(out.Versions) {
		return out.Versions[i]
	}
	return 0
}

// Failure reasons of bank operations.
const (
	boundExceeded = "FAILURE_REASON_BOUND_EXCEEDED"
	intentHeld    = "FAILURE_REASON_INTENT"
	aborted       = "FAILURE_REASON_ABORTED"
)

// allowedFailure reports whether a commit of in may fail with out's
// reason, naming out's key: a transfer with BOUND_EXCEEDED (on either
// account: reservations of prepared transfers bound credits too), open
// and validate with VERSION_MISMATCH, any of them with INTENT (a key
// held by a cross-shard transaction) or ABORTED (a cross-shard
// transaction aborted, possibly by recovery). The key must be one of
// in's.
func allowedFailure(in BankInput, out BankOutput) bool {
	switch out.Failure {
	case aborted:
		return true
	case intentHeld:
	case boundExceeded:
		if in.Kind != bankTransfer {
			return false
		}
	case versionMismatch:
		if in.Kind == bankTransfer {
			return false
		}
	default:
		return false
	}
	return slices.Contains(in.accounts(), out.Key)
}

// accountOp is a bank operation as account Account sees it: the model's
// partitions are accounts.
type accountOp struct {
	Account string
	BankInput
}

// accountState is one account as the model knows it: its balance and
// version (0: absent, balance 0).
type accountState struct {
	Balance int64
	knownVersion
}

// accountStep is the sequential specification of one account of a bank
// whose accounts are bounded to [0, max]: whether op could have returned
// out in state s, and the state after.
//
// A failure that names the account must name its current version (a
// bound failure is not checked against the balance: the reservations of
// prepared cross-shard transfers can refuse what the balance allows). A
// committed transfer keeps the account within bounds; an ambiguous one
// that would not cannot have applied here.
func accountStep(max int64, s accountState, op accountOp, out BankOutput) (bool, accountState) {
	a, in := op.Account, op.BankInput
	failed := !out.Committed && !out.Ambiguous && !out.Settled
	if failed && in.Kind != bankGet {
		if !allowedFailure(in, out) {
			return false, s
		}
		if out.Key != a || out.Failure == intentHeld || out.Failure == aborted {
			return true, s
		}
		if in.Kind == bankValidate && out.Version == in.Versions[slices.Index(in.Accounts, a)] {
			return false, s // the condition held
		}
		if in.Kind == bankOpen && out.Version == 0 {
			return false, s
		}
		return s.mayBe(out.Version), accountState{s.Balance, s.seen(out.Version)}
	}
	switch in.Kind {
	case bankGet:
		return out.Failure == "" && out.Balance == s.Balance && s.mayBe(out.Version), accountState{s.Balance, s.seen(out.Version)}
	case bankValidate:
		if out.Ambiguous {
			return true, s // it writes nothing
		}
		v := in.Versions[slices.Index(in.Accounts, a)]
		return s.mayBe(v), accountState{s.Balance, s.seen(v)}
	}
	next := s.Balance + in.delta(a)
	fits := next >= 0 && next <= max && (in.Kind != bankOpen || s.mayBe(0))
	switch {
	case out.Settled && !out.Committed:
		return true, s
	case out.Ambiguous && !fits:
		return true, s // it cannot have applied here
	case out.Ambiguous:
		// It applied here. (If it did not apply at all, the checker
		// linearizes it last, where nothing observes it.)
		_, v := s.written(0)
		return true, accountState{next, v}
	}
	ok, v := s.written(out.versionOf(in, a))
	return ok && fits, accountState{next, v}
}

// settleAmbiguous returns history with each ambiguous transfer whose
// settle told its outcome made definite: applied or not, between its
// call and the settle's return. Settles themselves go.
func settleAmbiguous(history []porcupine.Operation) []porcupine.Operation {
	settles := map[string]porcupine.Operation{}
	for _, op := range history {
		in, out := op.Input.(BankInput), op.Output.(BankOutput)
		if in.Kind == bankSettle && !out.Ambiguous {
			settles[in.Txn] = op
		}
	}
	var ops []porcupine.Operation
	for _, op := range history {
		in, out := op.Input.(BankInput), op.Output.(BankOutput)
		if in.Kind == bankSettle {
			continue
		}
		if s, ok := settles[in.Txn]; ok && in.Kind == bankTransfer && out.Ambiguous {
			op.Output = BankOutput{Committed: s.Output.(BankOutput).Committed, Settled: true}
			op.Return = s.Return
		}
		ops = append(ops, op)
	}
	return ops
}

// BankModel is the porcupine model of the bank workload, whose accounts
// are bounded to [0, max]: a versioned counter per account, partitioned
// by account (a transfer is an add on each of its two accounts, a
// validated snapshot a read of each account's version). Transfers that
// ended ambiguous and were settled count as settled. Whether a transfer
// applied on both accounts or neither is not for this model (each
// account is checked alone) but for Bank.Final.
func BankModel(max int64) porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byAccount := map[string][]porcupine.Operation{}
			var accounts []string
			for _, op := range settleAmbiguous(history) {
				in := op.Input.(BankInput)
				for _, a := range in.accounts() {
					if _, ok := byAccount[a]; !ok {
						accounts = append(accounts, a)
					}
					part := op
					part.Input = accountOp{Account: a, BankInput: in}
					byAccount[a] = append(byAccount[a], part)
				}
			}
			var out [][]porcupine.Operation
			for _, a := range accounts {
				out = append(out, byAccount[a])
			}
			return out
		},
		Init: func() any { return accountState{knownVersion: knownVersion{Known: true}} },
		Step: func(state, input, output any) (bool, any) {
			return accountStep(max, state.(accountState), input.(accountOp), output.(BankOutput))
		},
		DescribeOperation: func(input, output any) string {
			return describeBankOp(input.(accountOp).BankInput, output.(BankOutput))
		},
		DescribeState: func(state any) string {
			s := state.(accountState)
			if s.Known {
				return fmt.Sprintf("%d@%d", s.Balance, s.Version)
			}
			return fmt.Sprintf("%d@? (>%d)", s.Balance, s.Floor)
		},
	}
}

// describeBankOp is an operation in short: get a → 70@12, transfer t9:
// 30 a→b → ok@12,14 | BOUND_EXCEEDED a@9 | ? | applied (settled).
func describeBankOp(in BankInput, out BankOutput) string {
	var op string
	switch in.Kind {
	case bankGet:
		if out.Failure != "" {
			return fmt.Sprintf("get %s → %s", in.Key, out.Failure)
		}
		return fmt.Sprintf("get %s → %d@%d", in.Key, out.Balance, out.Version)
	case bankOpen:
		op = fmt.Sprintf("open %s: %d each", in.Txn, in.Amount)
	case bankTransfer, bankSettle:
		op = fmt.Sprintf("%s %s: %d %s→%s", in.Kind, in.Txn, in.Amount, in.From, in.To)
	case bankValidate:
		var conds []string
		for i, a := range in.Accounts {
			conds = append(conds, fmt.Sprintf("%s@%d", a, in.Versions[i]))
		}
		op = fmt.Sprintf("validate %s: %s", in.Txn, strings.Join(conds, " "))
	}
	switch {
	case out.Settled && out.Committed:
		return op + " → applied (settled)"
	case out.Settled:
		return op + " → not applied (settled)"
	case out.Ambiguous:
		return op + " → ?"
	case out.Committed:
		return fmt.Sprintf("%s → ok@%v", op, out.Versions)
	}
	return fmt.Sprintf("%s → %s %s@%d", op, strings.TrimPrefix(out.Failure, "FAILURE_REASON_"), out.Key, out.Version)
}
