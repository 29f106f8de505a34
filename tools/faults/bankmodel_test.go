package faults

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// Shorthands for hand-written bank histories on accounts a and b, each
// opened with 100 at version 1, in a bank of total 200.
func bankOp(call, ret int64, in BankInput, out BankOutput) porcupine.Operation {
	return porcupine.Operation{Input: in, Output: out, Call: call, Return: ret}
}

func opened() porcupine.Operation {
	return bankOp(0, 1, BankInput{Kind: bankOpen, Txn: "open", Accounts: []string{"a", "b"}, Amount: 100},
		BankOutput{Committed: true, Versions: []uint64{1, 1}})
}

func xfer(call, ret int64, txn string, amount int64, out BankOutput) porcupine.Operation {
	return bankOp(call, ret, BankInput{Kind: bankTransfer, Txn: txn, From: "a", To: "b", Amount: amount}, out)
}

func settle(call, ret int64, txn string, amount int64, committed bool) porcupine.Operation {
	return bankOp(call, ret, BankInput{Kind: bankSettle, Txn: txn, From: "a", To: "b", Amount: amount}, BankOutput{Committed: committed})
}

func read(call, ret int64, key string, balance int64, version uint64) porcupine.Operation {
	return bankOp(call, ret, BankInput{Kind: bankGet, Key: key}, BankOutput{Balance: balance, Version: version})
}

func validate(call, ret int64, versions []uint64, out BankOutput) porcupine.Operation {
	return bankOp(call, ret, BankInput{Kind: bankValidate, Accounts: []string{"a", "b"}, Versions: versions, Balances: []int64{0, 0}}, out)
}

func committed(versions ...uint64) BankOutput { return BankOutput{Committed: true, Versions: versions} }

func failed(reason, key string, version uint64) BankOutput {
	return BankOutput{Failure: reason, Key: key, Version: version}
}

var ambiguous = BankOutput{Ambiguous: true}

// TestBankModel checks hand-written histories, legal and not: the model
// must refuse what a broken store would show, per account, or the check
// would be vacuous, and allow both outcomes of an ambiguous transfer.
func TestBankModel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ops   []porcupine.Operation
		legal bool
	}{
		{"transfer then reads", []porcupine.Operation{opened(), xfer(2, 3, "t", 30, committed(2, 2)), read(4, 5, "a", 70, 2), read(4, 5, "b", 130, 2)}, true},
		{"transfer applied on one side", []porcupine.Operation{opened(), xfer(2, 3, "t", 30, committed(2, 2)), read(4, 5, "a", 70, 2), read(4, 5, "b", 100, 1)}, false},
		{"transfer lost", []porcupine.Operation{opened(), xfer(2, 3, "t", 30, committed(2, 2)), read(4, 5, "a", 100, 1)}, false},
		{"overdraft committed", []porcupine.Operation{opened(), xfer(2, 3, "t", 130, committed(2, 2))}, false},
		{"versions go backwards", []porcupine.Operation{opened(), xfer(2, 3, "t", 30, committed(5, 5)), xfer(4, 5, "u", 30, committed(4, 6))}, false},
		{"read goes back in time", []porcupine.Operation{opened(), xfer(2, 10, "t", 30, committed(2, 2)), read(3, 4, "a", 70, 2), read(5, 6, "a", 100, 1)}, false},
		{"overdraft refused", []porcupine.Operation{opened(), xfer(2, 3, "t", 130, failed(boundExceeded, "a", 1))}, true},
		{"refusal names a wrong version", []porcupine.Operation{opened(), xfer(2, 3, "t", 130, failed(boundExceeded, "a", 2))}, false},
		{"refusal names a foreign key", []porcupine.Operation{opened(), xfer(2, 3, "t", 130, failed(boundExceeded, "c", 1))}, false},
		{"held key", []porcupine.Operation{opened(), xfer(2, 3, "t", 30, failed(intentHeld, "b", 0)), read(4, 5, "b", 100, 1)}, true},
		{"aborted", []porcupine.Operation{opened(), xfer(2, 3, "t", 30, failed(aborted, "", 0)), read(4, 5, "a", 100, 1)}, true},
		{"aborted yet applied", []porcupine.Operation{opened(), xfer(2, 3, "t", 30, failed(aborted, "", 0)), read(4, 5, "a", 70, 2)}, false},
		{"a transfer cannot mismatch", []porcupine.Operation{opened(), xfer(2, 3, "t", 30, failed(versionMismatch, "a", 1))}, false},
		{"other failures are wrong", []porcupine.Operation{opened(), xfer(2, 3, "t", 30, failed("FAILURE_REASON_NOT_A_COUNTER", "a", 1))}, false},
		{"ambiguous transfer applied", []porcupine.Operation{opened(), xfer(2, Never, "t", 30, ambiguous), read(4, 5, "a", 70, 7), read(4, 5, "b", 130, 7)}, true},
		{"ambiguous transfer not applied", []porcupine.Operation{opened(), xfer(2, Never, "t", 30, ambiguous), read(4, 5, "a", 100, 1)}, true},
		{"ambiguous overdraft applied", []porcupine.Operation{opened(), xfer(2, Never, "t", 130, ambiguous), read(4, 5, "a", -30, 7)}, false},
		{"settled applied", []porcupine.Operation{opened(), xfer(2, Never, "t", 30, ambiguous), settle(10, 11, "t", 30, true), read(12, 13, "b", 130, 7)}, true},
		{"settled applied, not seen after", []porcupine.Operation{opened(), xfer(2, Never, "t", 30, ambiguous), settle(10, 11, "t", 30, true), read(12, 13, "b", 100, 1)}, false},
		{"settled not applied, yet seen", []porcupine.Operation{opened(), xfer(2, Never, "t", 30, ambiguous), settle(10, 11, "t", 30, false), read(12, 13, "b", 130, 7)}, false},
		{"snapshot validated", []porcupine.Operation{opened(), read(2, 3, "a", 100, 1), validate(4, 5, []uint64{1, 1}, committed())}, true},
		{"stale snapshot validated", []porcupine.Operation{opened(), xfer(2, 3, "t", 30, committed(2, 2)), validate(4, 5, []uint64{1, 1}, committed())}, false},
		{"stale snapshot refused", []porcupine.Operation{opened(), xfer(2, 3, "t", 30, committed(2, 2)), validate(4, 5, []uint64{1, 1}, failed(versionMismatch, "a", 2))}, true},
		{"current snapshot refused", []porcupine.Operation{opened(), validate(4, 5, []uint64{1, 1}, failed(versionMismatch, "a", 1))}, false},
		{"snapshot refused with a wrong version", []porcupine.Operation{opened(), validate(4, 5, []uint64{3, 1}, failed(versionMismatch, "a", 2))}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := porcupine.CheckOperationsTimeout(BankModel(200), tc.ops, 0)
			if want := map[bool]porcupine.CheckResult{true: porcupine.Ok, false: porcupine.Illegal}[tc.legal]; res != want {
				t.Errorf("check = %v, want %v", res, want)
			}
		})
	}
}

// TestBankModelUpperBound: a committed credit keeps its account within
// the upper bound too (here 150, below the total).
func TestBankModelUpperBound(t *testing.T) {
	for amount, want := range map[int64]porcupine.CheckResult{50: porcupine.Ok, 60: porcupine.Illegal} {
		if res := porcupine.CheckOperationsTimeout(BankModel(150), []porcupine.Operation{opened(), xfer(2, 3, "t", amount, committed(2, 2))}, 0); res != want {
			t.Errorf("credit of %d onto 100: check = %v, want %v", amount, res, want)
		}
	}
}
