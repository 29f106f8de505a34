package engine

// Data-driven script tests for the transaction engine.
//
// Each file in testdata/*.txt is a script run against a fresh MemStorage.
// A script is a sequence of blocks:
//
//	# comments and blank lines between blocks are kept verbatim
//	command arg key=value ...
//	input line
//	input line
//	----
//	expected output
//	expected output
//
// The expected output ends at the first blank line. Run
//
//	go test ./cellstore/engine/ -run TestScripts -rewrite
//
// to replace every expected output with what the engine does now, then
// review the diff.
//
// Commands (one handler each, see scriptCommands):
//
//	commit [txn=ID] [atomic] [now=N] [window=N] [retention=N] [hash=N] [indexes=I,J,...]
//	    One proposal; one input line per group:
//	        group: cond /a 0; put /a x; add /c 5 0 10; del /b
//	    cond KEY VERSION | put KEY [VALUE...] | del KEY | add KEY DELTA MIN MAX
//	    A VALUE may be a Go-quoted string; MIN and MAX may be the words min
//	    and max (the int64 limits). hash defaults to a hash of the input
//	    lines, so a retry with the same text has the same request hash.
//	fill n=N prefix=P [now=N] [retention=N]
//	    N proposals, each putting P<i> (i from 1), for change-log tests.
//	get KEY           one user key
//	scan [PREFIX]     user keys under PREFIX (all with no prefix)
//	log REV           the change set stored for revision REV
//	meta              revision, log start, clock, and which revisions the
//	                  change log holds
//	txns              remembered txn outcomes and the expiry index

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	"google.golang.org/protobuf/proto"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected outputs of testdata/*.txt scripts")

// scriptBlock is one command of a script and the text around it.
type scriptBlock struct {
	pre      []string // comments and blank lines before the command
	line     int      // line number of the command, 1-based
	cmd      string   // the command line
	input    []string
	expected []string
}

type scriptFile struct {
	blocks []*scriptBlock
	trail  []string // comments and blank lines after the last block
}

func parseScript(path string, data []byte) (*scriptFile, error) {
	f := &scriptFile{}
	var pre []string
	var cur *scriptBlock
	const (
		between = iota
		inInput
		inExpected
	)
	state := between
	sc := bufio.NewScanner(bytes.NewReader(data))
	n := 0
	for sc.Scan() {
		n++
		l := sc.Text()
		switch state {
		case between:
			if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
				pre = append(pre, l)
				continue
			}
			if l == "----" {
				return nil, fmt.Errorf("%s:%d: ---- without a command", path, n)
			}
			cur = &scriptBlock{pre: pre, line: n, cmd: l}
			pre = nil
			state = inInput
		case inInput:
			if l == "----" {
				state = inExpected
				continue
			}
			cur.input = append(cur.input, l)
		case inExpected:
			if strings.TrimSpace(l) == "" {
				f.blocks = append(f.blocks, cur)
				cur = nil
				pre = append(pre, l)
				state = between
				continue
			}
			cur.expected = append(cur.expected, l)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	switch state {
	case inInput:
		return nil, fmt.Errorf("%s:%d: command %q has no ---- line", path, cur.line, cur.cmd)
	case inExpected:
		f.blocks = append(f.blocks, cur)
	}
	f.trail = pre
	return f, nil
}

func (f *scriptFile) format() []byte {
	var b strings.Builder
	for _, bl := range f.blocks {
		for _, l := range bl.pre {
			b.WriteString(l + "\n")
		}
		b.WriteString(bl.cmd + "\n")
		for _, l := range bl.input {
			b.WriteString(l + "\n")
		}
		b.WriteString("----\n")
		for _, l := range bl.expected {
			b.WriteString(l + "\n")
		}
	}
	for _, l := range f.trail {
		b.WriteString(l + "\n")
	}
	return []byte(b.String())
}

func TestScripts(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal("no scripts in testdata")
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			runScript(t, path)
		})
	}
}

func runScript(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := parseScript(path, data)
	if err != nil {
		t.Fatal(err)
	}
	s := &scriptState{t: t, st: NewMemStorage()}
	for _, bl := range f.blocks {
		s.pos = fmt.Sprintf("%s:%d", path, bl.line)
		got := s.run(bl)
		if *rewrite {
			bl.expected = got
			continue
		}
		if want := strings.Join(bl.expected, "\n"); strings.Join(got, "\n") != want {
			t.Errorf("%s: %s\ngot:\n%swant:\n%s", s.pos, bl.cmd, indent(got), indent(bl.expected))
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, f.format(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func indent(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

// scriptState is the engine under test and what the runner checks across
// commands.
type scriptState struct {
	t     *testing.T
	st    *MemStorage
	pos   string // file:line of the current command, for messages
	clock uint64 // largest clock seen, to check it never goes back
}

// scriptArgs are the key=value (or bare) arguments of a command line.
type scriptArgs map[string]string

type scriptHandler func(s *scriptState, args scriptArgs, pos []string, input []string) ([]string, error)

var scriptCommands = map[string]scriptHandler{
	"commit": (*scriptState).cmdCommit,
	"fill":   (*scriptState).cmdFill,
	"get":    (*scriptState).cmdGet,
	"scan":   (*scriptState).cmdScan,
	"log":    (*scriptState).cmdLog,
	"meta":   (*scriptState).cmdMeta,
	"txns":   (*scriptState).cmdTxns,
}

// run executes one block and returns its output lines. Errors in the script
// itself fail the test; engine errors become output.
func (s *scriptState) run(bl *scriptBlock) []string {
	fields := strings.Fields(bl.cmd)
	h, ok := scriptCommands[fields[0]]
	if !ok {
		s.t.Fatalf("%s: unknown command %q", s.pos, fields[0])
	}
	args := scriptArgs{}
	var positional []string
	for _, f := range fields[1:] {
		if k, v, ok := strings.Cut(f, "="); ok {
			args[k] = v
		} else if fields[0] == "commit" {
			args[f] = ""
		} else {
			positional = append(positional, f)
		}
	}
	out, err := h(s, args, positional, bl.input)
	if err != nil {
		out = append(out, "error: "+err.Error())
	}
	if len(out) == 0 {
		out = []string{"ok"}
	}
	s.checkInvariants()
	return out
}

func (a scriptArgs) int64(s *scriptState, k string, def int64) int64 {
	v, ok := a[k]
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		s.t.Fatalf("%s: %s=%q: %v", s.pos, k, v, err)
	}
	return n
}

func (a scriptArgs) uint64(s *scriptState, k string, def uint64) uint64 {
	v, ok := a[k]
	if !ok {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		s.t.Fatalf("%s: %s=%q: %v", s.pos, k, v, err)
	}
	return n
}

func (s *scriptState) cmdCommit(args scriptArgs, _ []string, input []string) ([]string, error) {
	p := &storev1.Proposal{
		TxnId:             args["txn"],
		NowUnixNanos:      args.int64(s, "now", 0),
		DedupeWindowNanos: args.int64(s, "window", 0),
		LogRetention:      args.uint64(s, "retention", 0),
	}
	_, p.Atomic = args["atomic"]
	for k := range args {
		switch k {
		case "txn", "atomic", "now", "window", "retention", "hash", "indexes":
		default:
			s.t.Fatalf("%s: commit: unknown argument %q", s.pos, k)
		}
	}
	for _, l := range input {
		g, err := parseGroup(l)
		if err != nil {
			s.t.Fatalf("%s: %v", s.pos, err)
		}
		p.Groups = append(p.Groups, g)
	}
	if v, ok := args["indexes"]; ok {
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.ParseUint(f, 10, 32)
			if err != nil {
				s.t.Fatalf("%s: indexes: %v", s.pos, err)
			}
			p.GroupIndexes = append(p.GroupIndexes, uint32(n))
		}
	} else {
		for i := range p.Groups {
			p.GroupIndexes = append(p.GroupIndexes, uint32(i))
		}
	}
	h := fnv.New64a()
	for _, l := range input {
		h.Write([]byte(l + "\n"))
	}
	p.RequestHash = args.uint64(s, "hash", h.Sum64())
	return s.apply(p)
}

// apply runs one proposal, checks what the runner can check about any
// result, and formats the outcome.
func (s *scriptState) apply(p *storev1.Proposal) ([]string, error) {
	revBefore := s.metaValue(metaRevision)
	res, err := Apply(s.st, p)
	if err != nil {
		return nil, err
	}
	out := res.Outcome
	revAfter := s.metaValue(metaRevision)
	switch {
	case out.GetDuplicate():
		if res.Changes != nil || revAfter != revBefore {
			s.t.Errorf("%s: duplicate outcome wrote revision %d (was %d)", s.pos, revAfter, revBefore)
		}
	case res.Changes == nil:
		if revAfter != revBefore || out.GetRevision() != revBefore {
			s.t.Errorf("%s: no changes but revision %d -> %d, outcome %d", s.pos, revBefore, revAfter, out.GetRevision())
		}
	default:
		if revAfter != revBefore+1 || out.GetRevision() != revAfter {
			s.t.Errorf("%s: changes but revision %d -> %d, outcome %d", s.pos, revBefore, revAfter, out.GetRevision())
		}
		if stored := s.changeSet(revAfter); !proto.Equal(stored, res.Changes) {
			s.t.Errorf("%s: Result.Changes %v differs from the log at %d: %v", s.pos, res.Changes, revAfter, stored)
		}
	}
	if !out.GetDuplicate() && len(out.GetGroups()) != len(p.GetGroups()) {
		s.t.Errorf("%s: %d group results for %d groups", s.pos, len(out.GetGroups()), len(p.GetGroups()))
	}

	var lines []string
	head := fmt.Sprintf("revision=%d", out.GetRevision())
	if out.GetDuplicate() {
		head = "duplicate " + head
	}
	lines = append(lines, head)
	for i, g := range out.GetGroups() {
		idx := uint32(i)
		if i < len(out.GetGroupIndexes()) {
			idx = out.GetGroupIndexes()[i]
		}
		if g.GetCommitted() {
			lines = append(lines, fmt.Sprintf("group %d: committed at %d", idx, g.GetRevision()))
			continue
		}
		f := g.GetFailure()
		reason := strings.TrimPrefix(f.GetReason().String(), "FAILURE_REASON_")
		l := fmt.Sprintf("group %d: %s", idx, reason)
		if f.GetKey() != "" || f.GetCurrentVersion() != 0 {
			l += fmt.Sprintf(" key=%s current=%d", f.GetKey(), f.GetCurrentVersion())
		}
		lines = append(lines, l+": "+f.GetMessage())
	}
	if res.Changes != nil {
		lines = append(lines, fmt.Sprintf("changes at %d:", out.GetRevision()))
		lines = append(lines, formatEvents(res.Changes)...)
	}
	return lines, nil
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

func (s *scriptState) cmdFill(args scriptArgs, _ []string, _ []string) ([]string, error) {
	n := args.int64(s, "n", 1)
	prefix, ok := args["prefix"]
	if !ok {
		s.t.Fatalf("%s: fill needs prefix=", s.pos)
	}
	first, last := uint64(0), uint64(0)
	for i := int64(1); i <= n; i++ {
		key := fmt.Sprintf("%s%d", prefix, i)
		res, err := Apply(s.st, &storev1.Proposal{
			Groups:       []*storev1.Group{{Ops: []*storev1.Op{{Op: &storev1.Op_Put{Put: &storev1.Put{Key: key, Value: []byte("v")}}}}}},
			NowUnixNanos: args.int64(s, "now", 0),
			LogRetention: args.uint64(s, "retention", 0),
		})
		if err != nil {
			return nil, err
		}
		if !res.Outcome.GetGroups()[0].GetCommitted() {
			s.t.Fatalf("%s: fill: put %s failed: %v", s.pos, key, res.Outcome)
		}
		if first == 0 {
			first = res.Outcome.GetRevision()
		}
		last = res.Outcome.GetRevision()
	}
	return []string{fmt.Sprintf("wrote revisions %d..%d", first, last)}, nil
}

func (s *scriptState) cmdGet(_ scriptArgs, pos []string, _ []string) ([]string, error) {
	if len(pos) != 1 {
		s.t.Fatalf("%s: get KEY", s.pos)
	}
	rec, err := s.st.Get(DataKey(pos[0]))
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return []string{pos[0] + ": absent"}, nil
	}
	v, value, err := DecodeRecord(rec)
	if err != nil {
		return nil, err
	}
	return []string{fmt.Sprintf("%s = %q (v%d)", pos[0], value, v)}, nil
}

func (s *scriptState) cmdScan(_ scriptArgs, pos []string, _ []string) ([]string, error) {
	prefix := ""
	if len(pos) == 1 {
		prefix = pos[0]
	} else if len(pos) > 1 {
		s.t.Fatalf("%s: scan [PREFIX]", s.pos)
	}
	var lines []string
	var derr error
	lower, upper := DataBounds(prefix)
	err := s.st.Scan(lower, upper, func(k, rec []byte) bool {
		v, value, err := DecodeRecord(rec)
		if err != nil {
			derr = err
			return false
		}
		lines = append(lines, fmt.Sprintf("%s = %q (v%d)", UserKey(k), value, v))
		return true
	})
	if err == nil {
		err = derr
	}
	if len(lines) == 0 {
		lines = []string{"(no keys)"}
	}
	return lines, err
}

func (s *scriptState) cmdLog(_ scriptArgs, pos []string, _ []string) ([]string, error) {
	if len(pos) != 1 {
		s.t.Fatalf("%s: log REV", s.pos)
	}
	rev, err := strconv.ParseUint(pos[0], 10, 64)
	if err != nil {
		s.t.Fatalf("%s: log: %v", s.pos, err)
	}
	cs := s.changeSet(rev)
	if cs == nil {
		return []string{fmt.Sprintf("no change set at %d", rev)}, nil
	}
	return append([]string{fmt.Sprintf("changes at %d:", rev)}, formatEvents(cs)...), nil
}

func (s *scriptState) cmdMeta(_ scriptArgs, _ []string, _ []string) ([]string, error) {
	var revs []uint64
	err := s.st.Scan([]byte{prefixLog}, []byte{prefixLog + 1}, func(k, _ []byte) bool {
		revs = append(revs, decodeLogKey(s, k))
		return true
	})
	return []string{
		fmt.Sprintf("revision=%d log-start=%d clock=%d", s.metaValue(metaRevision), s.metaValue(metaLogStart), s.metaValue(metaClock)),
		"log holds " + formatRanges(revs),
	}, err
}

func decodeLogKey(s *scriptState, k []byte) uint64 {
	v, err := DecodeUint64(k[1:])
	if err != nil {
		s.t.Fatalf("%s: log key %q: %v", s.pos, k, err)
	}
	return v
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

func (s *scriptState) cmdTxns(_ scriptArgs, _ []string, _ []string) ([]string, error) {
	var lines []string
	var derr error
	err := s.st.Scan([]byte{prefixTxn}, []byte{prefixTxn + 1}, func(k, v []byte) bool {
		rec := &storev1.TxnRecord{}
		if err := proto.Unmarshal(v, rec); err != nil {
			derr = err
			return false
		}
		committed := 0
		for _, g := range rec.GetOutcome().GetGroups() {
			if g.GetCommitted() {
				committed++
			}
		}
		lines = append(lines, fmt.Sprintf("txn %s: expires=%d hash=%d revision=%d committed=%d/%d",
			k[1:], rec.GetExpiresUnixNanos(), rec.GetRequestHash(), rec.GetOutcome().GetRevision(),
			committed, len(rec.GetOutcome().GetGroups())))
		return true
	})
	if err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	err = s.st.Scan([]byte{prefixExpiry}, []byte{prefixExpiry + 1}, func(k, _ []byte) bool {
		exp, _ := DecodeUint64(k[1:9])
		lines = append(lines, fmt.Sprintf("expiry %d: %s", int64(exp), k[9:]))
		return true
	})
	if len(lines) == 0 {
		lines = []string{"(no txns)"}
	}
	return lines, err
}

func (s *scriptState) metaValue(name string) uint64 {
	b, err := s.st.Get([]byte(name))
	if err != nil {
		s.t.Fatalf("%s: read %s: %v", s.pos, name, err)
	}
	v, err := DecodeUint64(b)
	if err != nil {
		s.t.Fatalf("%s: read %s: %v", s.pos, name, err)
	}
	return v
}

func (s *scriptState) changeSet(rev uint64) *storev1.ChangeSet {
	b, err := s.st.Get(LogKey(rev))
	if err != nil {
		s.t.Fatalf("%s: read log %d: %v", s.pos, rev, err)
	}
	if b == nil {
		return nil
	}
	cs := &storev1.ChangeSet{}
	if err := proto.Unmarshal(b, cs); err != nil {
		s.t.Fatalf("%s: decode log %d: %v", s.pos, rev, err)
	}
	return cs
}

// checkInvariants runs after every command: the clock never goes back, no
// user key is newer than the revision, and every stored key belongs to a
// known family.
func (s *scriptState) checkInvariants() {
	if c := s.metaValue(metaClock); c < s.clock {
		s.t.Errorf("%s: clock went back from %d to %d", s.pos, s.clock, c)
	} else {
		s.clock = c
	}
	rev := s.metaValue(metaRevision)
	lower, upper := DataBounds("")
	_ = s.st.Scan(lower, upper, func(k, rec []byte) bool {
		if v, _, err := DecodeRecord(rec); err != nil || v == 0 || v > rev {
			s.t.Errorf("%s: key %q has version %d (err %v) at revision %d", s.pos, UserKey(k), v, err, rev)
		}
		return true
	})
	_ = s.st.Scan(nil, nil, func(k, _ []byte) bool {
		switch {
		case len(k) == 0:
			s.t.Errorf("%s: empty storage key", s.pos)
		case k[0] == prefixData || k[0] == prefixTxn:
		case k[0] == prefixLog && len(k) == 9:
		case k[0] == prefixExpiry && len(k) >= 9:
		case string(k) == metaRevision || string(k) == metaLogStart || string(k) == metaClock || string(k) == metaExpiryLow || string(k) == metaExpiryNext:
		default:
			s.t.Errorf("%s: unexpected storage key %q", s.pos, k)
		}
		return true
	})
}
