package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const origMod = `module example.com/m

go 1.25

require (
	example.com/direct v1.0.0
	example.com/unserved v1.2.0
)

require (
	example.com/nowdirect v0.3.0 // indirect
	example.com/onlyviaunserved v0.1.0 // indirect
)
`

// What `go mod tidy -e` writes when example.com/unserved cannot be
// downloaded: it and what only it needed are gone, a direct requirement it
// could no longer see used turned indirect; the new package's needs are
// there (a new module, a raised version, an indirect one now direct).
const tidiedMod = `module example.com/m

go 1.25

require (
	example.com/direct v1.0.0 // indirect
	example.com/nowdirect v0.3.0
)

require (
	example.com/added v0.9.0 // indirect
	example.com/raised v2.0.0+incompatible // indirect
)
`

func TestKeepAppliesOnlyWhatAddingAPackageChanges(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	orig := write("go.mod.orig", strings.Replace(origMod, "require (\n\texample.com/nowdirect", "require (\n\texample.com/raised v1.0.0+incompatible // indirect\n\texample.com/nowdirect", 1))
	origSum := write("go.sum.orig", "example.com/unserved v1.2.0 h1:a=\nexample.com/unserved v1.2.0/go.mod h1:b=\n")
	write("go.mod", tidiedMod)
	write("go.sum", "example.com/added v0.9.0 h1:c=\nexample.com/added v0.9.0/go.mod h1:d=\n")

	if code := run([]string{"-orig", orig, "-orig-sum", origSum, dir}, os.Stdout, os.Stderr); code != 0 {
		t.Fatalf("exit %d", code)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "go.mod"))
	want := `module example.com/m

go 1.25

require (
	example.com/direct v1.0.0
	example.com/unserved v1.2.0
)

require (
	example.com/added v0.9.0 // indirect
	example.com/nowdirect v0.3.0
	example.com/onlyviaunserved v0.1.0 // indirect
	example.com/raised v2.0.0+incompatible // indirect
)
`
	if string(got) != want {
		t.Errorf("go.mod:\n%s\nwant:\n%s", got, want)
	}
	sum, _ := os.ReadFile(filepath.Join(dir, "go.sum"))
	wantSum := "example.com/added v0.9.0 h1:c=\nexample.com/added v0.9.0/go.mod h1:d=\nexample.com/unserved v1.2.0 h1:a=\nexample.com/unserved v1.2.0/go.mod h1:b=\n"
	if string(sum) != wantSum {
		t.Errorf("go.sum:\n%s\nwant:\n%s", sum, wantSum)
	}
}
