// Package preflight is `gcp-t4 preflight`: it checks, before anything is
// deployed, what most failed peer-pod GPU deployments trip over: quota,
// zones without the GPU, private networking (Cloud NAT, Private Google
// Access, firewall rules for the agent port and the VXLAN tunnel), the
// podVM image, the caller's permissions and, with a kubeconfig, the
// cluster (node OS, containerd, the kata-remote runtime class and handler,
// the CAA DaemonSet). Every failed check carries the command that fixes it.
package preflight

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// Status is a check's verdict.
type Status string

const (
	Pass Status = "pass"
	Warn Status = "warn"
	Fail Status = "fail"
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
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Results []Result `json:"results"`
			Failed  bool     `json:"failed"`
		}{rs, Failed(rs)})
	case "table", "":
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, r := range rs {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Status, r.Check, r.Detail)
			if r.Fix != "" {
				fmt.Fprintf(tw, "\t\tfix: %s\n", r.Fix)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		var p, wn, f int
		for _, r := range rs {
			switch r.Status {
			case Pass:
				p++
			case Warn:
				wn++
			case Fail:
				f++
			}
		}
		_, err := fmt.Fprintf(w, "\n%d passed, %d warnings, %d failed\n", p, wn, f)
		return err
	}
	return fmt.Errorf("-o %q: use table or json", format)
}
