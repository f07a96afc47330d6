package containerdrelease

import (
	"fmt"
	"reflect"
	"testing"
)

// TestKnownRowsAreWellFormed: one row per line, oldest first, each with
// every fact the sidecar reads set to a value it knows.
func TestKnownRowsAreWellFormed(t *testing.T) {
	var prev *Version
	for _, r := range Known {
		v, err := ParseVersion(r.Line)
		if err != nil || fmt.Sprintf("%d.%d", v.Major, v.Minor) != r.Line {
			t.Fatalf("row %q: Line is not MAJOR.MINOR (%v)", r.Line, err)
		}
		if prev != nil && !prev.before(v) {
			t.Errorf("row %s follows %s: want one row per line, oldest first", r.Line, prev)
		}
		prev = &v
		if r.MaxConfigVersion < 2 {
			t.Errorf("row %s: MaxConfigVersion %d; the sidecar keeps version 2 files and newer", r.Line, r.MaxConfigVersion)
		}
		if r.Strategy != InPlace && r.Strategy != DropIn {
			t.Errorf("row %s: Strategy %q", r.Line, r.Strategy)
		}
		switch r.KataDeploy {
		case KataDeployEditsMain, KataDeployDropIn, KataDeployConfD:
		default:
			t.Errorf("row %s: KataDeploy %q", r.Line, r.KataDeploy)
		}
		if len(r.CRI.Runtimes) == 0 || len(r.CRI.Images) == 0 {
			t.Errorf("row %s: CRI tables %+v", r.Line, r.CRI)
		}
	}
}

// TestForGivesALineItsRowOrTheOneBefore: a line in the table gets its
// row; one newer than a row, the newest row before it; one older than
// every row, the oldest. The version itself is kept for messages.
func TestForGivesALineItsRowOrTheOneBefore(t *testing.T) {
	row := func(line string) Release {
		t.Helper()
		v, _ := ParseVersion(line)
		r, ok := Known.Row(v)
		if !ok {
			t.Fatalf("no row %s", line)
		}
		return r
	}
	for raw, want := range map[string]string{
		"v1.7.29": "1.7", "containerd://2.0.4": "2.0", "2.2.1-gke.0": "2.2", "2.4.2+unknown": "2.4",
		"v2.5.0": "2.4", "3.1.0": "2.4", "v1.6.20": "1.7", "0.9.0": "1.7",
	} {
		got, err := Known.Lookup(raw)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Release, row(want)) || got.String() != raw {
			t.Errorf("Lookup(%q) = row %s (%s), want row %s", raw, got.Line, got, want)
		}
	}
	if _, err := Known.Lookup("edge"); err == nil {
		t.Error("Lookup(edge): want an error")
	}
	if _, err := (Table{}).Lookup("v2.0.0"); err == nil {
		t.Error("an empty table: want an error")
	}
}

// TestTableReproducesTheBranchesItReplaced: before the table, remediate
// compared versions; for every line those comparisons knew (1.x and 2.0
// to 2.4) the table gives the same facts, so the sidecar behaves as it
// did.
func TestTableReproducesTheBranchesItReplaced(t *testing.T) {
	var lines []Version
	for minor := 0; minor <= 9; minor++ {
		lines = append(lines, Version{Major: 1, Minor: minor})
	}
	for minor := 0; minor <= 4; minor++ {
		lines = append(lines, Version{Major: 2, Minor: minor})
	}
	for _, v := range lines {
		// The comparisons as they were (containerd.go MaxSchema and
		// MigratesEachFile, plan.go layoutOf and the 1.x/2.x split,
		// katadeploy.go confDMode).
		maxSchema := 4
		if v.Major < 2 {
			maxSchema = 2
		} else if v.Major == 2 && v.Minor < 3 {
			maxSchema = 3
		}
		migrates := v.Major > 2 || v.Major == 2 && v.Minor >= 3
		confD := !(v.Major < 2 || v.Major == 2 && v.Minor < 2)
		split := v.Major >= 2

		got := Known.For(v)
		if got.MaxConfigVersion != maxSchema || got.MigratesEachFile != migrates ||
			(got.KataDeploy == KataDeployConfD) != confD ||
			(got.Strategy == DropIn) != split ||
			reflect.DeepEqual(got.CRI, CRIConfigVersion3) != split {
			t.Errorf("containerd %d.%d: the table gives %+v; the branches gave max version %d, per-file migration %v, conf.d %v, 2.x layout %v",
				v.Major, v.Minor, got.Release, maxSchema, migrates, confD, split)
		}
	}
}

func TestFileCRIFollowsTheFilesVersion(t *testing.T) {
	if !reflect.DeepEqual(FileCRI(2), CRIConfigVersion2) || !reflect.DeepEqual(FileCRI(3), CRIConfigVersion3) || !reflect.DeepEqual(FileCRI(4), CRIConfigVersion3) {
		t.Fatal("a version 2 file uses the version 2 CRI table, versions 3 and 4 the split plugins")
	}
}
