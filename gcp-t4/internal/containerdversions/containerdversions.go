// Package containerdversions tells the real-containerd tests which releases
// to run: test/containerd/versions.mk, the file the Makefile includes, so a
// version is set in one place; the Makefile's env (CONTAINERD17_VERSION,
// CONTAINERD2_VERSIONS) wins, so `make test CONTAINERD2=...` reaches every
// test. A release is accepted when the sidecar's release table
// (containerdrelease.Known) has a row for its line: the tests pick the
// releases they need by the facts of those rows.
package containerdversions

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/containerdrelease"
)

// File is versions.mk's path from the repository root.
const File = "test/containerd/versions.mk"

// Env names the variables the Makefile passes to go test.
const (
	Env17 = "CONTAINERD17_VERSION"
	Env2  = "CONTAINERD2_VERSIONS"
)

// tag is how test/containerd/build.sh names a release: the module proxy's
// version of it.
var tag = regexp.MustCompile(`^v\d+\.\d+\.\d+$`)

// Pinned returns versions.mk's two variables, CONTAINERD17's release and
// CONTAINERD2's, from the env, else from File found above the working
// directory (go test runs in the package's directory). Each must be a tag
// whose line the release table knows; which variable a release comes in
// says nothing about it.
func Pinned() (v17 string, v2s []string, err error) {
	v17, v2s = os.Getenv(Env17), strings.Fields(os.Getenv(Env2))
	if v17 == "" || len(v2s) == 0 {
		f17, f2s, err := fromFile()
		if err != nil {
			return "", nil, err
		}
		if v17 == "" {
			v17 = f17
		}
		if len(v2s) == 0 {
			v2s = f2s
		}
	}
	for _, v := range append([]string{v17}, v2s...) {
		if err := Known(v); err != nil {
			return "", nil, fmt.Errorf("%w (%s, or %s / %s)", err, File, Env17, Env2)
		}
	}
	return v17, v2s, nil
}

// Releases is every release Pinned returns, as one list: the tests pick
// the ones they need by the facts of their rows.
func Releases() ([]string, error) {
	v17, v2s, err := Pinned()
	if err != nil {
		return nil, err
	}
	return append([]string{v17}, v2s...), nil
}

// Known checks that v is a release tag whose line has a row in
// containerdrelease.Known.
func Known(v string) error {
	if !tag.MatchString(v) {
		return fmt.Errorf("containerd release %q: want a tag such as v2.4.2", v)
	}
	parsed, err := containerdrelease.ParseVersion(v)
	if err != nil {
		return err
	}
	if _, ok := containerdrelease.Known.Row(parsed); !ok {
		return fmt.Errorf("containerd release %s: the release table (containerdrelease.Known) has no row for line %d.%d; add the row, citing its facts at the tag", v, parsed.Major, parsed.Minor)
	}
	return nil
}

func fromFile() (v17 string, v2s []string, err error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", nil, err
	}
	for {
		f, err := os.Open(filepath.Join(dir, File))
		if err == nil {
			defer f.Close()
			return parse(f.Name(), bufio.NewScanner(f))
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", nil, err
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", nil, fmt.Errorf("%s not found above the working directory; run the tests from the repository", File)
		}
		dir = up
	}
}

// parse reads the `NAME ?= value` lines of versions.mk.
func parse(name string, sc *bufio.Scanner) (v17 string, v2s []string, err error) {
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, val, ok := strings.Cut(line, "?=")
		if !ok {
			return "", nil, fmt.Errorf("%s: %q is not NAME ?= value", name, line)
		}
		switch strings.TrimSpace(key) {
		case "CONTAINERD17":
			v17 = strings.TrimSpace(val)
		case "CONTAINERD2":
			v2s = strings.Fields(val)
		default:
			return "", nil, fmt.Errorf("%s: unknown variable %q", name, strings.TrimSpace(key))
		}
	}
	if err := sc.Err(); err != nil {
		return "", nil, err
	}
	if v17 == "" || len(v2s) == 0 {
		return "", nil, fmt.Errorf("%s sets neither CONTAINERD17 nor CONTAINERD2, or not both", name)
	}
	return v17, v2s, nil
}
