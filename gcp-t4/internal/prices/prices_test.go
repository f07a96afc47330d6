package prices

import (
	"math"
	"strings"
	"testing"
)

func TestEmbeddedTableIsCitedAndDated(t *testing.T) {
	tab, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if tab.AsOf != "2026-08-03" || tab.Region != "us-central1" || tab.Currency != "USD" {
		t.Errorf("header = %s %s %s", tab.AsOf, tab.Region, tab.Currency)
	}
	for _, s := range tab.Sources {
		if !strings.HasPrefix(s.Ref, "https://") {
			t.Errorf("source %s: ref %q is not a link", s.ID, s.Ref)
		}
	}
}

func TestHourly(t *testing.T) {
	tab, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-6 }
	e := tab.Hourly("n1-standard-4", "nvidia-tesla-t4", 1, false)
	if !e.Known || !near(e.Total, 0.189999+0.35) || !near(e.GPU, 0.35) {
		t.Errorf("t4-1 on-demand = %+v, want 0.19 + 0.35", e)
	}
	e = tab.Hourly("n1-standard-16", "nvidia-tesla-t4", 4, false)
	if !e.Known || !near(e.Total, 0.759996+4*0.35) {
		t.Errorf("t4-4 = %+v", e)
	}
	e = tab.Hourly("n1-standard-4", "nvidia-tesla-t4", 1, true)
	if !e.Known || !near(e.Total, 0.06701+0.11) {
		t.Errorf("t4-1 spot = %+v", e)
	}
	// N1 custom types: per vCPU and per GiB, on demand and Spot.
	e = tab.Hourly("custom-8-40960", "nvidia-tesla-t4", 1, false)
	if !e.Known || !near(e.Host, 8*0.033174+40*0.004446) || strings.Join(e.Sources, ",") != "n1-custom,t4-sku" {
		t.Errorf("custom-8-40960 = %+v", e)
	}
	if e = tab.Hourly("custom-8-40960", "", 0, true); !e.Known || !near(e.Host, 8*0.011701+40*0.001568) {
		t.Errorf("custom-8-40960 spot = %+v", e)
	}
	e = tab.Hourly("a3-highgpu-1g", "", 0, false)
	if !e.Known || !near(e.Total, 11.06125) || strings.Join(e.Sources, ",") != "karpenter-gcp" {
		t.Errorf("h100 = %+v", e)
	}
	if e := tab.Hourly("e2-medium", "", 0, true); !e.Known || !near(e.Total, 0.020106) {
		t.Errorf("e2-medium spot = %+v", e)
	}
	// A type without a price says so instead of passing off a partial
	// sum as the price.
	e = tab.Hourly("m3-ultramem-32", "nvidia-tesla-t4", 1, true)
	if e.Known || len(e.Missing) != 1 || !strings.Contains(e.Missing[0], "m3-ultramem-32 (Spot)") {
		t.Errorf("unpriced type = %+v", e)
	}
}

func TestParseRejectsUncitedPrices(t *testing.T) {
	bad := []string{
		`{"region":"r","currency":"USD","asOf":"d","sources":[],"machineTypes":{"x":{"onDemand":1,"source":"nope"}}}`,
		`{"region":"r","currency":"USD","asOf":"d","sources":[{"id":"a","ref":"https://x","date":""}]}`,
		`{"region":"r","currency":"USD","asOf":"d","surprise":1}`,
		`{"region":"r","currency":"USD","asOf":"d","sources":[{"id":"a","ref":"https://x","date":"d"}],"accelerators":{"x":{"onDemand":0,"source":"a"}}}`,
		`{"region":"r","currency":"USD"}`,
	}
	for _, b := range bad {
		if _, err := Parse([]byte(b)); err == nil {
			t.Errorf("accepted %s", b)
		}
	}
}
