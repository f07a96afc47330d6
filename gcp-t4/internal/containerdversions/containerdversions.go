// Package containerdversions tells the real-containerd tests which releases
// to run: test/containerd/versions.mk, the file the Makefile includes, so a
// version is set in one place; the Makefile's env (CONTAINERD17_VERSION,
// CONTAINERD2_VERSIONS) wins, so `make test CONTAINERD2=...` reaches every
// test.
package containerdversions

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// File is versions.mk's path from the repository root.
const File = "test/containerd/versions.mk"

// Env names the variables the Makefile passes to go test.
const (
	Env17 = "CONTAINERD17_VERSION"
	Env2  = "CONTAINERD2_VERSIONS"
)

// Pinned returns the 1.7 release and the 2.x releases (a 2.0 first, the
// newest last), from the env, else from File found above the working
// directory (go test runs in the package's directory).
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
	if !strings.HasPrefix(v17, "v1.7.") {
		return "", nil, fmt.Errorf("containerd 1.7 release %q: want v1.7.x (%s, or %s)", v17, File, Env17)
	}
	for _, v := range v2s {
		if !strings.HasPrefix(v, "v2.") {
			return "", nil, fmt.Errorf("containerd 2.x release %q: want v2.x (%s, or %s)", v, File, Env2)
		}
	}
	return v17, v2s, nil
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
