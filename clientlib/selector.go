package clientlib

import (
	"fmt"
	"slices"
	"strings"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Selector selects objects by their labels, as kubectl's -l does: every
// requirement must hold. An empty Selector selects everything.
type Selector []*troupev1.LabelRequirement

// Matches reports whether labels satisfy every requirement of s.
func (s Selector) Matches(labels map[string]string) bool {
	for _, r := range s {
		v, ok := labels[r.GetKey()]
		switch r.GetOperator() {
		case troupev1.LabelOperator_LABEL_OPERATOR_IN:
			ok = ok && slices.Contains(r.GetValues(), v)
		case troupev1.LabelOperator_LABEL_OPERATOR_NOT_IN:
			ok = !ok || !slices.Contains(r.GetValues(), v)
		case troupev1.LabelOperator_LABEL_OPERATOR_DOES_NOT_EXIST:
			ok = !ok
		}
		if !ok {
			return false
		}
	}
	return true
}

// ParseSelector parses a label selector in kubectl's syntax:
//
//	a=b  a==b     label a is b
//	a!=b          label a is not b, or absent
//	a in (x,y)    label a is x or y
//	a notin (x)   label a is not x, or absent
//	a             label a is present
//	!a            label a is absent
//
// Requirements are separated by commas, and all must hold; blanks between
// tokens are ignored. Errors say where the selector went wrong.
func ParseSelector(s string) (Selector, error) {
	p := &selectorParser{src: s, toks: lexSelector(s)}
	if p.peek().kind == tokEnd {
		return nil, nil
	}
	var sel Selector
	for {
		r, err := p.requirement()
		if err != nil {
			return nil, err
		}
		sel = append(sel, r)
		switch t := p.next(); t.kind {
		case tokEnd:
			return sel, nil
		case tokComma:
		default:
			return nil, p.errorf(t, "want ',' between requirements%s", got(t))
		}
	}
}

type tokKind int

const (
	tokEnd tokKind = iota
	tokWord
	tokEq    // = or ==
	tokNotEq // !=
	tokNot   // !
	tokOpen
	tokClose
	tokComma
)

type selectorToken struct {
	kind tokKind
	text string
	pos  int // byte offset in the selector
}

// lexSelector splits a selector into tokens, ending with tokEnd.
func lexSelector(s string) []selectorToken {
	var out []selectorToken
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			i++
			continue
		case strings.HasPrefix(s[i:], "==") || strings.HasPrefix(s[i:], "!="):
			kind := tokEq
			if c == '!' {
				kind = tokNotEq
			}
			out = append(out, selectorToken{kind, s[i : i+2], i})
			i += 2
			continue
		}
		if kind, ok := map[byte]tokKind{'=': tokEq, '!': tokNot, '(': tokOpen, ')': tokClose, ',': tokComma}[c]; ok {
			out = append(out, selectorToken{kind, s[i : i+1], i})
			i++
			continue
		}
		end := i + strings.IndexAny(s[i:]+" ", " \t=!(),")
		out = append(out, selectorToken{tokWord, s[i:end], i})
		i = end
	}
	return append(out, selectorToken{kind: tokEnd, pos: len(s)})
}

type selectorParser struct {
	src  string
	toks []selectorToken
	i    int
}

func (p *selectorParser) peek() selectorToken { return p.toks[p.i] }

func (p *selectorParser) next() selectorToken {
	t := p.toks[p.i]
	if t.kind != tokEnd {
		p.i++
	}
	return t
}

func (p *selectorParser) errorf(t selectorToken, format string, args ...any) error {
	where := fmt.Sprintf("at column %d", t.pos+1)
	if t.kind == tokEnd {
		where = "at the end"
	}
	return fmt.Errorf("label selector %q: %s: %s", p.src, where, fmt.Sprintf(format, args...))
}

// got says what was found instead, unless it is the end (errorf says so).
func got(t selectorToken) string {
	if t.kind == tokEnd {
		return ""
	}
	return fmt.Sprintf(", got %q", t.text)
}

// requirement parses one requirement.
func (p *selectorParser) requirement() (*troupev1.LabelRequirement, error) {
	t := p.next()
	if t.kind == tokNot {
		k := p.next()
		if k.kind != tokWord {
			return nil, p.errorf(k, "want a label key after '!'")
		}
		return p.check(k, &troupev1.LabelRequirement{Key: k.text, Operator: troupev1.LabelOperator_LABEL_OPERATOR_DOES_NOT_EXIST})
	}
	if t.kind != tokWord {
		return nil, p.errorf(t, "want a label key%s", got(t))
	}
	r := &troupev1.LabelRequirement{Key: t.text, Operator: troupev1.LabelOperator_LABEL_OPERATOR_EXISTS}
	op := p.peek()
	switch {
	case op.kind == tokEnd || op.kind == tokComma:
	case op.kind == tokEq || op.kind == tokNotEq:
		p.next()
		r.Operator = troupev1.LabelOperator_LABEL_OPERATOR_IN
		if op.kind == tokNotEq {
			r.Operator = troupev1.LabelOperator_LABEL_OPERATOR_NOT_IN
		}
		v := ""
		if p.peek().kind == tokWord {
			v = p.next().text
		}
		r.Values = []string{v}
	case op.kind == tokWord && (op.text == "in" || op.text == "notin"):
		p.next()
		r.Operator = troupev1.LabelOperator_LABEL_OPERATOR_IN
		if op.text == "notin" {
			r.Operator = troupev1.LabelOperator_LABEL_OPERATOR_NOT_IN
		}
		values, err := p.set(op.text)
		if err != nil {
			return nil, err
		}
		r.Values = values
	default:
		return nil, p.errorf(op, "after label %q want =, ==, !=, in, notin, ',' or the end%s", t.text, got(op))
	}
	return p.check(t, r)
}

// set parses "(v1,v2,...)" after in or notin.
func (p *selectorParser) set(op string) ([]string, error) {
	if t := p.next(); t.kind != tokOpen {
		return nil, p.errorf(t, "want '(' after %s", op)
	}
	if t := p.peek(); t.kind == tokClose {
		return nil, p.errorf(t, "%s needs at least one value", op)
	}
	var values []string
	for {
		v := p.next()
		if v.kind != tokWord {
			return nil, p.errorf(v, "want a value in the set of %s%s", op, got(v))
		}
		values = append(values, v.text)
		switch t := p.next(); t.kind {
		case tokClose:
			return values, nil
		case tokComma:
		default:
			return nil, p.errorf(t, "want ',' or ')' in the set of %s%s", op, got(t))
		}
	}
}

// check applies the label syntax rules to a requirement's key and values.
func (p *selectorParser) check(key selectorToken, r *troupev1.LabelRequirement) (*troupev1.LabelRequirement, error) {
	c := &checker{}
	c.label("", r.GetKey(), "", false)
	for _, v := range r.GetValues() {
		c.label("", r.GetKey(), v, true)
	}
	if len(c.errs) > 0 {
		return nil, p.errorf(key, "%s", c.errs[0].Message)
	}
	return r, nil
}
