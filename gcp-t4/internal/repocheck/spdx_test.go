package repocheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// spdxHeader opens every file of upstream's providers (e.g.
// src/cloud-providers/gcp/provider.go at CAA v0.22.0); the project is
// Apache-2.0 (LICENSE), so the drop-in's files open with it too.
const spdxHeader = "// (C) Copyright Confidential Containers Contributors\n// SPDX-License-Identifier: Apache-2.0\n"

func TestDropInFilesCarryUpstreamsLicenceHeader(t *testing.T) {
	dir := filepath.Join(root(t), "src", "cloud-providers", "gcpt4")
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
			return err
		}
		n++
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(string(data), spdxHeader) {
			rel, _ := filepath.Rel(dir, p)
			t.Errorf("gcpt4/%s does not open with upstream's header:\n%s", rel, spdxHeader)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("found %d Go files in gcpt4", n)
	}
}
