//go:build linux

package remediate

import (
	"reflect"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/containerdrelease"
)

// addedLine is a containerd release line a test adds to the release table
// as one row, and the version its stand-in reports.
type addedLine struct {
	Version string
	Row     containerdrelease.Release
}

// addedLines are the lines the real-containerd suite runs besides
// versions.mk's releases (suite, harness_test.go): a line containerd never
// shipped, 2.99, with the facts of 2.0. It is newer than every row of the
// sidecar's table, whose newest row (2.4) has other facts, so the suite
// passing for it shows that the sidecar goes by the row alone. Its
// stand-in is a tested release with those facts (2.0.14), built to report
// v2.99.0 to `--version` and CRI alike (test/containerd/build.sh
// v2.99.0 v2.0.14): containerd's checks and daemon stay real. Adding a
// line here is all it takes for every table-driven test to run it.
var addedLines = []addedLine{{
	Version: "v2.99.0",
	Row: containerdrelease.Release{
		Line:             "2.99",
		MaxConfigVersion: 3,
		MigratesEachFile: false,
		Strategy:         containerdrelease.DropIn,
		CRI:              containerdrelease.CRIConfigVersion3,
		KataDeploy:       containerdrelease.KataDeployDropIn,
		ReadsBOM:         false,
		CNIBinDirs:       false,
	},
}}

// TestAddedLineIsOneRow: the added line is one the sidecar's table lacks,
// without its row the sidecar would run it with other facts (the newest
// row's), with it the suite's table gives exactly the row, and the suite
// runs it whenever a tested release has its facts.
func TestAddedLineIsOneRow(t *testing.T) {
	for _, a := range addedLines {
		v, err := containerdrelease.ParseVersion(a.Version)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := containerdrelease.Known.Row(v); ok {
			t.Fatalf("line %s is in containerdrelease.Known; an added line must be one it lacks", a.Row.Line)
		}
		if without := containerdrelease.Known.For(v); sameFacts(without.Release, a.Row) {
			t.Errorf("without its row %s would run with row %s's facts, the same: the suite would not show that the row is read", a.Version, without.Line)
		}
		with, err := suiteTable().Lookup(a.Version)
		if err != nil || !reflect.DeepEqual(with.Release, a.Row) {
			t.Fatalf("the suite's table gives %s %+v (%v), want the added row", a.Version, with.Release, err)
		}
		ran := false
		for _, r := range suite() {
			ran = ran || r.Version == a.Version
		}
		if !ran {
			t.Skipf("no release configured (test/containerd/versions.mk or the Makefile's env) has the facts of line %s, so the suite does not run it", a.Row.Line)
		}
	}
}
