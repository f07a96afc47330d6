package repocheck

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
)

// docs/provider.md's GPU table is the provider's catalogue, row for row:
// a family added to catalog/gpufamilies.go, or a fact changed there, fails this
// until the doc says so too.
func TestGPUCatalogueTable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root(t), "docs", "provider.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start, end := strings.Index(doc, "<!-- gpu-catalogue -->\n"), strings.Index(doc, "<!-- /gpu-catalogue -->")
	if start < 0 || end < start {
		t.Fatal("docs/provider.md has no <!-- gpu-catalogue --> table")
	}
	rows := strings.Split(strings.TrimSpace(doc[start+len("<!-- gpu-catalogue -->\n"):end]), "\n")[2:]
	var want []string
	for _, f := range catalog.GPUFamilies() {
		how := ""
		if f.AttachSeries != "" {
			var counts []string
			for _, l := range f.AttachLimits {
				counts = append(counts, fmt.Sprint(l.Count))
			}
			how = fmt.Sprintf("attached to %s: %s or %s", strings.ToUpper(f.AttachSeries), strings.Join(counts[:len(counts)-1], ", "), counts[len(counts)-1])
		} else {
			var shapes []string
			for _, b := range f.Bundled {
				shapes = append(shapes, fmt.Sprintf("%s (%d)", b.MachineType, b.GPUs))
			}
			how = "bundled: " + strings.Join(shapes, ", ")
		}
		fit := "always"
		if !f.Automatic {
			fit = fmt.Sprintf("when `GCP_INSTANCE_TYPES` lists `%s`", f.Accelerator)
		}
		serve := "no"
		if s := f.Serving; s != nil {
			serve = fmt.Sprintf("%.2f GiB, compute capability %d.%d, %s", s.CUDAMemoryGiB, s.Capability/10, s.Capability%10, strings.Join(s.DTypes, " "))
		}
		want = append(want, fmt.Sprintf("| `%s` | `%s` | %s | `%s` / `%s` | %s | %s |", f.Name, f.Accelerator, how, f.QuotaMetric, f.PreemptibleQuotaMetric, fit, serve))
	}
	if strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Errorf("docs/provider.md's GPU table differs from gcpt4's catalogue; write:\n%s", strings.Join(want, "\n"))
	}
}
