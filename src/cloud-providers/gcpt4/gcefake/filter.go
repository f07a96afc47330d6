// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// fieldGetter returns a resource's value for a filter field, and whether the
// field exists for that resource type at all; labels.KEY yields present=false
// through the value lookup, not through known.
type fieldGetter func(field string) (value string, present, known bool)

// filterExpr is a parsed list filter. The fake understands the subset of
// GCE's filter language that callers use: comparisons `field = "v"`,
// `field != v`, `field:*` (presence) and `field:v`, joined by AND, OR or
// juxtaposition, with parentheses. Anything else is rejected with 400 rather
// than silently ignored, because ignoring a filter would return too much.
type filterExpr interface {
	eval(get fieldGetter) (bool, error)
}

type cmpExpr struct {
	field, op, value string
}

type boolExpr struct {
	and  bool
	subs []filterExpr
}

func (c *cmpExpr) eval(get fieldGetter) (bool, error) {
	v, present, known := get(c.field)
	if !known {
		return false, fmt.Errorf("unsupported filter field %q", c.field)
	}
	switch c.op {
	case "=":
		return present && v == c.value, nil
	case "!=":
		return !present || v != c.value, nil
	case ":":
		if c.value == "*" {
			return present, nil
		}
		return present && v == c.value, nil
	}
	return false, fmt.Errorf("unsupported operator %q", c.op)
}

func (b *boolExpr) eval(get fieldGetter) (bool, error) {
	for _, s := range b.subs {
		ok, err := s.eval(get)
		if err != nil {
			return false, err
		}
		if b.and && !ok {
			return false, nil
		}
		if !b.and && ok {
			return true, nil
		}
	}
	return b.and, nil
}

type filterParser struct {
	toks []string
	pos  int
}

// parseFilter parses a filter; an empty filter matches everything and yields
// nil.
func parseFilter(s string) (filterExpr, error) {
	toks, err := tokenizeFilter(s)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return nil, nil
	}
	p := &filterParser{toks: toks}
	e, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	if p.pos != len(p.toks) {
		return nil, fmt.Errorf("unexpected %q", p.toks[p.pos])
	}
	return e, nil
}

func (p *filterParser) peek() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return ""
}

func (p *filterParser) parseOr() (filterExpr, error) {
	first, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	subs := []filterExpr{first}
	for p.peek() == "OR" {
		p.pos++
		e, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		subs = append(subs, e)
	}
	if len(subs) == 1 {
		return first, nil
	}
	return &boolExpr{and: false, subs: subs}, nil
}

func (p *filterParser) parseAnd() (filterExpr, error) {
	first, err := p.parseTerm()
	if err != nil {
		return nil, err
	}
	subs := []filterExpr{first}
	for {
		t := p.peek()
		if t == "" || t == ")" || t == "OR" {
			break
		}
		if t == "AND" {
			p.pos++
		}
		e, err := p.parseTerm()
		if err != nil {
			return nil, err
		}
		subs = append(subs, e)
	}
	if len(subs) == 1 {
		return first, nil
	}
	return &boolExpr{and: true, subs: subs}, nil
}

func (p *filterParser) parseTerm() (filterExpr, error) {
	t := p.peek()
	switch t {
	case "":
		return nil, fmt.Errorf("unexpected end of filter")
	case "(":
		p.pos++
		e, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		if p.peek() != ")" {
			return nil, fmt.Errorf("missing ')'")
		}
		p.pos++
		return e, nil
	case ")", "AND", "OR", "=", "!=", ":":
		return nil, fmt.Errorf("unexpected %q", t)
	}
	if !isIdent(t) {
		return nil, fmt.Errorf("expected a field name, got %q", t)
	}
	p.pos++
	op := p.peek()
	if op != "=" && op != "!=" && op != ":" {
		return nil, fmt.Errorf("expected an operator after %q", t)
	}
	p.pos++
	v := p.peek()
	if v == "" || v == "(" || v == ")" || v == "AND" || v == "OR" {
		return nil, fmt.Errorf("expected a value after %q %s", t, op)
	}
	p.pos++
	if uq, err := strconv.Unquote(v); err == nil && strings.HasPrefix(v, `"`) {
		v = uq
	} else if strings.HasPrefix(v, `"`) {
		return nil, fmt.Errorf("bad quoted value %s", v)
	}
	return &cmpExpr{field: t, op: op, value: v}, nil
}

func isIdent(t string) bool {
	for i, r := range t {
		if !unicode.IsLetter(r) && r != '_' && r != '.' && r != '-' && (i == 0 || !unicode.IsDigit(r)) {
			return false
		}
	}
	return t != ""
}

func tokenizeFilter(s string) ([]string, error) {
	var toks []string
	for i := 0; i < len(s); {
		c := s[i]
		switch c {
		case ' ', '\t', '\n':
			i++
		case '(', ')', '=', ':':
			toks = append(toks, string(c))
			i++
		case '!':
			if i+1 < len(s) && s[i+1] == '=' {
				toks = append(toks, "!=")
				i += 2
				continue
			}
			return nil, fmt.Errorf("unexpected '!' at %d", i)
		case '"':
			j := i + 1
			for j < len(s) && s[j] != '"' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			toks = append(toks, s[i:j+1])
			i = j + 1
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t\n()=:!\"", rune(s[j])) {
				j++
			}
			toks = append(toks, s[i:j])
			i = j
		}
	}
	return toks, nil
}

// labelGetter handles "labels.KEY" for resources that carry labels.
func labelGetter(labels map[string]string, field string) (string, bool, bool) {
	key, ok := strings.CutPrefix(field, "labels.")
	if !ok || key == "" {
		return "", false, false
	}
	v, present := labels[key]
	return v, present, true
}
