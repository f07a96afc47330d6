package doccmd

import (
	"fmt"
	"strings"
)

// Fields splits a simple command into words as the shell does: blanks
// separate words outside quotes, '…' is literal, "…" and bare words expand
// $NAME and ${NAME}, a backslash escapes the next character, and ~ at the
// start of a word (alone or before /) is $HOME. lookup gives a variable's
// value; a variable it does not know is an error, as under `set -u`, so a
// guide that uses a variable it never set fails here rather than running
// with an empty one.
//
// Only simple commands: a pipeline, a list (&&, ||, ;, &), a redirection,
// a subshell, a command substitution or arithmetic is an error naming the
// syntax, for the caller to handle the command some other way. An
// expansion is one word, never split further (the guides quote theirs).
func Fields(text string, lookup func(name string) (string, bool)) ([]string, error) {
	var (
		words   []string
		cur     strings.Builder
		inWord  bool
		quote   byte
		runes   = text
		wordBeg = true
	)
	expand := func(i int) (int, error) {
		// runes[i] == '$'
		rest := runes[i+1:]
		var name string
		switch {
		case strings.HasPrefix(rest, "("):
			return 0, fmt.Errorf("%q: command substitution $(…) is not a simple command", text)
		case strings.HasPrefix(rest, "{"):
			end := strings.IndexByte(rest, '}')
			if end < 0 {
				return 0, fmt.Errorf("%q: ${ without }", text)
			}
			name = rest[1:end]
			if !isName(name) {
				return 0, fmt.Errorf("%q: ${%s}: only ${NAME} is expanded here", text, name)
			}
			i += 1 + end + 1
		default:
			j := 0
			for j < len(rest) && (rest[j] == '_' || isAlnum(rest[j])) {
				j++
			}
			name = rest[:j]
			if name == "" || !isName(name) {
				// A lone $ is literal.
				cur.WriteByte('$')
				return i + 1, nil
			}
			i += 1 + j
		}
		v, ok := lookup(name)
		if !ok {
			return 0, fmt.Errorf("%q: $%s is not set", text, name)
		}
		cur.WriteString(v)
		return i, nil
	}
	i := 0
	for i < len(runes) {
		c := runes[i]
		switch quote {
		case '\'':
			if c == '\'' {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
			i++
			continue
		case '"':
			switch {
			case c == '"':
				quote = 0
				i++
			case c == '\\' && i+1 < len(runes) && strings.IndexByte("$`\"\\", runes[i+1]) >= 0:
				cur.WriteByte(runes[i+1])
				i += 2
			case c == '$':
				var err error
				if i, err = expand(i); err != nil {
					return nil, err
				}
			case c == '`':
				return nil, fmt.Errorf("%q: command substitution `…` is not a simple command", text)
			default:
				cur.WriteByte(c)
				i++
			}
			continue
		}
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
			wordBeg = true
			i++
			continue
		case strings.IndexByte("|&;<>()`", c) >= 0:
			return nil, fmt.Errorf("%q: %q is shell syntax beyond a simple command (pipeline, list, redirection, subshell)", text, string(c))
		}
		inWord = true
		switch {
		case c == '\'' || c == '"':
			quote = c
			i++
		case c == '\\':
			if i+1 < len(runes) {
				cur.WriteByte(runes[i+1])
			}
			i += 2
		case c == '$':
			var err error
			if i, err = expand(i); err != nil {
				return nil, err
			}
		case c == '~' && wordBeg && (i+1 == len(runes) || runes[i+1] == '/' || runes[i+1] == ' '):
			home, ok := lookup("HOME")
			if !ok {
				return nil, fmt.Errorf("%q: ~ needs HOME", text)
			}
			cur.WriteString(home)
			i++
		default:
			cur.WriteByte(c)
			i++
		}
		wordBeg = false
	}
	if quote != 0 {
		return nil, fmt.Errorf("%q: unterminated %c quote", text, quote)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '_' && !isAlnum(s[i]) {
			return false
		}
	}
	return true
}
