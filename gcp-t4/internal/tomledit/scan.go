// Package tomledit changes single keys of a TOML document in place and
// leaves every other byte (comments, order, spacing, quoting) as it was.
//
// containerd 1.7 replaces whole plugin tables when it merges imported
// files, so the kata-remote handler has to live in GKE's own config.toml;
// re-encoding that file through a TOML library would drop its comments and
// reorder it, which operators read as "someone rewrote our config". The
// scanner here only has to find where statements, keys and values start and
// end; whether the result is valid TOML is decided by a real parser
// (Verify), never by this package alone.
//
// Why not go-toml's own parser, github.com/pelletier/go-toml/v2/unstable,
// which this module already requires and which reports byte ranges? Set
// needs the spans it edits: where a value starts and ends (to replace it
// in place, arrays included: pod_annotations is one) and where a
// statement's line starts and ends (a table's header, its last key, with
// the indentation and the trailing comment). The unstable parser (v2.4.3)
// gives ranges for keys, strings, scalars and a whole top-level key-value,
// but none for an array, only the opening brace for an inline table, none
// for a table header, comments only on request and blank lines and
// indentation not at all (TestUnstableParserLacksTheRangesWeEdit). Those
// spans would still be found by scanning bytes here, on top of an API its
// package documents as without compatibility guarantees. What is left to
// this scanner is finding boundaries; deciding validity is go-toml's
// decoder's job (Verify), and FuzzApply holds the two together.
package tomledit

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

type stmtKind int

const (
	stmtBlank      stmtKind = iota // blank line or comment only
	stmtTable                      // [a.b]
	stmtArrayTable                 // [[a.b]]
	stmtKeyValue                   // a.b = value
)

// stmt is one logical line (a value may span several physical lines).
type stmt struct {
	kind       stmtKind
	start, end int      // [start, end) in the source, end after the newline
	key        []string // header path, or the key's own (dotted) path
	table      []string // table the statement belongs to (key-values)
	indent     string
	valStart   int // key-values: value span in the source
	valEnd     int
}

// scanner walks a TOML document. It accepts every valid TOML 1.0 document
// and may accept some invalid ones; callers validate with a real parser.
type scanner struct {
	src []byte
	pos int
}

type scanError struct {
	pos int
	msg string
	src []byte
}

func (e *scanError) Error() string {
	line := 1 + strings.Count(string(e.src[:min(e.pos, len(e.src))]), "\n")
	return fmt.Sprintf("line %d: %s", line, e.msg)
}

func (s *scanner) fail(msg string) error { return &scanError{pos: s.pos, msg: msg, src: s.src} }

func (s *scanner) eof() bool { return s.pos >= len(s.src) }

func (s *scanner) peek() byte {
	if s.eof() {
		return 0
	}
	return s.src[s.pos]
}

func (s *scanner) hasPrefix(p string) bool { return strings.HasPrefix(string(s.src[s.pos:]), p) }

func (s *scanner) skipSpace() {
	for !s.eof() && (s.src[s.pos] == ' ' || s.src[s.pos] == '\t') {
		s.pos++
	}
}

// atNewline reports whether a newline (LF or CRLF) starts at pos.
func (s *scanner) atNewline() bool {
	return s.peek() == '\n' || s.hasPrefix("\r\n")
}

func (s *scanner) skipNewline() {
	if s.peek() == '\n' {
		s.pos++
	} else if s.hasPrefix("\r\n") {
		s.pos += 2
	}
}

func (s *scanner) skipComment() {
	if s.peek() != '#' {
		return
	}
	for !s.eof() && !s.atNewline() {
		s.pos++
	}
}

// endOfLine consumes trailing space, an optional comment and the newline;
// anything else there is an error.
func (s *scanner) endOfLine() error {
	s.skipSpace()
	s.skipComment()
	if s.eof() {
		return nil
	}
	if !s.atNewline() {
		return s.fail(fmt.Sprintf("unexpected %q after statement", s.peek()))
	}
	s.skipNewline()
	return nil
}

// skipBlankAndComments skips whitespace, newlines and comments (inside
// arrays, where all three may appear between values).
func (s *scanner) skipBlankAndComments() {
	for !s.eof() {
		switch {
		case s.peek() == ' ' || s.peek() == '\t':
			s.pos++
		case s.atNewline():
			s.skipNewline()
		case s.peek() == '#':
			s.skipComment()
		default:
			return
		}
	}
}

func isBare(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// key parses a (possibly dotted) key and returns its decoded parts.
func (s *scanner) key() ([]string, error) {
	var parts []string
	for {
		s.skipSpace()
		var part string
		switch c := s.peek(); {
		case c == '"':
			if s.hasPrefix(`"""`) {
				return nil, s.fail("multi-line string used as a key")
			}
			start := s.pos
			if err := s.basicString(); err != nil {
				return nil, err
			}
			v, err := strconv.Unquote(toGoQuoted(string(s.src[start:s.pos])))
			if err != nil {
				return nil, s.fail("bad escape in quoted key")
			}
			part = v
		case c == '\'':
			if s.hasPrefix("'''") {
				return nil, s.fail("multi-line string used as a key")
			}
			start := s.pos + 1
			if err := s.literalString(); err != nil {
				return nil, err
			}
			part = string(s.src[start : s.pos-1])
		case isBare(c):
			start := s.pos
			for !s.eof() && isBare(s.src[s.pos]) {
				s.pos++
			}
			part = string(s.src[start:s.pos])
		default:
			return nil, s.fail("expected a key")
		}
		parts = append(parts, part)
		s.skipSpace()
		if s.peek() != '.' {
			return parts, nil
		}
		s.pos++
	}
}

// toGoQuoted turns a TOML basic string (with its quotes) into something
// strconv.Unquote decodes the same way: TOML's \UXXXXXXXX and \uXXXX match
// Go; \e is TOML 1.1 and is mapped to \x1b.
func toGoQuoted(q string) string {
	return strings.ReplaceAll(q, `\e`, `\x1b`)
}

func (s *scanner) basicString() error {
	s.pos++ // opening quote
	for !s.eof() {
		switch c := s.src[s.pos]; c {
		case '\\':
			s.pos += 2
		case '"':
			s.pos++
			return nil
		case '\n', '\r':
			return s.fail("newline in a basic string")
		default:
			s.pos++
		}
	}
	return s.fail("unterminated basic string")
}

func (s *scanner) literalString() error {
	s.pos++
	for !s.eof() {
		switch s.src[s.pos] {
		case '\'':
			s.pos++
			return nil
		case '\n', '\r':
			return s.fail("newline in a literal string")
		default:
			s.pos++
		}
	}
	return s.fail("unterminated literal string")
}

// multiline consumes a """ or ”' string; up to two extra quotes right
// before the closing delimiter belong to the content.
func (s *scanner) multiline(delim string, escapes bool) error {
	s.pos += 3
	for !s.eof() {
		if escapes && s.src[s.pos] == '\\' {
			s.pos += 2
			continue
		}
		if s.hasPrefix(delim) {
			s.pos += 3
			for i := 0; i < 2 && s.peek() == delim[0]; i++ {
				s.pos++
			}
			return nil
		}
		s.pos++
	}
	return s.fail("unterminated multi-line string")
}

// value consumes one value of any type.
func (s *scanner) value() error {
	switch c := s.peek(); {
	case s.hasPrefix(`"""`):
		return s.multiline(`"""`, true)
	case s.hasPrefix("'''"):
		return s.multiline("'''", false)
	case c == '"':
		return s.basicString()
	case c == '\'':
		return s.literalString()
	case c == '[':
		s.pos++
		for {
			s.skipBlankAndComments()
			if s.peek() == ']' {
				s.pos++
				return nil
			}
			if s.eof() {
				return s.fail("unterminated array")
			}
			if err := s.value(); err != nil {
				return err
			}
			s.skipBlankAndComments()
			switch s.peek() {
			case ',':
				s.pos++
			case ']':
				s.pos++
				return nil
			default:
				return s.fail("expected , or ] in array")
			}
		}
	case c == '{':
		s.pos++
		for {
			s.skipBlankAndComments()
			if s.peek() == '}' {
				s.pos++
				return nil
			}
			if _, err := s.key(); err != nil {
				return err
			}
			s.skipSpace()
			if s.peek() != '=' {
				return s.fail("expected = in inline table")
			}
			s.pos++
			s.skipSpace()
			if err := s.value(); err != nil {
				return err
			}
			s.skipBlankAndComments()
			switch s.peek() {
			case ',':
				s.pos++
			case '}':
				s.pos++
				return nil
			default:
				return s.fail("expected , or } in inline table")
			}
		}
	default:
		return s.scalar()
	}
}

// scalar consumes a number, boolean or date-time. A space may separate the
// date from the time of a date-time.
func (s *scanner) scalar() error {
	start := s.pos
	for !s.eof() {
		c := s.src[s.pos]
		if c == ' ' && s.pos-start == 10 && s.pos+1 < len(s.src) && isDigit(s.src[s.pos+1]) && isDate(s.src[start:s.pos]) {
			s.pos++
			continue
		}
		if c == ' ' || c == '\t' || c == ',' || c == ']' || c == '}' || c == '#' || c == '\n' || c == '\r' {
			break
		}
		if c < 0x20 || c >= utf8.RuneSelf {
			return s.fail("unexpected character in value")
		}
		s.pos++
	}
	if s.pos == start {
		return s.fail("expected a value")
	}
	return nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isDate(b []byte) bool {
	return len(b) == 10 && b[4] == '-' && b[7] == '-' && isDigit(b[0]) && isDigit(b[9])
}

// scan splits src into statements.
func scan(src []byte) ([]stmt, error) {
	s := &scanner{src: src}
	var out []stmt
	var table []string
	for !s.eof() {
		st := stmt{start: s.pos}
		s.skipSpace()
		st.indent = string(src[st.start:s.pos])
		switch {
		case s.eof() || s.atNewline() || s.peek() == '#':
			st.kind = stmtBlank
			if err := s.endOfLine(); err != nil {
				return nil, err
			}
		case s.peek() == '[':
			st.kind = stmtTable
			s.pos++
			if s.peek() == '[' {
				st.kind = stmtArrayTable
				s.pos++
			}
			k, err := s.key()
			if err != nil {
				return nil, err
			}
			s.skipSpace()
			closing := "]"
			if st.kind == stmtArrayTable {
				closing = "]]"
			}
			if !s.hasPrefix(closing) {
				return nil, s.fail("expected " + closing + " after table name")
			}
			s.pos += len(closing)
			st.key = k
			table = k
			if err := s.endOfLine(); err != nil {
				return nil, err
			}
		default:
			st.kind = stmtKeyValue
			k, err := s.key()
			if err != nil {
				return nil, err
			}
			s.skipSpace()
			if s.peek() != '=' {
				return nil, s.fail("expected = after key")
			}
			s.pos++
			s.skipSpace()
			st.valStart = s.pos
			if err := s.value(); err != nil {
				return nil, err
			}
			st.valEnd = s.pos
			st.key = k
			st.table = table
			if err := s.endOfLine(); err != nil {
				return nil, err
			}
		}
		st.end = s.pos
		out = append(out, st)
	}
	return out, nil
}
