package remediate

import (
	"fmt"
	"strings"
)

// Diff renders the change of one file as a line diff (--dry-run output):
// lines only in old start with "-", lines only in new with "+", and
// unchanged lines are elided except for one line of context.
func Diff(path string, old, new []byte) string {
	a := splitLines(string(old))
	b := splitLines(string(new))
	// Longest common subsequence over lines; config files are small.
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type op struct {
		kind byte
		text string
	}
	var ops []op
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			ops = append(ops, op{' ', a[i]})
			i++
			j++
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, op{'-', a[i]})
			i++
		default:
			ops = append(ops, op{'+', b[j]})
			j++
		}
	}
	var out strings.Builder
	from := "a" + path
	if old == nil {
		from = "/dev/null"
	}
	fmt.Fprintf(&out, "--- %s\n+++ b%s\n", from, path)
	skipping := false
	for k, o := range ops {
		near := o.kind != ' ' || (k > 0 && ops[k-1].kind != ' ') || (k+1 < len(ops) && ops[k+1].kind != ' ')
		if !near {
			if !skipping {
				out.WriteString("@@\n")
				skipping = true
			}
			continue
		}
		skipping = false
		fmt.Fprintf(&out, "%c%s\n", o.kind, o.text)
	}
	return out.String()
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}
