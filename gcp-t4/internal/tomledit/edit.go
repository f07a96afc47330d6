package tomledit

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ErrUnsupported is returned when a change cannot be made without
// restructuring the document (the table is defined by dotted keys or an
// inline table, or lives in an array of tables).
var ErrUnsupported = errors.New("change needs restructuring the document")

// Document is a TOML document edited in place.
type Document struct {
	src   []byte
	stmts []stmt
	nl    string
}

// Parse scans src. It does not prove src is valid TOML: check with Verify
// (or a real parser) before and after editing.
func Parse(src []byte) (*Document, error) {
	d := &Document{src: slices.Clone(src)}
	if err := d.rescan(); err != nil {
		return nil, err
	}
	d.nl = "\n"
	if i := strings.IndexByte(string(src), '\n'); i > 0 && src[i-1] == '\r' {
		d.nl = "\r\n"
	}
	return d, nil
}

func (d *Document) rescan() error {
	st, err := scan(d.src)
	if err != nil {
		return fmt.Errorf("scan TOML: %w", err)
	}
	d.stmts = st
	return nil
}

// Bytes returns the current document.
func (d *Document) Bytes() []byte { return slices.Clone(d.src) }

// arrayTableAt reports whether the table a key-value at index i belongs to
// is an array of tables, whose keys cannot be addressed by path.
func (d *Document) arrayTableAt(i int) bool {
	for j := i - 1; j >= 0; j-- {
		switch d.stmts[j].kind {
		case stmtArrayTable:
			return true
		case stmtTable:
			return false
		}
	}
	return false
}

func fullPath(st stmt) []string { return append(slices.Clone(st.table), st.key...) }

// Raw returns the source text of the value at table+key, if a key-value
// statement defines exactly that path.
func (d *Document) Raw(table []string, key string) (string, bool) {
	want := append(slices.Clone(table), key)
	for i, st := range d.stmts {
		if st.kind == stmtKeyValue && slices.Equal(fullPath(st), want) && !d.arrayTableAt(i) {
			return string(d.src[st.valStart:st.valEnd]), true
		}
	}
	return "", false
}

// Set makes table.key = value, where value is TOML source text (use the
// value helpers). An existing value is replaced in place, keeping its line's
// comment; a missing key goes after the table's last key; a missing table is
// appended at the end of the document.
func (d *Document) Set(table []string, key, value string) error {
	want := append(slices.Clone(table), key)
	// Replace an existing value.
	for i, st := range d.stmts {
		if st.kind != stmtKeyValue || !slices.Equal(fullPath(st), want) {
			continue
		}
		if d.arrayTableAt(i) {
			return fmt.Errorf("%s: key is inside an array of tables: %w", FormatPath(want), ErrUnsupported)
		}
		d.splice(st.valStart, st.valEnd, value)
		return d.rescan()
	}
	// Refuse when part of the path is a value (an inline table or a
	// scalar) or an array of tables.
	dotted := -1
	for i, st := range d.stmts {
		switch st.kind {
		case stmtKeyValue:
			p := fullPath(st)
			if len(p) < len(want) && slices.Equal(p, want[:len(p)]) {
				what := "a value"
				if raw := strings.TrimSpace(string(d.src[st.valStart:st.valEnd])); strings.HasPrefix(raw, "{") {
					what = "an inline table (" + FormatKey(st.key[len(st.key)-1]) + " = {…}), whose keys can only be added by rewriting it whole"
				}
				return fmt.Errorf("%s: %s is %s: %w", FormatPath(want), FormatPath(p), what, ErrUnsupported)
			}
			// Dotted keys implicitly create the tables along their path;
			// TOML forbids a [header] for those, so a key below one goes
			// in as a dotted key of the section that defines it.
			if dotted < 0 && len(st.key) > 1 && commonPrefix(p[:len(p)-1], table) > len(st.table) {
				if d.arrayTableAt(i) {
					return fmt.Errorf("%s: table %s is defined by dotted keys inside an array of tables: %w", FormatPath(want), FormatPath(p[:len(p)-1]), ErrUnsupported)
				}
				dotted = i
			}
		case stmtArrayTable:
			if len(st.key) <= len(table) && slices.Equal(st.key, table[:len(st.key)]) {
				return fmt.Errorf("%s: %s is an array of tables: %w", FormatPath(want), FormatPath(st.key), ErrUnsupported)
			}
		}
	}
	if dotted >= 0 {
		return d.insertDotted(dotted, want, value)
	}
	line := FormatKey(key) + " = " + value + d.nl
	if len(table) == 0 {
		return d.insertRoot(line)
	}
	header := -1
	for i, st := range d.stmts {
		if st.kind == stmtTable && slices.Equal(st.key, table) {
			header = i
			break
		}
	}
	if header < 0 {
		// New table at the end, separated by a blank line.
		var b strings.Builder
		if len(d.src) > 0 && d.src[len(d.src)-1] != '\n' {
			b.WriteString(d.nl)
		}
		if len(d.src) > 0 {
			b.WriteString(d.nl)
		}
		b.WriteString("[" + FormatPath(table) + "]" + d.nl)
		b.WriteString("  " + line)
		d.splice(len(d.src), len(d.src), b.String())
		return d.rescan()
	}
	// After the last key-value of the table's section.
	at, indent := d.stmts[header].end, d.stmts[header].indent+"  "
	if d.stmts[header].end == len(d.src) && (len(d.src) == 0 || d.src[len(d.src)-1] != '\n') {
		line = d.nl + line
	}
	for i := header + 1; i < len(d.stmts) && d.stmts[i].kind != stmtTable && d.stmts[i].kind != stmtArrayTable; i++ {
		if d.stmts[i].kind == stmtKeyValue {
			at, indent = d.stmts[i].end, d.stmts[i].indent
			if at == len(d.src) && d.src[at-1] != '\n' {
				line = d.nl + line
			}
		}
	}
	d.splice(at, at, indent+line)
	return d.rescan()
}

// insertDotted adds want = value as a dotted key (relative to the table of
// statement i) after the last key-value of i's section.
func (d *Document) insertDotted(i int, want []string, value string) error {
	base := d.stmts[i].table
	line := FormatPath(want[len(base):]) + " = " + value + d.nl
	if len(base) == 0 {
		return d.insertRoot(line)
	}
	at, indent := d.stmts[i].end, d.stmts[i].indent
	for j := i + 1; j < len(d.stmts) && d.stmts[j].kind != stmtTable && d.stmts[j].kind != stmtArrayTable; j++ {
		if d.stmts[j].kind == stmtKeyValue {
			at, indent = d.stmts[j].end, d.stmts[j].indent
		}
	}
	if at == len(d.src) && (len(d.src) == 0 || d.src[at-1] != '\n') {
		line = d.nl + line
	}
	d.splice(at, at, indent+line)
	return d.rescan()
}

// insertRoot adds a root key after the last root key-value, or before the
// first table when there is none.
func (d *Document) insertRoot(line string) error {
	at := -1
	indent := ""
	for _, st := range d.stmts {
		if st.kind == stmtTable || st.kind == stmtArrayTable {
			if at < 0 {
				at = st.start
			}
			break
		}
		if st.kind == stmtKeyValue {
			at, indent = st.end, st.indent
		}
	}
	if at < 0 {
		at = len(d.src)
	}
	if at > 0 && d.src[at-1] != '\n' {
		line = d.nl + line
	}
	d.splice(at, at, indent+line)
	return d.rescan()
}

func (d *Document) splice(from, to int, text string) {
	out := make([]byte, 0, len(d.src)-(to-from)+len(text))
	out = append(out, d.src[:from]...)
	out = append(out, text...)
	out = append(out, d.src[to:]...)
	d.src = out
}

var bareKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// FormatKey renders one key part, quoting it when it is not a bare key.
func FormatKey(k string) string {
	if bareKey.MatchString(k) {
		return k
	}
	return String(k)
}

// FormatPath renders a dotted table path.
func FormatPath(p []string) string {
	parts := make([]string, len(p))
	for i, k := range p {
		parts[i] = FormatKey(k)
	}
	return strings.Join(parts, ".")
}

// String renders a TOML basic string.
func String(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Bool renders a TOML boolean.
func Bool(v bool) string { return strconv.FormatBool(v) }

// Int renders a TOML integer.
func Int(v int64) string { return strconv.FormatInt(v, 10) }

// Strings renders a single-line array of strings.
func Strings(v []string) string {
	parts := make([]string, len(v))
	for i, s := range v {
		parts[i] = String(s)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func commonPrefix(a, b []string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
