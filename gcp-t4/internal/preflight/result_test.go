package preflight

import (
	"bytes"
	"strings"
	"testing"
)

// A skipped check is no failure, prints its fix like a warning's, and is
// counted on the summary line.
func TestSkipIsCountedNotFailed(t *testing.T) {
	rs := []Result{pass("a", "ok"), skip("kubelet runtimeRequestTimeout", proxyGrant("kata-1"), "not read")}
	if Failed(rs) {
		t.Error("a skip fails preflight")
	}
	var b bytes.Buffer
	if err := Print(&b, "table", rs); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"skip  kubelet runtimeRequestTimeout", "fix: kubectl create clusterrole gcp-t4-preflight-kubelet-kata-1 --verb=get --resource=nodes/proxy --resource-name=kata-1",
		"kubectl delete clusterrolebinding,clusterrole gcp-t4-preflight-kubelet-kata-1", "1 passed, 0 warnings, 0 failed, 1 skipped"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
