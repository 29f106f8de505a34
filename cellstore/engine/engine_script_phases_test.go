package engine

// Directives of the script tests for cross-shard transactions (prepare,
// fence, settle, resolve, overdue, intents) and freezes (freeze, thaw);
// see engine_script_test.go for the script format.

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

func (s *script) cmdPrepare(a *scriptArgs) []string {
	sh := a.shard()
	id := a.required("txn")
	x := s.txn(id)
	if ps, ok := a.uint32s("participants"); ok {
		x.participants = ps
	} else if x.participants == nil {
		s.fatalf("the first prepare of %s needs participants=", id)
	}
	if _, ok := s.td.Arg("deadline"); !ok {
		s.fatalf("prepare needs deadline=")
	}
	p := &storev1.Proposal{
		TxnId:             id,
		Phase:             storev1.Phase_PHASE_PREPARE,
		Atomic:            a.flag("atomic") || x.atomic,
		Admit:             a.flag("admit"),
		NowUnixNanos:      a.int64("now", 0),
		DedupeWindowNanos: a.int64("window", 0),
		LogRetention:      a.uint64("retention", 0),
		Participants:      x.participants,
		DeadlineUnixNanos: a.int64("deadline", 0),
	}
	x.atomic = p.Atomic
	p.Groups, p.GroupIndexes, _ = a.groups()
	p.RequestHash = a.uint64("hash", x.hash)
	res, err := s.propose(sh, p)
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	if res.Outcome.GetTxnState() != storev1.TxnState_TXN_STATE_UNKNOWN && p.RequestHash == x.hash {
		x.states[sh.id] = res.Outcome
	}
	lines := formatResult(res, true)
	if !res.Outcome.GetDuplicate() && !res.Outcome.GetFrozen() {
		lines = append(lines, sh.intents(s, id, "intents:", "  ")...)
	}
	return lines
}

func (s *script) cmdFence(a *scriptArgs) []string {
	sh := a.shard()
	id := a.required("txn")
	x := s.txn(id)
	p := &storev1.Proposal{
		TxnId:             id,
		Phase:             storev1.Phase_PHASE_FENCE,
		NowUnixNanos:      a.int64("now", 0),
		DedupeWindowNanos: a.int64("window", 0),
		RequestHash:       a.uint64("hash", x.hash),
	}
	res, err := s.propose(sh, p)
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	if p.RequestHash == x.hash { // not another request's driver
		x.states[sh.id] = res.Outcome
	}
	return formatResult(res, false)
}

// cmdSettle decides a transaction from what its participants said, as
// the driver (or a leader recovering it) does.
func (s *script) cmdSettle(a *scriptArgs) []string {
	id := a.required("txn")
	x, ok := s.txns[id]
	if !ok {
		s.fatalf("settle: no prepare or fence of %s yet", id)
	}
	participants, ok := a.uint32s("participants")
	if !ok {
		participants = x.participants
	}
	if len(participants) == 0 {
		s.fatalf("settle: %s has no participants; pass participants=", id)
	}
	var lines []string
	states := make([]*storev1.Outcome, len(participants))
	for i, sh := range participants {
		states[i] = x.states[sh]
		what := "knows nothing"
		if st := states[i].GetTxnState(); st != storev1.TxnState_TXN_STATE_UNKNOWN {
			what = txnState(st)
		}
		lines = append(lines, fmt.Sprintf("shard %d: %s", sh, what))
	}
	x.decided = Settle(states, x.atomic)
	if x.decided == nil {
		return append(lines, "undecided")
	}
	return append(append(lines, "decided:"), formatGroups(x.decided)...)
}

func (s *script) cmdResolve(a *scriptArgs) []string {
	sh := a.shard()
	id := a.required("txn")
	x := s.txn(id)
	p := &storev1.Proposal{
		TxnId:             id,
		Phase:             storev1.Phase_PHASE_RESOLVE,
		NowUnixNanos:      a.int64("now", 0),
		DedupeWindowNanos: a.int64("window", 0),
		LogRetention:      a.uint64("retention", 0),
	}
	if commit, ok := a.uint32s("commit"); ok {
		p.Decision, p.Outcome = &storev1.Decision{CommittedGroups: commit}, &storev1.Outcome{}
	} else if a.flag("abort") {
		p.Decision, p.Outcome = &storev1.Decision{}, &storev1.Outcome{}
	} else if x.decided != nil {
		// What the server proposes: the committed groups of the decision,
		// and the decision as the request's outcome.
		p.Decision, p.Outcome = &storev1.Decision{}, x.decided
		for j, g := range x.decided.GetGroups() {
			if g.GetCommitted() {
				p.Decision.CommittedGroups = append(p.Decision.CommittedGroups, x.decided.GetGroupIndexes()[j])
			}
		}
	} else {
		s.fatalf("resolve %s: no decision; settle first, or pass commit=(...) or abort", id)
	}
	rec, err := lookupPrepared(sh.st, id)
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	res, err := s.propose(sh, p)
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	lines := []string{fmt.Sprintf("revision=%d", res.Outcome.GetRevision())}
	switch {
	case rec == nil:
		lines = append(lines, "not prepared here: nothing to do")
	case len(rec.GetKeys()) == 0:
		lines = append(lines, "released no intents")
	default:
		lines = append(lines, "released intents on "+strings.Join(rec.GetKeys(), " "))
	}
	if res.Changes != nil {
		lines = append(lines, fmt.Sprintf("changes at %d:", res.Outcome.GetRevision()))
		lines = append(lines, formatEvents(res.Changes)...)
	}
	return lines
}

func (s *script) cmdOverdue(a *scriptArgs) []string {
	sh := a.shard()
	now := a.int64("now", 0)
	ids, recs, err := Overdue(sh.st, now, int(a.int64("limit", 64)))
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	var lines []string
	for i, id := range ids {
		lines = append(lines, formatPrepared(id, recs[i]))
	}
	if len(lines) == 0 {
		lines = []string{"(none)"}
	}
	return lines
}

func formatPrepared(id string, rec *storev1.Prepared) string {
	var ps []string
	for _, p := range rec.GetParticipants() {
		ps = append(ps, strconv.FormatUint(uint64(p), 10))
	}
	l := fmt.Sprintf("%s: deadline=%d participants=(%s) keys=(%s)", id, rec.GetDeadlineUnixNanos(), strings.Join(ps, ","), strings.Join(rec.GetKeys(), ","))
	if rec.GetAtomic() {
		l += " atomic"
	}
	return l
}

func (s *script) cmdIntents(a *scriptArgs) []string {
	sh := a.shard()
	lines := sh.intents(s, "", "", "")
	err := sh.st.Scan([]byte{prefixPrepared}, []byte{prefixPrepared + 1}, func(k, _ []byte) bool {
		rec, err := lookupPrepared(sh.st, string(k[1:]))
		if err != nil {
			s.fatalf("shard %d: %v", sh.id, err)
		}
		lines = append(lines, "prepared "+formatPrepared(string(k[1:]), rec))
		return true
	})
	if err != nil {
		return append(lines, "error: "+err.Error())
	}
	if len(lines) == 0 {
		lines = []string{"(no intents)"}
	}
	return lines
}

// intents lists the intents on the shard's keys, one key a line: of
// transaction txn only (without its name), or of all (txn empty). With
// head, the list is headed so, and says none when there are none.
func (sh *scriptShard) intents(s *script, txn, head, indent string) []string {
	var lines []string
	err := sh.st.Scan([]byte{prefixIntent}, []byte{prefixIntent + 1}, func(k, _ []byte) bool {
		set, err := intents(sh.st, string(k[1:]))
		if err != nil {
			s.fatalf("shard %d: %v", sh.id, err)
		}
		var ins []string
		for _, in := range set.GetIntents() {
			switch {
			case txn == "":
				ins = append(ins, in.GetTxnId()+" "+formatIntent(in))
			case in.GetTxnId() == txn:
				ins = append(ins, formatIntent(in))
			}
		}
		if len(ins) > 0 {
			lines = append(lines, fmt.Sprintf("%s%s: %s", indent, k[1:], strings.Join(ins, "; ")))
		}
		return true
	})
	if err != nil {
		s.fatalf("shard %d: %v", sh.id, err)
	}
	if head == "" {
		return lines
	}
	if len(lines) == 0 {
		return []string{head + " none"}
	}
	return append([]string{head}, lines...)
}

// formatIntent writes an intent as its group and access: read, put
// "value", del, or add DELTA [MIN,MAX].
func formatIntent(in *storev1.Intent) string {
	g := fmt.Sprintf("g%d ", in.GetGroupIndex())
	switch o := in.GetOp().GetOp().(type) {
	case nil:
		return g + "read"
	case *storev1.Op_Put:
		return g + fmt.Sprintf("put %q", o.Put.GetValue())
	case *storev1.Op_Delete:
		return g + "del"
	case *storev1.Op_Add:
		return g + fmt.Sprintf("add %d [%s,%s]", o.Add.GetDelta(), formatBound(o.Add.GetMin()), formatBound(o.Add.GetMax()))
	default:
		return g + fmt.Sprintf("%T", o)
	}
}

func formatBound(n int64) string {
	switch n {
	case math.MinInt64:
		return "min"
	case math.MaxInt64:
		return "max"
	}
	return strconv.FormatInt(n, 10)
}

func (s *script) cmdFreeze(a *scriptArgs) []string {
	sh := a.shard()
	p := &storev1.Proposal{
		TxnId:                a.required("id"),
		Phase:                storev1.Phase_PHASE_FREEZE,
		NowUnixNanos:         a.int64("now", 0),
		FreezeUntilUnixNanos: a.int64("until", 0),
	}
	res, err := s.propose(sh, p)
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	out := res.Outcome
	return []string{
		fmt.Sprintf("frozen=%t revision=%d prepared=%d", out.GetFrozen(), out.GetRevision(), out.GetPrepared()),
		formatFreeze(sh.freezeStatus(s)),
	}
}

func (s *script) cmdThaw(a *scriptArgs) []string {
	sh := a.shard()
	p := &storev1.Proposal{
		TxnId:        a.required("id"),
		Phase:        storev1.Phase_PHASE_THAW,
		NowUnixNanos: a.int64("now", 0),
	}
	res, err := s.propose(sh, p)
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	out := res.Outcome
	return []string{
		fmt.Sprintf("held=%t revision=%d prepared=%d", out.GetFrozen(), out.GetRevision(), out.GetPrepared()),
		formatFreeze(sh.freezeStatus(s)),
	}
}

func (sh *scriptShard) freezeStatus(s *script) FreezeStatus {
	f, err := ReadFreezeStatus(sh.st)
	if err != nil {
		s.fatalf("shard %d: %v", sh.id, err)
	}
	return f
}

// formatFreeze says whether the shard is frozen, and by which freeze.
func formatFreeze(f FreezeStatus) string {
	switch {
	case f.Freeze == nil:
		return "not frozen"
	case f.Frozen():
		return fmt.Sprintf("frozen by %s until %d", f.Freeze.GetId(), f.Freeze.GetUntilUnixNanos())
	default:
		return fmt.Sprintf("not frozen (%s lapsed at %d)", f.Freeze.GetId(), f.Freeze.GetUntilUnixNanos())
	}
}
