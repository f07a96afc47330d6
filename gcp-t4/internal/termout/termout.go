// Package termout draws what gcp-t4's commands print for people on a
// terminal: a start-up as a Gantt chart (a bar per phase, a column per
// deadline), text wrapped to Width columns, and tenant-written text made
// safe to print. `gcp-t4 plan` draws the start it models and `gcp-t4
// status` the start its Events record, with the same chart.
//
// Columns are counted in runes: the chart's and the commands' characters
// (█ ░ ┃ ×) are one column wide on a terminal.
package termout

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Width is the widest line the commands print for people: a terminal of
// 100 columns shows every line whole.
const Width = 100

// The chart's glyphs.
const (
	// Full is a bar's time; Ongoing a phase not ended yet (up to now).
	Full    = '█'
	Ongoing = '░'
	// Mark is a deadline's column.
	Mark = '┃'
)

// Bar is one phase of a start: from Start to End, both offsets from the
// start's beginning.
type Bar struct {
	Label      string
	Start, End time.Duration
	// Unknown: its time is not known; it is drawn as "?" and a word, not
	// as a bar.
	Unknown bool
	// Ongoing: not ended yet; End is now.
	Ongoing bool
	// Note is printed after the bar, where it fits.
	Note string
}

// Deadline is a column in the chart at At, named by Key (one letter) in
// the chart's head; the caller's legend says what each key is.
type Deadline struct {
	Key string
	At  time.Duration
}

// Chart is a start as bars against time.
type Chart struct {
	Bars      []Bar
	Deadlines []Deadline
}

// Lines draws the chart, each line indent plus at most width-len(indent)
// columns: a head row with each deadline's key over its column, a row per
// bar, an axis from 0 to its end. The time axis runs to the last bar's
// end, or to a deadline past it when that is no more than twice as far
// (further ones would squeeze the bars to nothing); Beyond lists the
// deadlines past the axis, which are not drawn.
func (c Chart) Lines(indent string, width int) (lines []string, beyond []Deadline) {
	labelW, noteW := 0, 0
	var end time.Duration
	for _, b := range c.Bars {
		labelW = max(labelW, utf8.RuneCountInString(b.Label))
		if b.Note != "" {
			noteW = max(noteW, utf8.RuneCountInString(b.Note)+2)
		}
		end = max(end, b.End)
	}
	barsEnd := end
	for _, d := range c.Deadlines {
		if d.At <= 2*barsEnd || barsEnd == 0 {
			end = max(end, d.At)
		}
	}
	if end <= 0 {
		end = time.Second
	}
	// The notes have room after the bars, which end at the axis' end.
	cols := width - utf8.RuneCountInString(indent) - labelW - 2 - noteW
	if cols < 10 {
		cols = 10
	}
	// col is the column a time falls in: 0 .. cols-1.
	col := func(t time.Duration) int {
		return min(cols-1, max(0, int(int64(t)*int64(cols)/int64(end))))
	}
	pad := strings.Repeat(" ", labelW+2)
	marks := map[int]bool{}
	head := []rune(strings.Repeat(" ", cols))
	for _, d := range c.Deadlines {
		if d.At > end {
			beyond = append(beyond, d)
			continue
		}
		i := col(d.At)
		if !marks[i] {
			// Two deadlines in one column: the first one's key is shown;
			// the legend gives each one's time.
			copy(head[i:], []rune(d.Key)[:1])
		}
		marks[i] = true
	}
	if len(marks) > 0 {
		lines = append(lines, strings.TrimRight(indent+pad+string(head), " "))
	}
	for _, b := range c.Bars {
		row := []rune(strings.Repeat(" ", cols))
		for i := range marks {
			row[i] = Mark
		}
		switch {
		case b.Unknown:
			// At its start, or, near the axis' end, ending there.
			word := []rune("? unknown")
			copy(row[max(0, min(col(b.Start), cols-len(word))):], word)
		case b.End > b.Start:
			glyph := Full
			if b.Ongoing {
				glyph = Ongoing
			}
			// A bar covers every column its time touches; a short one
			// still shows as one column.
			last := col(b.End - 1)
			for i := col(b.Start); i <= last; i++ {
				if !marks[i] {
					row[i] = glyph
				}
			}
		}
		line := strings.TrimRight(string(row), " ")
		if b.Note != "" {
			line += "  " + b.Note
		}
		lines = append(lines, strings.TrimRight(indent+b.Label+strings.Repeat(" ", labelW-utf8.RuneCountInString(b.Label)+2)+line, " "))
	}
	left, right := "0s", Duration(end)
	gap := cols - len(left) - len(right)
	lines = append(lines, indent+pad+left+strings.Repeat(" ", max(1, gap))+right)
	return lines, beyond
}

// Duration is a duration as the charts' axes and legends print it,
// rounded to the second (1h2m3s).
func Duration(d time.Duration) string {
	return d.Round(time.Second).String()
}

// Wrap breaks text into lines of at most width columns at spaces: the
// first line starts with first, the rest with rest (an indent). A word
// longer than a line is broken inside (a URL, a path).
func Wrap(text, first, rest string, width int) []string {
	var lines []string
	line, lead := first, first
	for _, word := range strings.Fields(text) {
		for {
			n := utf8.RuneCountInString(line)
			w := utf8.RuneCountInString(word)
			sep := 1
			if line == lead {
				sep = 0
			}
			if n+sep+w <= width {
				if sep == 1 {
					line += " "
				}
				line += word
				break
			}
			if line != lead {
				lines = append(lines, line)
				line, lead = rest, rest
				continue
			}
			// The word alone is wider than a line: break it.
			room := max(1, width-n)
			r := []rune(word)
			lines = append(lines, line+string(r[:room]))
			line, lead, word = rest, rest, string(r[room:])
			if word == "" {
				break
			}
		}
	}
	if line != lead || len(lines) == 0 {
		lines = append(lines, line)
	}
	return lines
}

// JoinWrap joins fields with two spaces, as many to a line as fit the
// width, the lines after the first indented; a field is never broken
// unless it is wider than a line.
func JoinWrap(fields []string, indent string, width int) []string {
	var lines []string
	line := ""
	for _, f := range fields {
		switch {
		case line == "":
			line = f
		case utf8.RuneCountInString(line)+2+utf8.RuneCountInString(f) <= width:
			line += "  " + f
		default:
			lines = append(lines, line)
			line = indent + f
		}
	}
	var out []string
	for _, l := range append(lines, line) {
		if utf8.RuneCountInString(l) > width {
			out = append(out, Wrap(l, "", indent, width)...)
		} else {
			out = append(out, l)
		}
	}
	return out
}

// Pairs lays out rows of a key and its value: the keys in a column after
// indent, each value two columns after the longest key, wrapped to width
// with its later lines indented to the value's column. A value with a word
// too wide for that column (a URL) starts on the line below its key,
// indented four more than the keys, so that the word is broken only when
// it is wider than a whole line.
func Pairs(rows [][2]string, indent string, width int) []string {
	keyW := 0
	for _, r := range rows {
		keyW = max(keyW, utf8.RuneCountInString(r[0]))
	}
	col := utf8.RuneCountInString(indent) + keyW + 2
	var lines []string
	for _, r := range rows {
		long := slices.ContainsFunc(strings.Fields(r[1]), func(w string) bool { return col+utf8.RuneCountInString(w) > width })
		if !long {
			key := indent + r[0] + strings.Repeat(" ", keyW+2-utf8.RuneCountInString(r[0]))
			lines = append(lines, Wrap(r[1], key, strings.Repeat(" ", col), width)...)
			continue
		}
		lines = append(lines, strings.TrimRight(indent+r[0], " "))
		under := indent + strings.Repeat(" ", 4+utf8.RuneCountInString(r[0])-utf8.RuneCountInString(strings.TrimLeft(r[0], " ")))
		lines = append(lines, Wrap(r[1], under, under, width)...)
	}
	return lines
}

// FitLine wraps a table row wider than width: what passes the width moves
// to lines of its own, indented to the row's last cell (at cell, the
// rune offset the caller's header gives), so the columns before it stay
// readable.
func FitLine(line string, cell, width int) []string {
	if utf8.RuneCountInString(line) <= width {
		return []string{line}
	}
	r := []rune(line)
	if cell <= 0 || cell >= len(r) || cell > width-20 {
		return Wrap(line, "", "    ", width)
	}
	return Wrap(string(r[cell:]), string(r[:cell]), strings.Repeat(" ", cell), width)
}

// Clean makes tenant-written text (an Event's message, a manifest's
// names and annotations, a GCE label) safe to print: every character that
// acts on the terminal or hides itself becomes its Go escape (\x1b,
// \u202e, \u200b), so it shows and does nothing: C0 and C1 controls
// with ESC, DEL and the line breaks among them; bidirectional marks,
// embeddings, overrides and isolates (U+200E/F, U+202A-202E,
// U+2066-2069, U+061C), which reorder what follows them; the other
// invisible format characters (zero-width space and joiners, U+2060's
// word joiner, the byte order mark, soft hyphen, tag characters,
// variation selectors) and U+2028/U+2029, which make two strings that
// differ print alike. Bytes that are not UTF-8 become \xNN. It is the one
// definition of what is unsafe; Lines applies it to text with lines.
func Clean(s string) string {
	if !strings.ContainsFunc(s, unsafe) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafe(r):
			q := strconv.QuoteRune(r)
			if strings.HasPrefix(q, "'\\") {
				b.WriteString(q[1 : len(q)-1])
			} else if r <= 0xFFFF {
				// QuoteRune keeps what Go deems printable (U+00AD,
				// variation selectors): escaped here all the same.
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				fmt.Fprintf(&b, `\U%08x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Lines is Clean for text made of lines (a command's whole table): each
// line cleaned, its newlines kept. The printers apply it to what they
// write whole, so a field that no one thought to Clean is safe too;
// Cleaning a field first also escapes its newlines, so it cannot start a
// line of its own, and cleaning twice changes nothing.
func Lines(s string) string {
	if !strings.ContainsFunc(s, unsafe) && utf8.ValidString(s) {
		return s
	}
	parts := strings.Split(s, "\n")
	for i, p := range parts {
		parts[i] = Clean(p)
	}
	return strings.Join(parts, "\n")
}

// JSON makes encoding/json's output safe to print: it escapes controls
// below U+0020 and U+2028/9, but writes DEL, C1 controls (U+009B is a
// CSI), bidi and format characters raw. Each such character, which in
// JSON can only be inside a string, becomes its \u escape (a surrogate
// pair above U+FFFF), so the document means the same; newlines between
// values are kept.
func JSON(b []byte) []byte {
	if !bytes.ContainsFunc(b, func(r rune) bool { return r != '\n' && unsafe(r) }) {
		return b
	}
	var out bytes.Buffer
	for _, r := range string(b) {
		switch {
		case r == '\n' || !unsafe(r):
			out.WriteRune(r)
		case r > 0xFFFF:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&out, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&out, `\u%04x`, r)
		}
	}
	return out.Bytes()
}

func unsafe(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || unicode.Is(unicode.Cf, r) ||
		unicode.Is(unicode.Zl, r) || unicode.Is(unicode.Zp, r) ||
		unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) || unicode.Is(unicode.Variation_Selector, r)
}
