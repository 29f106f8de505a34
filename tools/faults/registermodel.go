package faults

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// RegisterInput is one register operation: a linearizable get of Key, or
// a put of Value (unique in the history), with IfVersion as its
// condition when Conditional (0: the key must not exist).
type RegisterInput struct {
	Key         string `json:"key"`
	Get         bool   `json:"get,omitempty"`
	Value       string `json:"value,omitempty"`
	Conditional bool   `json:"conditional,omitempty"`
	IfVersion   uint64 `json:"if_version,omitempty"`
}

// RegisterOutput is what an operation returned. A get: Value and Version
// (0 and "" when the key does not exist). A put: Committed with the new
// Version; or Failure (a group failure reason) with the key's current
// Version; or Ambiguous, outcome unknown.
type RegisterOutput struct {
	Value     string `json:"value,omitempty"`
	Version   uint64 `json:"version,omitempty"`
	Committed bool   `json:"committed,omitempty"`
	Failure   string `json:"failure,omitempty"`
	Ambiguous bool   `json:"ambiguous,omitempty"`
}

// versionMismatch is the one failure a register put may meet.
const versionMismatch = "FAILURE_REASON_VERSION_MISMATCH"

// registerState is one key as the model knows it: its value and version
// (0: absent).
type registerState struct {
	Value string
	knownVersion
}

// learn returns s with its version now known to be v.
func (s registerState) learn(v uint64) registerState {
	return registerState{Value: s.Value, knownVersion: s.seen(v)}
}

// registerStep is the sequential specification of one key: whether
// operation in could have returned out in state s, and the state after.
func registerStep(s registerState, in RegisterInput, out RegisterOutput) (bool, registerState) {
	switch {
	case in.Get:
		return out.Value == s.Value && s.mayBe(out.Version), s.learn(out.Version)
	case out.Ambiguous:
		if in.Conditional && !s.mayBe(in.IfVersion) {
			return true, s // it cannot have applied here
		}
		// It applied here. (If it did not apply at all, the checker
		// linearizes it last, where nothing observes it.)
		_, v := s.written(0)
		return true, registerState{Value: in.Value, knownVersion: v}
	case out.Committed:
		ok, v := s.written(out.Version)
		ok = ok && out.Version > 0 && (!in.Conditional || s.mayBe(in.IfVersion) && out.Version > in.IfVersion)
		return ok, registerState{Value: in.Value, knownVersion: v}
	default:
		ok := out.Failure == versionMismatch && in.Conditional && s.mayBe(out.Version) && out.Version != in.IfVersion
		return ok, s.learn(out.Version)
	}
}

// RegisterModel is the porcupine model of the register workload: a
// versioned register per key, partitioned by key.
func RegisterModel() porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var keys []string
			for _, op := range history {
				k := op.Input.(RegisterInput).Key
				if _, ok := byKey[k]; !ok {
					keys = append(keys, k)
				}
				byKey[k] = append(byKey[k], op)
			}
			var out [][]porcupine.Operation
			for _, k := range keys {
				out = append(out, byKey[k])
			}
			return out
		},
		Init: func() any { return registerState{knownVersion: knownVersion{Known: true}} },
		Step: func(state, input, output any) (bool, any) {
			return registerStep(state.(registerState), input.(RegisterInput), output.(RegisterOutput))
		},
		DescribeOperation: func(input, output any) string {
			return describeRegisterOp(input.(RegisterInput), output.(RegisterOutput))
		},
		DescribeState: func(state any) string {
			s := state.(registerState)
			switch {
			case s.Known && s.Version == 0:
				return "absent"
			case s.Known:
				return fmt.Sprintf("%s@%d", s.Value, s.Version)
			}
			return fmt.Sprintf("%s@? (>%d)", s.Value, s.Floor)
		},
	}
}

// describeRegisterOp is an operation in short: get k → v@7, put k=v
// if@5 → ok@9 | VERSION_MISMATCH@7 | ?.
func describeRegisterOp(in RegisterInput, out RegisterOutput) string {
	if in.Get {
		if out.Version == 0 {
			return fmt.Sprintf("get %s → absent", in.Key)
		}
		return fmt.Sprintf("get %s → %s@%d", in.Key, out.Value, out.Version)
	}
	op := fmt.Sprintf("put %s=%s", in.Key, in.Value)
	if in.Conditional {
		op += fmt.Sprintf(" if@%d", in.IfVersion)
	}
	switch {
	case out.Ambiguous:
		return op + " → ?"
	case out.Committed:
		return fmt.Sprintf("%s → ok@%d", op, out.Version)
	}
	return fmt.Sprintf("%s → %s@%d", op, out.Failure, out.Version)
}
