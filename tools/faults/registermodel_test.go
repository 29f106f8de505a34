package faults

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// Shorthands for hand-written histories: operations on key k by client
// 0, from call to ret.
func get(call, ret int64, value string, version uint64) porcupine.Operation {
	return porcupine.Operation{Input: RegisterInput{Key: "k", Get: true}, Output: RegisterOutput{Value: value, Version: version}, Call: call, Return: ret}
}

func put(call, ret int64, value string, out RegisterOutput) porcupine.Operation {
	return porcupine.Operation{Input: RegisterInput{Key: "k", Value: value}, Output: out, Call: call, Return: ret}
}

func cas(call, ret int64, value string, ifVersion uint64, out RegisterOutput) porcupine.Operation {
	return porcupine.Operation{Input: RegisterInput{Key: "k", Value: value, Conditional: true, IfVersion: ifVersion}, Output: out, Call: call, Return: ret}
}

func ok(version uint64) RegisterOutput { return RegisterOutput{Committed: true, Version: version} }

func mismatch(current uint64) RegisterOutput {
	return RegisterOutput{Failure: versionMismatch, Version: current}
}

var unknown = RegisterOutput{Ambiguous: true}

// TestRegisterModel checks hand-written histories, legal and not: the
// model must refuse the anomalies a broken store would show, or the
// check would be vacuous, and allow both outcomes of an ambiguous put.
func TestRegisterModel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ops   []porcupine.Operation
		legal bool
	}{
		{"write then read", []porcupine.Operation{put(0, 1, "a", ok(1)), get(2, 3, "a", 1)}, true},
		{"read of absent key", []porcupine.Operation{get(0, 1, "", 0)}, true},
		{"stale read", []porcupine.Operation{put(0, 1, "a", ok(1)), cas(2, 3, "b", 1, ok(2)), get(4, 5, "a", 1)}, false},
		{"lost acknowledged write", []porcupine.Operation{put(0, 1, "a", ok(1)), get(2, 3, "", 0)}, false},
		{"read concurrent with write", []porcupine.Operation{put(0, 10, "a", ok(1)), get(1, 2, "", 0), get(3, 4, "a", 1)}, true},
		{"read goes back in time", []porcupine.Operation{put(0, 10, "a", ok(1)), get(1, 2, "a", 1), get(3, 4, "", 0)}, false},
		{"wrong version read", []porcupine.Operation{put(0, 1, "a", ok(1)), get(2, 3, "a", 2)}, false},
		{"conditional put on the read version", []porcupine.Operation{put(0, 1, "a", ok(3)), cas(2, 3, "b", 3, ok(8)), get(4, 5, "b", 8)}, true},
		{"conditional put on a stale version commits", []porcupine.Operation{put(0, 1, "a", ok(3)), cas(2, 3, "b", 2, ok(8))}, false},
		{"conflict names the current version", []porcupine.Operation{put(0, 1, "a", ok(3)), cas(2, 3, "b", 2, mismatch(3))}, true},
		{"conflict with a wrong current version", []porcupine.Operation{put(0, 1, "a", ok(3)), cas(2, 3, "b", 2, mismatch(4))}, false},
		{"conflict although the version matched", []porcupine.Operation{put(0, 1, "a", ok(3)), cas(2, 3, "b", 3, mismatch(3))}, false},
		{"create on an existing key", []porcupine.Operation{put(0, 1, "a", ok(3)), cas(2, 3, "b", 0, ok(5))}, false},
		{"versions go backwards", []porcupine.Operation{put(0, 1, "a", ok(5)), put(2, 3, "b", ok(4))}, false},
		{"blind put cannot conflict", []porcupine.Operation{put(0, 1, "a", mismatch(0))}, false},
		{"other failures are wrong", []porcupine.Operation{put(0, 1, "a", RegisterOutput{Failure: "FAILURE_REASON_TOO_LARGE"})}, false},
		{"ambiguous put applied", []porcupine.Operation{put(0, Never, "a", unknown), get(5, 6, "a", 4)}, true},
		{"ambiguous put not applied", []porcupine.Operation{put(0, Never, "a", unknown), get(5, 6, "", 0)}, true},
		{"ambiguous put applied late", []porcupine.Operation{put(0, Never, "a", unknown), get(5, 6, "", 0), get(7, 8, "a", 4)}, true},
		{"ambiguous put applied, then undone", []porcupine.Operation{put(0, Never, "a", unknown), get(5, 6, "a", 4), get(7, 8, "", 0)}, false},
		{"ambiguous put seen before it was called", []porcupine.Operation{get(0, 1, "a", 4), put(2, Never, "a", unknown)}, false},
		{"unknown version learnt from a conflict", []porcupine.Operation{put(0, 1, "a", ok(2)), put(2, Never, "b", unknown), cas(3, 4, "c", 2, mismatch(6)), get(5, 6, "b", 6)}, true},
		{"unknown version is above the last known", []porcupine.Operation{put(0, 1, "a", ok(5)), put(2, Never, "b", unknown), get(3, 4, "b", 5)}, false},
		{"conditional put on a version the unknown one replaced", []porcupine.Operation{put(0, 1, "a", ok(5)), put(2, Never, "b", unknown), get(3, 4, "b", 7), cas(5, 6, "c", 5, ok(9))}, false},
		{"ambiguous conditional put that could not apply", []porcupine.Operation{put(0, 1, "a", ok(5)), cas(2, Never, "b", 4, unknown), get(3, 4, "b", 6)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := porcupine.CheckOperationsTimeout(RegisterModel(), tc.ops, 0)
			if want := map[bool]porcupine.CheckResult{true: porcupine.Ok, false: porcupine.Illegal}[tc.legal]; res != want {
				t.Errorf("check = %v, want %v", res, want)
			}
		})
	}
}

// TestRegisterModelPartitions checks that keys are judged apart: each
// key's history is legal alone, and one bad key makes the whole illegal.
func TestRegisterModelPartitions(t *testing.T) {
	onKey := func(key string, op porcupine.Operation) porcupine.Operation {
		in := op.Input.(RegisterInput)
		in.Key = key
		op.Input = in
		return op
	}
	legal := []porcupine.Operation{
		onKey("x", put(0, 1, "a", ok(1))), onKey("y", put(0, 1, "b", ok(1))),
		onKey("x", get(2, 3, "a", 1)), onKey("y", get(2, 3, "b", 1)),
	}
	if res := porcupine.CheckOperationsTimeout(RegisterModel(), legal, 0); res != porcupine.Ok {
		t.Errorf("two keys each at version 1: check = %v, want Ok", res)
	}
	illegal := append(legal, onKey("y", get(4, 5, "a", 1)))
	if res := porcupine.CheckOperationsTimeout(RegisterModel(), illegal, 0); res != porcupine.Illegal {
		t.Errorf("y reads x's value: check = %v, want Illegal", res)
	}
}
