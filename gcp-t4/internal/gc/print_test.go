package gc

import (
	"bytes"
	"strings"
	"testing"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/managed"
)

// TestPrintCleansVMFields: a VM's namespace, pod and node come from its
// labels and metadata, which whoever may label VMs in the project wrote;
// an OSC 52 clipboard write, a screen clear, a bidi override and a
// zero-width space in them are printed escaped, in the table and in
// JSON, and a newline does not start a row of its own.
func TestPrintCleansVMFields(t *testing.T) {
	bad := "\x1b]52;c;ZXZpbA==\x07\x1b[2J\u202e\u200b\nfake-row"
	p := Pass{Findings: []Finding{{VM: managed.VM{ID: "us-central1-a/podvm-x", Namespace: "ml" + bad, Pod: "p" + bad, Node: "n" + bad, Cluster: clusterA},
		Verdict: Orphan, Reason: "no PeerPod names sandbox " + bad}}}
	for _, output := range []string{"table", "json"} {
		var out bytes.Buffer
		if err := Print(&out, output, p); err != nil {
			t.Fatal(err)
		}
		s := out.String()
		if strings.ContainsAny(s, "\x1b\x07\u202e\u200b") {
			t.Errorf("-o %s: a raw control reaches the terminal:\n%q", output, s)
		}
		if output == "table" && (strings.Count(s, "\n") != 2 || !strings.Contains(s, `ml\x1b]52;c;ZXZpbA==\a\x1b[2J\u202e\u200b\nfake-row/p`)) {
			t.Errorf("table: want the header and one row, the fields escaped:\n%s", s)
		}
	}
}
