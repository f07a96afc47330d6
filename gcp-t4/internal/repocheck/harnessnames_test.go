package repocheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/demo"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/annotations"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

// test/node is a module of its own that imports neither the provider nor
// gcp-t4 (it builds them as binaries and drives them), so the names it
// shares with them are written there again; this holds each copy equal to
// the name it stands for, so a rename fails here rather than in a hand-run
// kata stage.
func TestNodeHarnessNamesMatchTheProduct(t *testing.T) {
	consts := map[string]string{}
	fset := token.NewFileSet()
	// install's detect.go: its name for the peer-pods webhook, which
	// gcp-t4 install looks for (test/node registers upstream's under the
	// same name); the others are test/node's.
	installConsts := map[string]string{}
	for _, f := range []string{"test/node/podvm.go", "test/node/kata_test.go", "test/node/gpu_test.go", "test/node/lost_test.go", "test/node/webhook.go", "gcp-t4/internal/install/detect.go"} {
		into := consts
		if filepath.Base(f) == "detect.go" {
			into = installConsts
		}
		file, err := parser.ParseFile(fset, filepath.Join(root(t), filepath.FromSlash(f)), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if vs, ok := n.(*ast.ValueSpec); ok {
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							into[name.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
			return true
		})
	}
	for name, want := range map[string]string{
		"CacheImage":      demo.CacheDemoImage,
		"cacheDevice":     gcpt4.CacheDeviceName,
		"cacheVerityKey":  gcpt4.CacheVerityMetadata,
		"reasonRequested": podevent.ReasonRequested,
		"reasonCreated":   podevent.ReasonCreated,
		"reasonLost":      podevent.ReasonLost,
		"annotGPUs":       annotations.GPUs,
		"annotVCPUs":      annotations.VCPUs,
		"annotMemory":     annotations.Memory,
		"webhookName":     installConsts["webhookName"],
	} {
		if got, ok := consts[name]; !ok || want == "" || got != want {
			t.Errorf("test/node's %s is %q, the product's %q", name, got, want)
		}
	}
}
