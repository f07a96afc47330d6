package startup

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCatalogueLoads(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.InstallCreateContainerTimeout() <= 0 {
		t.Fatal("no create_container_timeout for install")
	}
}

func TestCatalogueRefusesUncitedRows(t *testing.T) {
	bad := strings.Replace(string(catalogYAML), "source: cri-client\n", "source: nowhere\n", 1)
	if _, err := Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), `"nowhere" is not listed`) {
		t.Fatalf("an uncited deadline was accepted: %v", err)
	}
}

// A measured figure is the one its benchmark section records: the file a
// source names exists, and holds the phase's seconds or the rate's
// efficiency, so a re-measurement changes both or fails here.
func TestMeasuredFiguresAreInTheirBenchmarks(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	read := func(id string) string {
		s, ok := c.Source(id)
		if !ok || s.File == "" {
			return ""
		}
		b, err := os.ReadFile(filepath.Join("..", "..", "..", s.File))
		if err != nil {
			t.Fatalf("source %s: %v", id, err)
		}
		return string(b)
	}
	checked := 0
	for _, p := range c.Phases {
		if p.Kind != KindMeasured || p.Fixed == nil {
			continue
		}
		for _, id := range strings.Split(p.Source, ",") {
			if doc := read(strings.TrimSpace(id)); doc != "" {
				checked++
				if want := fmt.Sprintf("%d s", int(p.Fixed.Seconds())); !strings.Contains(doc, want) {
					t.Errorf("phase %s: %q is not in %s", p.ID, want, id)
				}
			}
		}
	}
	for _, r := range c.Rates {
		if r.Efficiency == 0 || r.Efficiency == 1 {
			continue
		}
		for _, id := range strings.Split(r.Source, ",") {
			if doc := read(strings.TrimSpace(id)); doc != "" {
				checked++
				if want := fmt.Sprintf("%g", r.Efficiency); !strings.Contains(doc, want) {
					t.Errorf("rate %s: efficiency %s is not in %s", r.ID, want, id)
				}
			}
		}
	}
	if checked < 2 {
		t.Fatalf("checked %d figures against their benchmarks, want the boot time and the pull efficiency", checked)
	}
}
