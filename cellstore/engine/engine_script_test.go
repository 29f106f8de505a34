package engine

// Data-driven script tests for the whole transaction engine, on
// github.com/cockroachdb/datadriven: single-shard commits, the phases of
// cross-shard transactions, and the freezes of backups.
//
// Each file in testdata/*.txt is one script, run against fresh shards
// (MemStorage, created on first use and named by number). A directive is
// one command, its input lines, and the output it must produce:
//
//	# comment
//	command [shard=N] key=value flag ...
//	input line
//	----
//	expected output
//
// Run
//
//	go test ./cellstore/engine -run TestScripts -rewrite
//
// to replace every expected output with what the engine does now, then
// review the diff.
//
// Every directive but settle and overdue works on one shard: shard=N,
// shard 0 when not given. The runner checks, after each directive, what
// must hold whatever the script does (scriptShard.checkInvariants), and
// for each proposal what must hold of its result (script.propose).
//
// Proposals (one Raft entry each; now=N is the proposer's clock, window=N
// the dedupe window, retention=N the change-log retention):
//
//	commit [txn=ID] [atomic] [now=N] [window=N] [retention=N] [hash=N] [indexes=(I,J,...)]
//	    An APPLY: one input line per group,
//	        group: cond /a 0; put /a x; add /c 5 0 10; del /b
//	    cond KEY VERSION | put KEY [VALUE] | del KEY | add KEY DELTA MIN MAX.
//	    A VALUE may be a Go-quoted string; MIN and MAX may be the words min
//	    and max (the int64 limits). hash defaults to a hash of the input
//	    lines, so that a retry with the same text has the same request hash.
//	prepare txn=ID [participants=(S,...)] [deadline=N] [atomic] [admit] [now=N] [window=N] [hash=N] [indexes=(I,...)]
//	    A PREPARE of the shard's part of cross-shard transaction ID, groups
//	    as for commit. participants is needed on the transaction's first
//	    prepare; later ones default to it, and to atomic if the first
//	    was. hash defaults to one derived
//	    from ID, the same on every participant (the request's); another
//	    hash is another request's, whose outcome settle does not see.
//	fence txn=ID [now=N] [window=N] [hash=N]
//	    A FENCE: what the shard knows of ID, fencing it if nothing. hash
//	    as for prepare.
//	resolve txn=ID [commit=(I,...) | abort] [now=N] [window=N] [retention=N]
//	    A RESOLVE with the decision of the last settle of ID, or with the
//	    groups named by commit= (none: abort).
//	freeze id=ID now=N until=N
//	thaw id=ID now=N
//	    A FREEZE or THAW of a backup's freeze ID.
//	fill n=N prefix=P [now=N] [retention=N]
//	    N APPLYs, each putting P<i> (i from 1), for change-log tests.
//
// Decisions and reads (no proposal; the shard's clock does not move):
//
//	settle txn=ID [participants=(S,...)]
//	    engine.Settle over what each participant said last of ID in a
//	    prepare or fence directive (nothing: knows nothing).
//	overdue now=N [limit=N]
//	    engine.Overdue: transactions prepared here past their deadline.
//	intents           intents held on the shard, by key, and its prepared
//	                  transactions
//	get KEY           one user key
//	scan [PREFIX]     user keys under PREFIX (all with no prefix)
//	log REV           the change set stored for revision REV
//	meta              revision, log start, clock, which revisions the
//	                  change log holds; the prepared count and the
//	                  freeze when there are any
//	txns              remembered txn outcomes and the expiry index

import (
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"google.golang.org/protobuf/proto"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if filepath.Ext(path) != ".txt" {
			t.Skipf("%s is not a script", path)
		}
		s := &script{shards: map[uint32]*scriptShard{}, txns: map[string]*scriptTxn{}}
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			return s.run(t, td)
		})
	})
}

// script is the engine under test, the shards of one script, and what
// the runner remembers across directives.
type script struct {
	t      *testing.T
	td     *datadriven.TestData // the directive running
	shards map[uint32]*scriptShard
	txns   map[string]*scriptTxn
}

// scriptShard is one shard's state and what the runner checks across
// directives.
type scriptShard struct {
	id    uint32
	st    *MemStorage
	clock uint64 // largest clock seen, to check it never goes back
}

// scriptTxn is what the script's driver knows of a cross-shard
// transaction: what the server keeps while it runs one.
type scriptTxn struct {
	participants []uint32
	atomic       bool
	hash         uint64
	// states: what each participant said last (prepare or fence).
	states map[uint32]*storev1.Outcome
	// decided: the decision of the last settle, nil before.
	decided *storev1.Outcome
}

type scriptHandler func(s *script, a *scriptArgs) []string

var scriptCommands map[string]scriptHandler

func init() {
	scriptCommands = map[string]scriptHandler{
		"commit":  (*script).cmdCommit,
		"fill":    (*script).cmdFill,
		"prepare": (*script).cmdPrepare,
		"fence":   (*script).cmdFence,
		"settle":  (*script).cmdSettle,
		"resolve": (*script).cmdResolve,
		"overdue": (*script).cmdOverdue,
		"freeze":  (*script).cmdFreeze,
		"thaw":    (*script).cmdThaw,
		"intents": (*script).cmdIntents,
		"get":     (*script).cmdGet,
		"scan":    (*script).cmdScan,
		"log":     (*script).cmdLog,
		"meta":    (*script).cmdMeta,
		"txns":    (*script).cmdTxns,
	}
}

// run executes one directive and returns its output. Mistakes in the
// script fail the test; engine errors become output.
func (s *script) run(t *testing.T, td *datadriven.TestData) string {
	s.t, s.td = t, td
	h, ok := scriptCommands[td.Cmd]
	if !ok {
		s.fatalf("unknown command %q", td.Cmd)
	}
	a := &scriptArgs{s: s, used: map[string]bool{}}
	out := h(s, a)
	a.done()
	if len(out) == 0 {
		out = []string{"ok"}
	}
	for _, id := range slices.Sorted(maps.Keys(s.shards)) {
		s.shards[id].checkInvariants(s)
	}
	return strings.Join(out, "\n")
}

func (s *script) fatalf(format string, args ...any) {
	s.t.Helper()
	s.td.Fatalf(s.t, format, args...)
}

func (s *script) errorf(format string, args ...any) {
	s.t.Helper()
	s.t.Errorf("%s: %s", s.td.Pos, fmt.Sprintf(format, args...))
}

// shard returns shard id, creating it empty on first use.
func (s *script) shard(id uint32) *scriptShard {
	sh, ok := s.shards[id]
	if !ok {
		sh = &scriptShard{id: id, st: NewMemStorage()}
		s.shards[id] = sh
	}
	return sh
}

// txn returns what the driver knows of cross-shard transaction id.
func (s *script) txn(id string) *scriptTxn {
	x, ok := s.txns[id]
	if !ok {
		h := fnv.New64a()
		h.Write([]byte("txn " + id))
		x = &scriptTxn{hash: h.Sum64(), states: map[uint32]*storev1.Outcome{}}
		s.txns[id] = x
	}
	return x
}

// scriptArgs are the arguments of a directive. Handlers take what they
// know; done fails the test on any left, so that a typo is not ignored.
type scriptArgs struct {
	s    *script
	used map[string]bool
}

func (a *scriptArgs) get(key string) (datadriven.CmdArg, bool) {
	arg, ok := a.s.td.Arg(key)
	if ok {
		a.used[key] = true
	}
	return arg, ok
}

func (a *scriptArgs) flag(key string) bool {
	arg, ok := a.get(key)
	if ok && len(arg.Vals) != 0 {
		a.s.fatalf("%s is a flag, it takes no value", key)
	}
	return ok
}

func (a *scriptArgs) str(key, def string) string {
	arg, ok := a.get(key)
	if !ok {
		return def
	}
	if len(arg.Vals) != 1 {
		a.s.fatalf("%s wants one value", key)
	}
	return arg.Vals[0]
}

func (a *scriptArgs) required(key string) string {
	if _, ok := a.s.td.Arg(key); !ok {
		a.s.fatalf("%s needs %s=", a.s.td.Cmd, key)
	}
	return a.str(key, "")
}

func (a *scriptArgs) int64(key string, def int64) int64 {
	v := a.str(key, "")
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		a.s.fatalf("%s=%s: %v", key, v, err)
	}
	return n
}

func (a *scriptArgs) uint64(key string, def uint64) uint64 {
	v := a.str(key, "")
	if v == "" {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		a.s.fatalf("%s=%s: %v", key, v, err)
	}
	return n
}

// uint32s reads key=(a,b,...); ok is false when the key is absent.
func (a *scriptArgs) uint32s(key string) (out []uint32, ok bool) {
	arg, ok := a.get(key)
	if !ok {
		return nil, false
	}
	for _, v := range arg.Vals {
		if v == "" {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			a.s.fatalf("%s: %v", key, err)
		}
		out = append(out, uint32(n))
	}
	return out, true
}

// positional returns the bare words not taken as flags.
func (a *scriptArgs) positional() []string {
	var out []string
	for _, arg := range a.s.td.CmdArgs {
		if len(arg.Vals) == 0 && !a.used[arg.Key] {
			a.used[arg.Key] = true
			out = append(out, arg.Key)
		}
	}
	return out
}

// shard returns the shard the directive works on.
func (a *scriptArgs) shard() *scriptShard {
	return a.s.shard(uint32(a.uint64("shard", 0)))
}

func (a *scriptArgs) done() {
	for _, arg := range a.s.td.CmdArgs {
		if !a.used[arg.Key] {
			a.s.fatalf("%s: unknown argument %q", a.s.td.Cmd, arg.Key)
		}
	}
}

// groups parses the directive's input lines, one group each, with their
// request indexes (indexes=, or 0, 1, ...), and a hash of the lines.
func (a *scriptArgs) groups() (groups []*storev1.Group, indexes []uint32, hash uint64) {
	h := fnv.New64a()
	if in := a.s.td.Input; in != "" {
		for l := range strings.SplitSeq(in, "\n") {
			g, err := parseGroup(l)
			if err != nil {
				a.s.fatalf("%v", err)
			}
			groups = append(groups, g)
			h.Write([]byte(l + "\n"))
		}
	}
	indexes, ok := a.uint32s("indexes")
	if !ok {
		for i := range groups {
			indexes = append(indexes, uint32(i))
		}
	} else if len(indexes) != len(groups) {
		a.s.fatalf("indexes names %d groups, the input has %d", len(indexes), len(groups))
	}
	return groups, indexes, h.Sum64()
}

// parseGroup parses "group: cond /a 0; put /a x; add /c 5 0 10; del /b".
func parseGroup(l string) (*storev1.Group, error) {
	rest, ok := strings.CutPrefix(l, "group:")
	if !ok {
		return nil, fmt.Errorf("input line %q does not start with group:", l)
	}
	g := &storev1.Group{}
	for item := range strings.SplitSeq(rest, ";") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		verb, args, _ := strings.Cut(item, " ")
		args = strings.TrimSpace(args)
		f := strings.Fields(args)
		switch verb {
		case "cond":
			if len(f) != 2 {
				return nil, fmt.Errorf("%q: want cond KEY VERSION", item)
			}
			v, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%q: %v", item, err)
			}
			g.Conditions = append(g.Conditions, &storev1.Condition{Key: f[0], Version: v})
		case "put":
			if len(f) == 0 {
				return nil, fmt.Errorf("%q: want put KEY [VALUE]", item)
			}
			value := strings.TrimSpace(strings.TrimPrefix(args, f[0]))
			if strings.HasPrefix(value, `"`) {
				uq, err := strconv.Unquote(value)
				if err != nil {
					return nil, fmt.Errorf("%q: %v", item, err)
				}
				value = uq
			}
			g.Ops = append(g.Ops, &storev1.Op{Op: &storev1.Op_Put{Put: &storev1.Put{Key: f[0], Value: []byte(value)}}})
		case "del":
			if len(f) != 1 {
				return nil, fmt.Errorf("%q: want del KEY", item)
			}
			g.Ops = append(g.Ops, &storev1.Op{Op: &storev1.Op_Delete{Delete: &storev1.Delete{Key: f[0]}}})
		case "add":
			if len(f) != 4 {
				return nil, fmt.Errorf("%q: want add KEY DELTA MIN MAX", item)
			}
			var n [3]int64
			for i, s := range f[1:] {
				switch s {
				case "min":
					n[i] = math.MinInt64
				case "max":
					n[i] = math.MaxInt64
				default:
					v, err := strconv.ParseInt(s, 10, 64)
					if err != nil {
						return nil, fmt.Errorf("%q: %v", item, err)
					}
					n[i] = v
				}
			}
			g.Ops = append(g.Ops, &storev1.Op{Op: &storev1.Op_Add{Add: &storev1.Add{Key: f[0], Delta: n[0], Min: n[1], Max: n[2]}}})
		default:
			return nil, fmt.Errorf("%q: unknown verb %q", item, verb)
		}
	}
	return g, nil
}

func (s *script) cmdCommit(a *scriptArgs) []string {
	sh := a.shard()
	p := &storev1.Proposal{
		TxnId:             a.str("txn", ""),
		Atomic:            a.flag("atomic"),
		NowUnixNanos:      a.int64("now", 0),
		DedupeWindowNanos: a.int64("window", 0),
		LogRetention:      a.uint64("retention", 0),
	}
	var hash uint64
	p.Groups, p.GroupIndexes, hash = a.groups()
	p.RequestHash = a.uint64("hash", hash)
	res, err := s.propose(sh, p)
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	return formatResult(res, true)
}

// propose applies p to shard sh and checks what holds of any result: a
// duplicate or a refusal writes nothing, changes come with exactly one
// new revision and are what the change log holds, only APPLY and RESOLVE
// change data, and a refused proposal leaves the state as it was.
func (s *script) propose(sh *scriptShard, p *storev1.Proposal) (*Result, error) {
	s.t.Helper()
	phase := p.GetPhase()
	newCommit := phase == storev1.Phase_PHASE_APPLY || phase == storev1.Phase_PHASE_PREPARE
	var before map[string]string
	if newCommit {
		before = sh.snapshot(s)
	}
	revBefore := sh.meta(s, metaRevision)
	res, err := Apply(sh.st, p)
	if err != nil {
		return nil, err
	}
	out := res.Outcome
	revAfter := sh.meta(s, metaRevision)
	switch {
	case res.Changes != nil && phase != storev1.Phase_PHASE_APPLY && phase != storev1.Phase_PHASE_RESOLVE:
		s.errorf("a %v changed data: %v", phase, res.Changes)
	case out.GetDuplicate() || out.GetFrozen() && newCommit:
		if res.Changes != nil || revAfter != revBefore {
			s.errorf("duplicate or refused outcome wrote revision %d (was %d)", revAfter, revBefore)
		}
	case res.Changes == nil:
		if revAfter != revBefore || (phase != storev1.Phase_PHASE_FENCE && out.GetRevision() != revBefore) {
			s.errorf("no changes but revision %d -> %d, outcome %d", revBefore, revAfter, out.GetRevision())
		}
	default:
		if revAfter != revBefore+1 || out.GetRevision() != revAfter {
			s.errorf("changes but revision %d -> %d, outcome %d", revBefore, revAfter, out.GetRevision())
		}
		if stored := sh.changeSet(s, revAfter); !proto.Equal(stored, res.Changes) {
			s.errorf("Result.Changes %v differs from the log at %d: %v", res.Changes, revAfter, stored)
		}
	}
	if newCommit && out.GetFrozen() {
		if len(out.GetGroups()) != 0 {
			s.errorf("a refused proposal has group results: %v", out)
		}
		if diff := stateDiff(before, sh.snapshot(s)); diff != "" {
			s.errorf("a refused proposal changed the state: %s", diff)
		}
	} else if newCommit && !out.GetDuplicate() && len(out.GetGroups()) != len(p.GetGroups()) {
		s.errorf("%d group results for %d groups", len(out.GetGroups()), len(p.GetGroups()))
	}
	return res, nil
}

// formatResult formats an outcome (revision: with its revision) and the
// changes it made.
func formatResult(res *Result, revision bool) []string {
	out := res.Outcome
	var head []string
	if out.GetDuplicate() {
		head = append(head, "duplicate")
	}
	if out.GetFrozen() {
		head = append(head, "refused (frozen)")
	}
	if st := out.GetTxnState(); st != storev1.TxnState_TXN_STATE_UNKNOWN {
		head = append(head, "state="+txnState(st))
	}
	if revision {
		head = append(head, fmt.Sprintf("revision=%d", out.GetRevision()))
	}
	lines := append([]string{strings.Join(head, " ")}, formatGroups(out)...)
	if res.Changes != nil {
		lines = append(lines, fmt.Sprintf("changes at %d:", out.GetRevision()))
		lines = append(lines, formatEvents(res.Changes)...)
	}
	return lines
}

func txnState(st storev1.TxnState) string {
	return strings.ToLower(strings.TrimPrefix(st.String(), "TXN_STATE_"))
}

// formatGroups formats the group results of an outcome: an APPLY's with
// the revision they committed at, a prepare's as prepared, a decision's
// as committed.
func formatGroups(out *storev1.Outcome) []string {
	var lines []string
	for i, g := range out.GetGroups() {
		idx := uint32(i)
		if i < len(out.GetGroupIndexes()) {
			idx = out.GetGroupIndexes()[i]
		}
		switch {
		case g.GetCommitted() && out.GetTxnState() == storev1.TxnState_TXN_STATE_PREPARED:
			lines = append(lines, fmt.Sprintf("group %d: prepared", idx))
		case g.GetCommitted() && out.GetTxnState() != storev1.TxnState_TXN_STATE_UNKNOWN:
			lines = append(lines, fmt.Sprintf("group %d: committed", idx))
		case g.GetCommitted():
			lines = append(lines, fmt.Sprintf("group %d: committed at %d", idx, g.GetRevision()))
		default:
			f := g.GetFailure()
			reason := strings.TrimPrefix(f.GetReason().String(), "FAILURE_REASON_")
			l := fmt.Sprintf("group %d: %s", idx, reason)
			if f.GetKey() != "" || f.GetCurrentVersion() != 0 {
				l += fmt.Sprintf(" key=%s current=%d", f.GetKey(), f.GetCurrentVersion())
			}
			lines = append(lines, l+": "+f.GetMessage())
		}
	}
	return lines
}

func formatEvents(cs *storev1.ChangeSet) []string {
	var lines []string
	for _, ev := range cs.GetEvents() {
		kv := ev.GetKv()
		switch ev.GetType() {
		case storev1.EventType_EVENT_TYPE_PUT:
			lines = append(lines, fmt.Sprintf("  put %s = %q (v%d)", kv.GetKey(), kv.GetValue(), kv.GetVersion()))
		case storev1.EventType_EVENT_TYPE_DELETE:
			l := fmt.Sprintf("  delete %s (v%d)", kv.GetKey(), kv.GetVersion())
			if len(kv.GetValue()) > 0 {
				l += fmt.Sprintf(" value=%q", kv.GetValue())
			}
			lines = append(lines, l)
		default:
			lines = append(lines, fmt.Sprintf("  %v %v", ev.GetType(), kv))
		}
	}
	if len(lines) == 0 {
		lines = append(lines, "  (no events)")
	}
	return lines
}

func (s *script) cmdFill(a *scriptArgs) []string {
	sh := a.shard()
	n := a.int64("n", 1)
	prefix := a.required("prefix")
	now, retention := a.int64("now", 0), a.uint64("retention", 0)
	first, last := uint64(0), uint64(0)
	for i := int64(1); i <= n; i++ {
		key := fmt.Sprintf("%s%d", prefix, i)
		res, err := Apply(sh.st, &storev1.Proposal{
			Groups:       []*storev1.Group{{Ops: []*storev1.Op{{Op: &storev1.Op_Put{Put: &storev1.Put{Key: key, Value: []byte("v")}}}}}},
			NowUnixNanos: now,
			LogRetention: retention,
		})
		if err != nil {
			return []string{"error: " + err.Error()}
		}
		if !res.Outcome.GetGroups()[0].GetCommitted() {
			s.fatalf("fill: put %s failed: %v", key, res.Outcome)
		}
		if first == 0 {
			first = res.Outcome.GetRevision()
		}
		last = res.Outcome.GetRevision()
	}
	return []string{fmt.Sprintf("wrote revisions %d..%d", first, last)}
}

func (s *script) cmdGet(a *scriptArgs) []string {
	sh := a.shard()
	pos := a.positional()
	if len(pos) != 1 {
		s.fatalf("get KEY")
	}
	rec, err := sh.st.Get(DataKey(pos[0]))
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	if rec == nil {
		return []string{pos[0] + ": absent"}
	}
	v, value, err := DecodeRecord(rec)
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	return []string{fmt.Sprintf("%s = %q (v%d)", pos[0], value, v)}
}

func (s *script) cmdScan(a *scriptArgs) []string {
	sh := a.shard()
	prefix := ""
	switch pos := a.positional(); len(pos) {
	case 0:
	case 1:
		prefix = pos[0]
	default:
		s.fatalf("scan [PREFIX]")
	}
	var lines []string
	var derr error
	lower, upper := DataBounds(prefix)
	err := sh.st.Scan(lower, upper, func(k, rec []byte) bool {
		v, value, err := DecodeRecord(rec)
		if err != nil {
			derr = err
			return false
		}
		lines = append(lines, fmt.Sprintf("%s = %q (v%d)", UserKey(k), value, v))
		return true
	})
	if err = firstErr(err, derr); err != nil {
		return append(lines, "error: "+err.Error())
	}
	if len(lines) == 0 {
		lines = []string{"(no keys)"}
	}
	return lines
}

// firstErr returns the first non-nil error.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *script) cmdLog(a *scriptArgs) []string {
	sh := a.shard()
	pos := a.positional()
	if len(pos) != 1 {
		s.fatalf("log REV")
	}
	rev, err := strconv.ParseUint(pos[0], 10, 64)
	if err != nil {
		s.fatalf("log: %v", err)
	}
	cs := sh.changeSet(s, rev)
	if cs == nil {
		return []string{fmt.Sprintf("no change set at %d", rev)}
	}
	return append([]string{fmt.Sprintf("changes at %d:", rev)}, formatEvents(cs)...)
}

func (s *script) cmdMeta(a *scriptArgs) []string {
	sh := a.shard()
	var revs []uint64
	err := sh.st.Scan([]byte{prefixLog}, []byte{prefixLog + 1}, func(k, _ []byte) bool {
		v, err := DecodeUint64(k[1:])
		if err != nil {
			s.fatalf("log key %q: %v", k, err)
		}
		revs = append(revs, v)
		return true
	})
	lines := []string{
		fmt.Sprintf("revision=%d log-start=%d clock=%d", sh.meta(s, metaRevision), sh.meta(s, metaLogStart), sh.meta(s, metaClock)),
		"log holds " + formatRanges(revs),
	}
	if n := sh.meta(s, metaPrepared); n != 0 {
		lines = append(lines, fmt.Sprintf("prepared=%d", n))
	}
	if f := sh.freezeStatus(s); f.Freeze != nil {
		lines = append(lines, formatFreeze(f))
	}
	if err != nil {
		lines = append(lines, "error: "+err.Error())
	}
	return lines
}

// formatRanges writes sorted revisions as runs: "[1..3 5]".
func formatRanges(revs []uint64) string {
	var parts []string
	for i := 0; i < len(revs); {
		j := i
		for j+1 < len(revs) && revs[j+1] == revs[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.FormatUint(revs[i], 10))
		} else {
			parts = append(parts, fmt.Sprintf("%d..%d", revs[i], revs[j]))
		}
		i = j + 1
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func (s *script) cmdTxns(a *scriptArgs) []string {
	sh := a.shard()
	var lines []string
	var derr error
	err := sh.st.Scan([]byte{prefixTxn}, []byte{prefixTxn + 1}, func(k, v []byte) bool {
		rec := &storev1.TxnRecord{}
		if err := proto.Unmarshal(v, rec); err != nil {
			derr = err
			return false
		}
		out := rec.GetOutcome()
		committed := 0
		for _, g := range out.GetGroups() {
			if g.GetCommitted() {
				committed++
			}
		}
		l := fmt.Sprintf("txn %s: expires=%d hash=%d revision=%d committed=%d/%d",
			k[1:], rec.GetExpiresUnixNanos(), rec.GetRequestHash(), out.GetRevision(), committed, len(out.GetGroups()))
		if st := out.GetTxnState(); st != storev1.TxnState_TXN_STATE_UNKNOWN {
			l += " state=" + txnState(st)
		}
		lines = append(lines, l)
		return true
	})
	if err = firstErr(err, derr); err != nil {
		return append(lines, "error: "+err.Error())
	}
	err = sh.st.Scan([]byte{prefixExpiry}, []byte{prefixExpiry + 1}, func(k, _ []byte) bool {
		exp, _ := DecodeUint64(k[1:9])
		lines = append(lines, fmt.Sprintf("expiry %d: %s", int64(exp), k[9:]))
		return true
	})
	if err != nil {
		return append(lines, "error: "+err.Error())
	}
	if len(lines) == 0 {
		lines = []string{"(no txns)"}
	}
	return lines
}

func (sh *scriptShard) meta(s *script, name string) uint64 {
	b, err := sh.st.Get([]byte(name))
	if err != nil {
		s.fatalf("shard %d: read %s: %v", sh.id, name, err)
	}
	v, err := DecodeUint64(b)
	if err != nil {
		s.fatalf("shard %d: read %s: %v", sh.id, name, err)
	}
	return v
}

func (sh *scriptShard) changeSet(s *script, rev uint64) *storev1.ChangeSet {
	b, err := sh.st.Get(LogKey(rev))
	if err != nil {
		s.fatalf("shard %d: read log %d: %v", sh.id, rev, err)
	}
	if b == nil {
		return nil
	}
	cs := &storev1.ChangeSet{}
	if err := proto.Unmarshal(b, cs); err != nil {
		s.fatalf("shard %d: decode log %d: %v", sh.id, rev, err)
	}
	return cs
}

// snapshot is the shard's stored state but for the clock and the expiry
// scan's bookkeeping, which every proposal may move.
func (sh *scriptShard) snapshot(s *script) map[string]string {
	m := map[string]string{}
	err := sh.st.Scan(nil, nil, func(k, v []byte) bool {
		switch string(k) {
		case metaClock, metaExpiryLow, metaExpiryNext:
		default:
			m[string(k)] = string(v)
		}
		return true
	})
	if err != nil {
		s.fatalf("shard %d: %v", sh.id, err)
	}
	return m
}

// stateDiff describes how after differs from before, allowing only that
// remembered outcomes whose window ended were forgotten (the expiry scan
// runs whatever the proposal).
func stateDiff(before, after map[string]string) string {
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(before)) {
		forgettable := k[0] == prefixTxn || k[0] == prefixExpiry
		if v, ok := after[k]; !ok && !forgettable {
			diffs = append(diffs, fmt.Sprintf("%q deleted", k))
		} else if ok && v != before[k] {
			diffs = append(diffs, fmt.Sprintf("%q rewritten", k))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(after)) {
		if _, ok := before[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%q written", k))
		}
	}
	return strings.Join(diffs, ", ")
}

// checkInvariants runs after every directive: the clock never goes back,
// no user key is newer than the revision, every stored key belongs to a
// known family, and the records of prepared transactions agree with each
// other (prepared count, deadline index, intents).
func (sh *scriptShard) checkInvariants(s *script) {
	s.t.Helper()
	if c := sh.meta(s, metaClock); c < sh.clock {
		s.errorf("shard %d: clock went back from %d to %d", sh.id, sh.clock, c)
	} else {
		sh.clock = c
	}
	rev := sh.meta(s, metaRevision)
	lower, upper := DataBounds("")
	_ = sh.st.Scan(lower, upper, func(k, rec []byte) bool {
		if v, _, err := DecodeRecord(rec); err != nil || v == 0 || v > rev {
			s.errorf("shard %d: key %q has version %d (err %v) at revision %d", sh.id, UserKey(k), v, err, rev)
		}
		return true
	})
	prepared := map[string]*storev1.Prepared{}
	deadlines := map[string]int64{}
	intentKeys := map[string][]string{} // txn -> keys holding its intents
	_ = sh.st.Scan(nil, nil, func(k, v []byte) bool {
		switch {
		case len(k) == 0:
			s.errorf("shard %d: empty storage key", sh.id)
		case k[0] == prefixData || k[0] == prefixTxn:
		case k[0] == prefixLog && len(k) == 9:
		case k[0] == prefixExpiry && len(k) >= 9:
		case k[0] == prefixDeadline && len(k) >= 9:
			d, _ := DecodeUint64(k[1:9])
			deadlines[string(k[9:])] = int64(d)
		case k[0] == prefixPrepared:
			rec := &storev1.Prepared{}
			if err := proto.Unmarshal(v, rec); err != nil {
				s.errorf("shard %d: prepared record %q: %v", sh.id, k, err)
			}
			prepared[string(k[1:])] = rec
		case k[0] == prefixIntent:
			set := &storev1.IntentSet{}
			if err := proto.Unmarshal(v, set); err != nil || len(set.GetIntents()) == 0 {
				s.errorf("shard %d: intent set %q: %v %v", sh.id, k, set, err)
			}
			for _, in := range set.GetIntents() {
				if ks := intentKeys[in.GetTxnId()]; len(ks) == 0 || ks[len(ks)-1] != string(k[1:]) {
					intentKeys[in.GetTxnId()] = append(ks, string(k[1:]))
				}
			}
		case slices.Contains([]string{metaRevision, metaLogStart, metaClock, metaExpiryLow, metaExpiryNext, metaPrepared, metaFreeze}, string(k)):
		default:
			s.errorf("shard %d: unexpected storage key %q", sh.id, k)
		}
		return true
	})
	if n := sh.meta(s, metaPrepared); n != uint64(len(prepared)) {
		s.errorf("shard %d: prepared count %d, %d prepared records", sh.id, n, len(prepared))
	}
	for id, rec := range prepared {
		if d, ok := deadlines[id]; !ok || d != rec.GetDeadlineUnixNanos() {
			s.errorf("shard %d: %q is prepared with deadline %d, indexed at %d (%v)", sh.id, id, rec.GetDeadlineUnixNanos(), d, ok)
		}
		if keys := slices.Sorted(slices.Values(rec.GetKeys())); !slices.Equal(keys, intentKeys[id]) {
			s.errorf("shard %d: %q is prepared on keys %v, holds intents on %v", sh.id, id, keys, intentKeys[id])
		}
	}
	for id := range deadlines {
		if prepared[id] == nil {
			s.errorf("shard %d: deadline of %q, which is not prepared", sh.id, id)
		}
	}
	for id, keys := range intentKeys {
		if prepared[id] == nil {
			s.errorf("shard %d: intents of %q on %v, which is not prepared", sh.id, id, keys)
		}
	}
}
