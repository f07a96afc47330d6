package startup

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// The sidecar's flag is found in each form a DaemonSet may carry it, and
// only whole seconds (or 0) are accepted, as kata reads the setting.
func TestSidecarTimeoutArg(t *testing.T) {
	for _, c := range []struct {
		argv  []string
		value string
		found bool
		err   bool
	}{
		{[]string{"/bin/x", "--create-container-timeout=1200s"}, "1200s", true, false},
		{[]string{"-create-container-timeout", "20m"}, "20m", true, false},
		{[]string{"--host-root=/host", "create-container-timeout=5s"}, "", false, false},
		{[]string{"--create-container-timeout"}, "", false, true},
		{[]string{"--create-container-timeouts=5s"}, "", false, false},
	} {
		v, found, err := SidecarTimeoutArg(c.argv)
		if v != c.value || found != c.found || (err != nil) != c.err {
			t.Errorf("%q: %q %v %v, want %q %v err=%v", c.argv, v, found, err, c.value, c.found, c.err)
		}
	}
	for d, ok := range map[time.Duration]bool{0: true, 1200 * time.Second: true, 1500 * time.Millisecond: false, -time.Second: false} {
		if err := CheckSidecarTimeout(d); (err == nil) != ok {
			t.Errorf("CheckSidecarTimeout(%s): %v", d, err)
		}
	}
}

// The model: a phase with nothing to move takes no time (its fixed part
// included), an unknown size is not counted and says so, the slowest of a
// phase's rates paces it, and bytes kept off Cloud NAT are not counted
// there.
func TestModelPhases(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	phase := func(s Start, id string) PhaseTime {
		for _, p := range s.Phases {
			if p.ID == id {
				return p
			}
		}
		t.Fatalf("no phase %s", id)
		return PhaseTime{}
	}
	in := c.Defaults()
	in.Sizes["weights"] = 0
	s, err := c.Model(in)
	if err != nil {
		t.Fatal(err)
	}
	if e := phase(s, "engine"); e.Took.Duration != 0 || e.Figure != "none (no weights)" {
		t.Errorf("engine without weights: %s %q", e.Took, e.Figure)
	}
	if i := phase(s, "image"); i.Took.Duration != 0 || !strings.Contains(i.Figure, "unknown image size") {
		t.Errorf("image of unknown size: %s %q", i.Took, i.Figure)
	}
	in.Sizes["image"], in.Sizes["weights"] = 4e9, 10e9
	in.Rates["registry"], in.Rates["unpack"] = 100, 40
	in.OffNAT["weights"] = true
	if s, err = c.Model(in); err != nil {
		t.Fatal(err)
	}
	if i := phase(s, "image"); i.Took.Duration != 100*time.Second {
		t.Errorf("4 GB at min(100, 40) MB/s took %s, want 1m40s", i.Took)
	}
	if s.NATBytes != 4e9 {
		t.Errorf("NAT bytes %d, want the image's 4e9 only", s.NATBytes)
	}
}

// A route takes its own rates, the slowest pacing it, and keeps its bytes
// off Cloud NAT; NATBytes overrides what a phase moves through NAT (the
// longest of several pulls, some from the cache); a route the phase does
// not have is an error.
func TestModelRoutes(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	in := c.Defaults()
	in.Sizes["image"], in.Sizes["weights"] = 10e9, 24.5e9
	in.Routes["image"], in.Routes["weights"] = RouteCache, RouteGCS
	s, err := c.Model(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		id, route, rates, pace string
		took                   time.Duration
	}{
		{"image", RouteCache, "cache-disk,unpack", "unpack", 200 * time.Second},
		{"weights", RouteGCS, "gcs", "gcs", 123 * time.Second},
		{"engine", "", "disk", "disk", 60*time.Second + 102*time.Second},
	} {
		for _, p := range s.Phases {
			if p.ID == want.id && (p.Route != want.route || p.Rate != want.rates || p.Pace != want.pace || p.Took.Duration != want.took || p.NATBytes != 0) {
				t.Errorf("%s: route %q rates %q pace %q took %s NAT %d; want %+v", p.ID, p.Route, p.Rate, p.Pace, p.Took, p.NATBytes, want)
			}
		}
	}
	if s.NATBytes != 0 {
		t.Errorf("NAT bytes %d: want none, the image from the cache and the weights from Cloud Storage", s.NATBytes)
	}
	in.NATBytes["image"] = 3e9
	if s, err = c.Model(in); err != nil || s.NATBytes != 3e9 {
		t.Errorf("NATBytes override: %d, %v", s.NATBytes, err)
	}
	in.Routes["image"] = "tape"
	if _, err := c.Model(in); err == nil || !strings.Contains(err.Error(), `no route "tape"`) {
		t.Errorf("an unknown route: %v", err)
	}
}

// A route must name listed rates.
func TestCatalogueRefusesARouteWithAnUnlistedRate(t *testing.T) {
	bad := strings.Replace(string(catalogYAML), "cache: cache-disk,unpack", "cache: floppy,unpack", 1)
	if _, err := Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), `route cache: rate "floppy" is not listed`) {
		t.Fatalf("a route with an unlisted rate was accepted: %v", err)
	}
}
