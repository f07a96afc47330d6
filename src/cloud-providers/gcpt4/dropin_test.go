// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// allowedImports are the non-standard packages gcpt4 may import: upstream
// CAA's own packages and modules that upstream's src/cloud-providers/go.mod
// pins. Anything else would break the drop-in copy into upstream.
var allowedImports = []string{
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers",
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util",
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit",
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/",
	"cloud.google.com/go/compute/",
	"google.golang.org/api/",
	"google.golang.org/protobuf/",
	"github.com/google/uuid",
	"github.com/googleapis/gax-go/v2/",
	"gopkg.in/yaml.v2",
	"golang.org/x/time/rate",
}

func TestImportsStayInsideTheDropInContract(t *testing.T) {
	var files []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".go") {
			files = append(files, path)
		}
		return err
	})
	if err != nil || len(files) == 0 {
		t.Fatalf("listing the package: %v (%d files)", err, len(files))
	}
	fset := token.NewFileSet()
	for _, f := range files {
		ast, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first := strings.Split(path, "/")[0]
			if !strings.Contains(first, ".") {
				continue // standard library
			}
			ok := false
			for _, a := range allowedImports {
				// Entries ending in "/" allow a module's packages; others
				// are exact, so a package only our fork has fails.
				ok = ok || path == a || (strings.HasSuffix(a, "/") && strings.HasPrefix(path, a))
			}
			if !ok {
				t.Errorf("%s imports %s, which upstream CAA's cloud-providers module does not provide", f, path)
			}
		}
	}
}
