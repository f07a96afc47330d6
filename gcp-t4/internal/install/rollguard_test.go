package install

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestRollReportIsBoundedAndClean: the refusal names at most rollListMax
// pods and counts the rest, and prints what tenants and nodes wrote
// through termout.Clean. The API server refuses such pod names today;
// the report does not rely on it (an aggregated API, an older server, a
// node name).
func TestRollReportIsBoundedAndClean(t *testing.T) {
	pods := []KataPod{
		{Namespace: "ml", Name: "evil\x1b[2J\x1b]0;pwned\x07name", Node: "n\u202e1", Phase: corev1.PodRunning},
		{Namespace: "ml", Name: "line\nbreak", Node: "n2"},
	}
	for i := range rollListMax + 3 {
		pods = append(pods, KataPod{Namespace: "bulk", Name: fmt.Sprintf("p%02d", i), Node: "n3", Phase: corev1.PodRunning})
	}
	got := rollReport(pods, 15*time.Minute)
	for _, bad := range []string{"\x1b", "\x07", "\u202e", "line\nbreak"} {
		if strings.Contains(got, bad) {
			t.Errorf("report prints %q raw:\n%s", bad, got)
		}
	}
	for _, want := range []string{
		fmt.Sprintf("the %d kata-remote pod(s) running or starting on 3 node(s):", len(pods)),
		`pod ml/evil\x1b[2J\x1b]0;pwned\aname (node n\u202e1, Running)`,
		`pod ml/line\nbreak (node n2, Pending)`,
		"  pod bulk/p17 (node n3, Running)\n",
		"  … and 5 more\n",
		"REAPER_GRACE (15m0s)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "bulk/p18") {
		t.Errorf("report names more than %d pods:\n%s", rollListMax, got)
	}
	if n := strings.Count(got, "\n  pod "); n != rollListMax {
		t.Errorf("report lists %d pods, want %d", n, rollListMax)
	}
}
