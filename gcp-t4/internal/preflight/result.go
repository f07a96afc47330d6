// Package preflight is `gcp-t4 preflight`: it checks, before anything is
// deployed, what most failed peer-pod GPU deployments trip over: quota,
// zones without the GPU, private networking (Cloud NAT, Private Google
// Access, firewall rules for the agent port and the VXLAN tunnel), the
// podVM image, the caller's permissions and, with a kubeconfig, the
// cluster (node OS, containerd, the kata-remote runtime class and handler,
// the CAA DaemonSet). Every failed check carries the command that fixes it.
package preflight

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/caa-gcp-t4/gcp-t4/internal/termout"
)

// Status is a check's verdict.
type Status string

const (
	Pass Status = "pass"
	Warn Status = "warn"
	Fail Status = "fail"
	// Skip is a check preflight could not run without a grant it will not
	// ask anyone to keep (the kubelet check's nodes/proxy); its Fix says
	// how to run it once and remove the grant. Not a failure.
	Skip Status = "skip"
)

// Result is one check's outcome; Fix is the command that repairs a failure
// or warning (gcloud or kubectl), empty on a pass.
type Result struct {
	Check  string `json:"check"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

func pass(check, format string, a ...any) Result {
	return Result{Check: check, Status: Pass, Detail: fmt.Sprintf(format, a...)}
}

func fail(check, fix, format string, a ...any) Result {
	return Result{Check: check, Status: Fail, Detail: fmt.Sprintf(format, a...), Fix: fix}
}

func warn(check, fix, format string, a ...any) Result {
	return Result{Check: check, Status: Warn, Detail: fmt.Sprintf(format, a...), Fix: fix}
}

func skip(check, fix, format string, a ...any) Result {
	return Result{Check: check, Status: Skip, Detail: fmt.Sprintf(format, a...), Fix: fix}
}

// Failed reports whether any result failed.
func Failed(rs []Result) bool {
	for _, r := range rs {
		if r.Status == Fail {
			return true
		}
	}
	return false
}

// Print writes results as lines ("table") or as a JSON document.
func Print(w io.Writer, format string, rs []Result) error {
	switch format {
	case "json":
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Results []Result `json:"results"`
			Failed  bool     `json:"failed"`
		}{rs, Failed(rs)}); err != nil {
			return err
		}
		_, err := w.Write(termout.JSON(b.Bytes()))
		return err
	case "table", "":
		return printTable(w, rs)
	}
	return fmt.Errorf("-o %q: use table or json", format)
}

// Layout of the table: status, check, detail in columns; a fix under its
// row. The check column is as wide as the widest check up to
// maxCheckWidth, for the whole table, so columns never move partway down;
// a longer check takes its row's width and its detail goes on the next
// line at the detail column.
const (
	statusWidth   = 4 // pass, warn, fail, skip
	gap           = "  "
	maxCheckWidth = 48
	// commentSep starts the comment the fixes put after a command.
	commentSep = "   # "
)

// printTable writes results for a terminal. Each fix is printed once: a
// command already printed under an earlier row (several checks share a
// firewall rule or a grant) is replaced by a pointer to that row, so a
// reader running the fixes in order runs each once.
func printTable(w io.Writer, rs []Result) error {
	width := 0
	for _, r := range rs {
		if n := utf8.RuneCountInString(r.Check); n > width && n <= maxCheckWidth {
			width = n
		}
	}
	detailCol := statusWidth + len(gap) + width + len(gap)
	fixIndent := strings.Repeat(" ", statusWidth+len(gap))
	fixCont := fixIndent + strings.Repeat(" ", len("fix: "))
	var b strings.Builder
	type first struct{ check, comment string }
	printed := map[string]first{} // command -> where it was printed, with its comment
	var p, wn, f, sk int
	for _, r := range rs {
		switch r.Status {
		case Pass:
			p++
		case Warn:
			wn++
		case Fail:
			f++
		case Skip:
			sk++
		}
		detail := strings.Split(r.Detail, "\n")
		head := fmt.Sprintf("%-*s%s%s", statusWidth, r.Status, gap, r.Check)
		if utf8.RuneCountInString(r.Check) > width {
			b.WriteString(strings.TrimRight(head, " ") + "\n")
			head = ""
		}
		pad := strings.Repeat(" ", max(0, detailCol-utf8.RuneCountInString(head)))
		b.WriteString(strings.TrimRight(head+pad+detail[0], " ") + "\n")
		for _, l := range detail[1:] {
			b.WriteString(strings.TrimRight(strings.Repeat(" ", detailCol)+l, " ") + "\n")
		}
		var lines []string
		lastRef := ""
		for _, line := range strings.Split(r.Fix, "\n") {
			line = strings.TrimSpace(line)
			if line == "" {
				continue
			}
			cmd, comment, _ := strings.Cut(line, commentSep)
			if at, ok := printed[cmd]; ok {
				// A note of this row's own (then remove …) stays.
				switch {
				case comment != "" && comment != at.comment:
					lines = append(lines, fmt.Sprintf("(as under %q above)%s%s", at.check, commentSep, comment))
				case at.check != lastRef:
					lines = append(lines, fmt.Sprintf("(as under %q above)", at.check))
				}
				lastRef = at.check
				continue
			}
			printed[cmd] = first{r.Check, comment}
			lastRef = ""
			if comment != "" {
				cmd += commentSep + comment
			}
			lines = append(lines, cmd)
		}
		for i, l := range lines {
			if i == 0 {
				b.WriteString(fixIndent + "fix: " + l + "\n")
			} else {
				b.WriteString(fixCont + l + "\n")
			}
		}
	}
	fmt.Fprintf(&b, "\n%d passed, %d warnings, %d failed", p, wn, f)
	if sk > 0 {
		fmt.Fprintf(&b, ", %d skipped", sk)
	}
	b.WriteString("\n")
	// A detail may quote the cluster's objects (a ConfigMap's value, a
	// node's or a DaemonSet's fields), which their writers chose: every
	// line is cleaned, its line breaks (the detail's own) kept.
	_, err := io.WriteString(w, termout.Lines(b.String()))
	return err
}
