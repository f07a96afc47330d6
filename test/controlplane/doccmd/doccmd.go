// Package doccmd reads the shell commands a Markdown guide tells its reader
// to run: the lines of its ```sh blocks, continuation lines joined,
// comments dropped, here-documents kept as the command's input. It also
// hands back every other fenced block's text (a table a command prints, a
// file to write), named by the marker comment above it. Tests that run a
// guide as written (docs/install.md's walk-through and its Helm path, the
// runbook) or compare a block with what the product answers (install.md's
// can-i tables) share it, so a guide is read one way wherever it is tested.
//
// It lives in the control-plane harness module because that is the one
// module every test module already requires, and it needs only the
// standard library, so the module stays light.
package doccmd

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// Block is one fenced block of a guide. Only a ```sh (or ```bash,
// ```shell) block has Commands; every block has its Text.
type Block struct {
	// Marker is the text of the HTML comment that names the block: the
	// last `<!-- … -->` line before the block's fence, trimmed
	// ("step: podvm" for `<!-- step: podvm -->`); "" when none came since
	// the previous block.
	Marker string
	// Heading is the nearest heading above the block, without its #s.
	Heading string
	// Lang is the fence's info string up to its first blank ("sh",
	// "yaml"; "" for a bare ```).
	Lang string
	// Text is the block's lines as written, less the fence's
	// indentation, each ending in a newline.
	Text string
	// Line is the 1-based line of the opening fence.
	Line     int
	Commands []Command
}

// Command is one command of a block as the shell reads it.
type Command struct {
	// Text is the command: continuation lines joined with one space, the
	// block's indentation and any comment removed, and a here-document's
	// operator (<<EOF, <<'EOF', <<-EOF) cut off the end.
	Text string
	// Here is the here-document's delimiter ("" when the command has none)
	// and Body its lines, each ending in a newline.
	Here string
	Body string
	// Line is the 1-based line the command starts on.
	Line int
}

var (
	fenceRE   = regexp.MustCompile("^( *)```\\s*([^\\s`]*)[^`]*$")
	closeRE   = regexp.MustCompile("^ *```\\s*$")
	markerRE  = regexp.MustCompile(`^\s*<!--\s*(.*?)\s*-->\s*$`)
	headingRE = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	hereRE    = regexp.MustCompile(`\s*<<(-?)\s*(?:'([A-Za-z_][A-Za-z0-9_]*)'|"([A-Za-z_][A-Za-z0-9_]*)"|([A-Za-z_][A-Za-z0-9_]*))$`)
)

// File reads the blocks of the guide at path.
func File(path string) ([]Block, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	bs, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return bs, nil
}

// Parse reads the blocks of a guide. A block that never closes, a
// continuation line at a block's end and a here-document without its
// delimiter are errors: the guide shows something no shell would run.
func Parse(r io.Reader) ([]Block, error) {
	var (
		blocks  []Block
		cur     *Block
		shell   bool // cur is a shell block: its lines are commands
		indent  string
		marker  string
		heading string
		cont    string // joined continuation lines so far
		contAt  int
		here    *Command // the command whose here-document is being read
		hereTab bool     // <<-: leading tabs are stripped from the body
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		raw := sc.Text()
		if cur == nil {
			switch {
			case fenceRE.MatchString(raw):
				m := fenceRE.FindStringSubmatch(raw)
				blocks = append(blocks, Block{Marker: marker, Heading: heading, Lang: m[2], Line: n})
				cur, indent, marker = &blocks[len(blocks)-1], m[1], ""
				shell = m[2] == "sh" || m[2] == "bash" || m[2] == "shell"
			case markerRE.MatchString(raw):
				marker = markerRE.FindStringSubmatch(raw)[1]
			case headingRE.MatchString(raw):
				heading = headingRE.FindStringSubmatch(raw)[1]
			}
			continue
		}
		// Inside a block: its lines lose the fence's indentation. A line
		// that looks like a marker or a heading there is the block's text
		// (a # comment in YAML), not the guide's.
		line := strings.TrimPrefix(raw, indent)
		closing := closeRE.MatchString(raw)
		if !closing {
			cur.Text += line + "\n"
		}
		if !shell {
			if closing {
				cur = nil
			}
			continue
		}
		if here != nil {
			body := line
			if hereTab {
				body = strings.TrimLeft(body, "\t")
			}
			if body == here.Here {
				cur.Commands = append(cur.Commands, *here)
				here = nil
				continue
			}
			if closing {
				return nil, fmt.Errorf("line %d: the block ends inside the here-document of line %d (no %s line)", n, here.Line, here.Here)
			}
			here.Body += body + "\n"
			continue
		}
		if closing {
			if cont != "" {
				return nil, fmt.Errorf("line %d: the block ends on a continuation line (line %d ends in \\)", n, n-1)
			}
			cur = nil
			continue
		}
		code := strings.TrimSpace(stripComment(line))
		if c, ok := strings.CutSuffix(code, `\`); ok {
			if cont == "" {
				contAt = n
			}
			cont += strings.TrimSpace(c) + " "
			continue
		}
		text := strings.TrimSpace(cont + code)
		at := n
		if cont != "" {
			at = contAt
		}
		cont = ""
		if text == "" {
			continue
		}
		cmd := Command{Text: text, Line: at}
		if m := hereRE.FindStringSubmatch(text); m != nil && !strings.HasSuffix(strings.TrimSpace(text[:len(text)-len(m[0])]), "<") {
			cmd.Text = strings.TrimSpace(text[:len(text)-len(m[0])])
			cmd.Here = m[2] + m[3] + m[4]
			here, hereTab = &cmd, m[1] == "-"
			continue
		}
		cur.Commands = append(cur.Commands, cmd)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("the block opened on line %d never closes", cur.Line)
	}
	return blocks, nil
}

// stripComment removes a shell comment: a # that starts a word outside
// quotes, to the end of the line.
func stripComment(line string) string {
	var quote rune
	prev := ' '
	escaped := false
	for i, r := range line {
		switch {
		case escaped:
			escaped = false
		case quote == '\'':
			if r == '\'' {
				quote = 0
			}
		case r == '\\':
			escaped = true
		case quote == '"':
			if r == '"' {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (prev == ' ' || prev == '\t'):
			return line[:i]
		}
		prev = r
	}
	return line
}

// Marked returns the commands of the blocks whose marker is kind: NAME
// (`<!-- step: env -->` is kind "step", name "env"), in the guide's
// order, with the names in that order. A name marking two blocks gets
// both blocks' commands.
func Marked(blocks []Block, kind string) (names []string, cmds map[string][]Command) {
	cmds = map[string][]Command{}
	for _, b := range blocks {
		name, ok := strings.CutPrefix(b.Marker, kind+":")
		if !ok {
			continue
		}
		name = strings.TrimSpace(name)
		if _, seen := cmds[name]; !seen {
			names = append(names, name)
		}
		cmds[name] = append(cmds[name], b.Commands...)
	}
	return names, cmds
}

// ByMarker returns the first block marked `<!-- marker -->`, for a test
// that reads one block by its name (`<!-- can-i: install -->` is marker
// "can-i: install").
func ByMarker(blocks []Block, marker string) (Block, bool) {
	for _, b := range blocks {
		if b.Marker == marker {
			return b, true
		}
	}
	return Block{}, false
}

// Commands returns every command of the blocks, in order.
func Commands(blocks []Block) []Command {
	var out []Command
	for _, b := range blocks {
		out = append(out, b.Commands...)
	}
	return out
}
