package termout

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestChart: bars follow each other on one axis scaled to the width, a
// deadline is a column lettered in the head row, one past twice the
// bars' end is left off the axis and returned, an unknown bar is a
// question mark, every line within the width.
func TestChart(t *testing.T) {
	c := Chart{
		Bars: []Bar{{Label: "a", Start: 0, End: time.Minute}, {Label: "bb", Start: time.Minute, End: 2 * time.Minute},
			{Label: "c", Start: 2 * time.Minute, Unknown: true}, {Label: "d", Start: 2 * time.Minute, End: 3 * time.Minute, Ongoing: true, Note: "under way"}},
		Deadlines: []Deadline{{Key: "x", At: 90 * time.Second}, {Key: "y", At: time.Hour}},
	}
	lines, beyond := c.Lines("  ", 60)
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > 60 {
			t.Errorf("%d columns: %q", n, l)
		}
	}
	if len(beyond) != 1 || beyond[0].Key != "y" {
		t.Errorf("beyond %v, want y alone", beyond)
	}
	text := strings.Join(lines, "\n")
	head, a, b, unk, d := []rune(lines[0]), []rune(lines[1]), []rune(lines[2]), lines[3], lines[4]
	x := strings.IndexRune(lines[0], 'x')
	if x < 0 || a[x] != Mark || b[x] != Mark || head[x] != 'x' {
		t.Errorf("no column at x:\n%s", text)
	}
	lastA := slices.Index(a, Full) + strings.Count(string(a), string(Full)) - 1
	firstB := slices.Index(b, Full)
	if lastA < 0 || firstB < lastA {
		t.Errorf("bb does not follow a:\n%s", text)
	}
	if !strings.Contains(unk, "? unknown") || !strings.Contains(d, string(Ongoing)+"  under way") || !strings.HasSuffix(lines[5], "3m0s") {
		t.Errorf("unknown, ongoing or axis:\n%s", text)
	}
}

// TestWrap: lines within the width at spaces, the rest indented; a word
// longer than a line is broken; JoinWrap keeps fields whole.
func TestWrap(t *testing.T) {
	got := Wrap("one two three four five", "> ", "  ", 12)
	if strings.Join(got, "|") != "> one two|  three four|  five" {
		t.Errorf("Wrap: %q", got)
	}
	got = Wrap(strings.Repeat("x", 25), "", "  ", 10)
	for _, l := range got {
		if utf8.RuneCountInString(l) > 10 {
			t.Errorf("Wrap of a long word: %q", got)
		}
	}
	if n := len(strings.Join(strings.Fields(strings.Join(got, "")), "")); n != 25 {
		t.Errorf("Wrap lost characters of a long word: %q", got)
	}
	got = JoinWrap([]string{"ns/pod", "podvm-x", "n1 + 1×t4", "pod Running"}, "  ", 30)
	if strings.Join(got, "|") != "ns/pod  podvm-x  n1 + 1×t4|  pod Running" {
		t.Errorf("JoinWrap: %q", got)
	}
}

// TestPairs: values line up two columns after the longest key and wrap
// under themselves; a word too wide for the value column starts below
// its key, whole.
func TestPairs(t *testing.T) {
	got := Pairs([][2]string{
		{"model", "m"},
		{"  memory", "48.6 ms: weights and KV cache"},
		{"shape from", "https://example.com/a/long/path"},
	}, "", 40)
	want := []string{
		"model       m",
		"  memory    48.6 ms: weights and KV",
		"            cache",
		"shape from",
		"    https://example.com/a/long/path",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Pairs:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestClean: control and bidirectional characters are escaped, others
// kept.
func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"plain ×→":          "plain ×→",
		"a\x1b[2Jb":         `a\x1b[2Jb`,
		"line\nnext\r":      `line\nnext\r`,
		"left\u202eright":   `left\u202eright`,
		"bad \xff byte":     `bad \xff byte`,
		"kept \uFFFD as is": "kept \uFFFD as is",
		// OSC 52 (a clipboard write), DEL and C1's CSI.
		"\x1b]52;c;ZXZpbA==\x07": `\x1b]52;c;ZXZpbA==\a`,
		"del\x7f csi\u009b2J":    `del\x7f csi\u009b2J`,
		// Every bidi mark, embedding, override and isolate.
		"\u200e\u200f\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069\u061c": `\u200e\u200f\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069\u061c`,
		// Invisible format characters: zero-width space, joiners, word
		// joiner, byte order mark, soft hyphen, a tag, a variation
		// selector, the line and paragraph separators.
		"a\u200bb\u200c\u200d\u2060\ufeff\u00ad": `a\u200bb\u200c\u200d\u2060\ufeff\u00ad`,
		"tag\U000E0041 vs\ufe0f \u2028\u2029":    `tag\U000e0041 vs\ufe0f \u2028\u2029`,
	} {
		if got := Clean(in); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
		if got := Clean(Clean(in)); got != want {
			t.Errorf("Clean(Clean(%q)) = %q, want %q: cleaning twice changes nothing", in, got, want)
		}
	}
}

// TestLines: each line is cleaned and the newlines kept.
func TestLines(t *testing.T) {
	in := "ok\nbad \x1b[2J\u202e\r\nlast"
	want := "ok\nbad \\x1b[2J\\u202e\\r\nlast"
	if got := Lines(in); got != want {
		t.Errorf("Lines(%q) = %q, want %q", in, got, want)
	}
}

// TestJSON: what encoding/json leaves raw (DEL, C1, bidi, format
// characters) is escaped, and the document decodes to the same strings.
func TestJSON(t *testing.T) {
	in := map[string]string{"m": "del\x7f csi\u009b2J \u202eevil\u200b tag\U000E0041 ok ×"}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	got := JSON(append(b, '\n'))
	if bytes.ContainsFunc(got[:len(got)-1], unsafe) || got[len(got)-1] != '\n' {
		t.Errorf("JSON left a raw character: %q", got)
	}
	var back map[string]string
	if err := json.Unmarshal(got, &back); err != nil || back["m"] != in["m"] {
		t.Errorf("JSON changed the document: %q, %v", back, err)
	}
}
