// Package authz decides what each identity may do in the cell store: per
// role, which keys it may read, watch and write, with which operations,
// and which administrative calls it may make. The store's server asks it
// about every key of every request (cellstore/server's admit), once, where
// the request enters the store.
//
// A rule names keys by a pattern of '/'-separated segments:
//
//	/machines/{name}       {name}: the identity's name (an agent's
//	                       "hollow-*" name covers every machine it prefixes)
//	/tasks/*/*/*           *: any one segment
//	/bindings/{name}/**    **, last: anything below, at any depth
//	**                     every key
//
// and allows operations on them: read (Get, Range, and conditions in a
// commit), watch, create (a put conditioned on the key being absent),
// update (a put conditioned on a version of an existing key), put (either:
// an unconditioned put needs both create and update), delete, add. A Range
// or Watch of a prefix is allowed when one rule's pattern covers every key
// the prefix can hold (it ends in ** past the prefix's complete segments).
package authz

import (
	"fmt"
	"slices"
	"strings"

	"github.com/troupe-cluster/troupe/cellstore/pki"
)

// Op is an operation on a key.
type Op uint8

// The operations a rule allows.
const (
	OpRead Op = 1 << iota
	OpWatch
	OpCreate
	OpUpdate
	OpDelete
	OpAdd
)

// OpPut is an unconditioned put: it may create or update.
const OpPut = OpCreate | OpUpdate

var opNames = []struct {
	name string
	op   Op
}{{"read", OpRead}, {"watch", OpWatch}, {"create", OpCreate}, {"update", OpUpdate}, {"put", OpPut}, {"delete", OpDelete}, {"add", OpAdd}}

// String names the operation ("put" for an unconditioned one).
func (o Op) String() string {
	for _, n := range opNames {
		if n.op == o {
			return n.name
		}
	}
	var parts []string
	for _, n := range opNames {
		if o&n.op == n.op && n.op != OpPut {
			parts = append(parts, n.name)
		}
	}
	return strings.Join(parts, "+")
}

func parseOp(s string) (Op, bool) {
	for _, n := range opNames {
		if n.name == s {
			return n.op, true
		}
	}
	return 0, false
}

// Call is an administrative call, authorized by role alone.
type Call string

// The calls a role may be allowed.
const (
	CallStatus        Call = "status"         // Store.Status: how clients find shard leaders
	CallListMembers   Call = "list-members"   // Admin.ListMembers
	CallChangeMembers Call = "change-members" // Admin.AddMember, Admin.RemoveMember
	CallBackup        Call = "backup"         // Admin.Backup
)

var calls = []Call{CallStatus, CallListMembers, CallChangeMembers, CallBackup}

// Rules are compiled rules: for each role, its key rules and its calls.
// Rules are immutable and safe for concurrent use.
type Rules struct {
	roles    map[string]*roleRules
	allowAll bool
}

// AllowAll returns rules that allow every identity everything: a cell
// with authentication but no authorization, against which benchmarks
// measure what authorization costs.
func AllowAll() *Rules { return &Rules{allowAll: true} }

type roleRules struct {
	keys  []keyRule
	calls []Call
}

type keyRule struct {
	pattern []string // segments; "{name}", "*", and a final "**" are special
	ops     Op
}

// AllowKey reports whether id may do op on key (every bit of op, for an
// unconditioned put).
func (r *Rules) AllowKey(id pki.Identity, key string, op Op) bool {
	if r.allowAll {
		return true
	}
	rr := r.roles[id.Role]
	if rr == nil {
		return false
	}
	var allowed Op
	for i := range rr.keys {
		if rr.keys[i].ops&op != 0 && matchKey(rr.keys[i].pattern, key, id) {
			allowed |= rr.keys[i].ops
			if allowed&op == op {
				return true
			}
		}
	}
	return false
}

// AllowPrefix reports whether id may do op (read or watch) on every key
// under prefix.
func (r *Rules) AllowPrefix(id pki.Identity, prefix string, op Op) bool {
	if r.allowAll {
		return true
	}
	rr := r.roles[id.Role]
	if rr == nil {
		return false
	}
	for i := range rr.keys {
		if rr.keys[i].ops&op == op && coversPrefix(rr.keys[i].pattern, prefix, id) {
			return true
		}
	}
	return false
}

// AllowCall reports whether id may make call.
func (r *Rules) AllowCall(id pki.Identity, call Call) bool {
	if r.allowAll {
		return true
	}
	rr := r.roles[id.Role]
	return rr != nil && slices.Contains(rr.calls, call)
}

// matchKey matches key against a pattern segment by segment, without
// allocating.
func matchKey(pattern []string, key string, id pki.Identity) bool {
	rest := key
	for i, p := range pattern {
		if p == "**" {
			return true
		}
		seg, tail, more := strings.Cut(rest, "/")
		if !matchSegment(p, seg, id) {
			return false
		}
		if !more {
			return i == len(pattern)-1
		}
		rest = tail
	}
	return false
}

// coversPrefix reports whether every key under prefix matches pattern:
// the complete segments of prefix match the pattern up to a "**".
func coversPrefix(pattern []string, prefix string, id pki.Identity) bool {
	rest := prefix
	for _, p := range pattern {
		if p == "**" {
			return true
		}
		seg, tail, complete := strings.Cut(rest, "/")
		if !complete || !matchSegment(p, seg, id) {
			return false
		}
		rest = tail
	}
	return false
}

func matchSegment(p, seg string, id pki.Identity) bool {
	switch p {
	case "*":
		return true
	case "{name}":
		return id.Covers(seg)
	default:
		return p == seg
	}
}

// compilePattern checks a pattern and splits it into segments.
func compilePattern(s string) ([]string, error) {
	if s == "" {
		return nil, fmt.Errorf("empty key pattern")
	}
	segs := strings.Split(s, "/")
	for i, seg := range segs {
		switch {
		case seg == "**" && i != len(segs)-1:
			return nil, fmt.Errorf("pattern %q: ** may only be the last segment", s)
		case seg != "**" && seg != "*" && seg != "{name}" && strings.ContainsAny(seg, "*{}"):
			return nil, fmt.Errorf("pattern %q: segment %q mixes * or {name} with text; a segment is text, *, {name}, or a final **", s, seg)
		}
	}
	return segs, nil
}
