package status

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/timeline"
)

// TestParseFlagsAroundPod: flags go before or after POD, as with kubectl;
// -gce is unset (auto) until given.
func TestParseFlagsAroundPod(t *testing.T) {
	for _, args := range [][]string{
		{"-n", "ml", "cuda-0", "-o", "json"},
		{"cuda-0", "-n", "ml", "-o=json"},
		{"-o", "json", "-n=ml", "cuda-0"},
	} {
		o, code, ok := parse(args, io.Discard)
		if !ok || code != 0 || o.pod != "cuda-0" || o.namespace != "ml" || o.output != "json" || o.gce.set {
			t.Errorf("%v: %+v (exit %d, ok %v)", args, o, code, ok)
		}
	}
	for args, want := range map[string]autoBool{"-gce": {set: true, on: true}, "-gce=false": {set: true}, "-A": {}} {
		o, _, ok := parse([]string{args}, io.Discard)
		if !ok || o.gce != want {
			t.Errorf("%s: gce %+v, want %+v", args, o.gce, want)
		}
	}
	for _, args := range [][]string{{"-A", "-n", "ml"}, {"-A", "p"}, {"a", "b"}, {"-o", "yaml"}, {"-gce=maybe"}} {
		var errb bytes.Buffer
		if _, code, ok := parse(args, &errb); ok || code != 2 || !strings.Contains(errb.String(), "usage: gcp-t4 status") {
			t.Errorf("%v: exit %d ok %v, want 2 with the usage\n%s", args, code, ok, errb.String())
		}
	}
}

// TestHuman: durations as people read them, never with nanoseconds.
func TestHuman(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0s", 2750 * time.Millisecond: "3s", 104 * time.Second: "1m44s",
		2*time.Hour + 5*time.Minute + 20*time.Second: "2h5m", -time.Second: "-1s"} {
		if got := human(d); got != want {
			t.Errorf("human(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestTableCostWording: the header says whether the cost still runs, is
// final, or is a floor; no price and no VM say so.
func TestTableCostWording(t *testing.T) {
	price := 0.5
	for _, c := range []struct {
		cost  *timeline.Cost
		price *float64
		want  string
	}{
		{&timeline.Cost{USD: 0.25, Ongoing: true}, &price, "$0.2500 so far"},
		{&timeline.Cost{USD: 0.25}, &price, "$0.2500 in all"},
		{&timeline.Cost{USD: 0.25, AtLeast: true}, &price, "at least $0.2500"},
		{nil, &price, "no VM, no cost"},
		{nil, nil, "price unknown  cost unknown"},
	} {
		h := header(podVM{Timeline: timeline.Timeline{Namespace: "ml", Pod: "p", PodVM: "podvm-p-1", Cost: c.cost, PricePerHour: c.price}, PodPhase: "Running"}, false)
		if !strings.Contains(h, c.want) || !strings.HasSuffix(h, "pod Running") {
			t.Errorf("header %q lacks %q", h, c.want)
		}
	}
}
