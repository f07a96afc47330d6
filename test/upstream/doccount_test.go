package upstream_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/test/upstream/apicheck"
)

// TestUpstreamDocCountsTheDeclarations: docs/upstream.md reports how many
// declarations the API check compared against the real upstream; it is
// the count caa-api-check prints ("the N declarations gcpt4 uses"),
// computed here from our fork the same way.
func TestUpstreamDocCountsTheDeclarations(t *testing.T) {
	root := repoRoot(t)
	fork := filepath.Join(root, "src", "cloud-providers")
	skip := func(rel string) bool { return rel == "gcpt4" || strings.HasPrefix(rel, "gcpt4/") }
	api, err := apicheck.Extract(fork, skip)
	if err != nil {
		t.Fatal(err)
	}
	uses, err := apicheck.ScanUses(fork, filepath.Join(fork, "gcpt4"))
	if err != nil {
		t.Fatal(err)
	}
	n := len(api.Used(uses))
	doc, err := os.ReadFile(filepath.Join(root, "docs", "upstream.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`API check passes \(([0-9]+) declarations`).FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/upstream.md does not say how many declarations the API check passes")
	}
	if got, _ := strconv.Atoi(string(m[1])); got != n {
		t.Fatalf("docs/upstream.md says %d declarations; the API check compares %d", got, n)
	}
}
