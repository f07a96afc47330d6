package status

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/termout"
	"github.com/caa-gcp-t4/gcp-t4/internal/timeline"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

// maxDetail bounds a failure's message in the table: the first line of
// what the provider wrote for people (the whole of it is in -o json and
// kubectl describe pod).
const maxDetail = 100

func printJSON(w io.Writer, rep report) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return err
	}
	_, err := w.Write(termout.JSON(b.Bytes()))
	return err
}

// printTable writes, per podVM, a header line (pod, podVM, shape, model,
// zone, price, cost, pod phase, and GCE's word when asked) and its
// phases in fixed columns; then the pods without Events, and why.
func printTable(out io.Writer, rep report) error {
	// Built whole, then written once: one error to check.
	w := &bytes.Buffer{}
	for i, p := range rep.PodVMs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		for _, l := range termout.JoinWrap(strings.Split(header(p, rep.GCE.Asked), "  "), "  ", termout.Width) {
			fmt.Fprintln(w, l)
		}
		var rows bytes.Buffer
		tw := tabwriter.NewWriter(&rows, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  TIME\tAFTER\tPHASE\tSPAN\tDETAILS")
		for _, e := range p.Entries {
			// A phase that repeated (stockouts) is shown when it began;
			// its details say when it last happened.
			at, off := e.At, e.Offset
			if !e.First.IsZero() {
				at, off = e.First, e.First.Sub(p.Start())
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", at.UTC().Format(time.RFC3339), after(off), e.Phase, span(p.Timeline, e.Phase), details(e))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		// A row wider than the terminal goes on under its DETAILS.
		lines := strings.Split(strings.TrimSuffix(rows.String(), "\n"), "\n")
		cell := strings.Index(lines[0], "DETAILS")
		for _, l := range lines {
			for _, f := range termout.FitLine(strings.TrimRight(l, " "), cell, termout.Width) {
				fmt.Fprintln(w, f)
			}
		}
		for _, l := range chart(p, rep.Now) {
			fmt.Fprintln(w, l)
		}
	}
	if len(rep.PodVMs) > 0 && len(rep.WithoutEvents) > 0 {
		fmt.Fprintln(w)
	}
	for _, n := range rep.WithoutEvents {
		for _, l := range termout.Wrap(termout.Clean(fmt.Sprintf("%s/%s: no start-up Events: %s", n.Namespace, n.Pod, n.Reason)), "", "  ", termout.Width) {
			fmt.Fprintln(w, l)
		}
	}
	if len(rep.PodVMs) == 0 && len(rep.WithoutEvents) == 0 {
		fmt.Fprintf(w, "no start-up Events (the API server keeps Events for its --event-ttl, default %s)\n", human(DefaultEventTTL))
	}
	if u := rep.Unverified; u != nil {
		for _, l := range termout.Wrap(termout.Clean(unverifiedLine(*u)), "", "  ", termout.Width) {
			fmt.Fprintln(w, l)
		}
	}
	if rep.GCE.Error != "" {
		for _, l := range termout.Wrap(termout.Clean(fmt.Sprintf("GCE %s: %s", rep.GCE.Note, rep.GCE.Error)), "", "  ", termout.Width) {
			fmt.Fprintln(w, l)
		}
	}
	// An empty last cell leaves the padding before it: cut it.
	var trimmed strings.Builder
	for line := range strings.Lines(w.String()) {
		trimmed.WriteString(strings.TrimRight(line, " \n") + "\n")
	}
	// Each field that may come from an Event was cleaned as it was
	// formatted; the whole is cleaned again so that one added later
	// without it cannot reach the terminal raw.
	_, err := io.WriteString(out, termout.Lines(trimmed.String()))
	return err
}

func header(p podVM, gceAsked bool) string {
	f := []string{p.Namespace + "/" + p.Pod, p.PodVM, orDash(shape(p.Timeline)), orDash(p.ProvisioningModel), orDash(p.Zone)}
	if p.PricePerHour != nil {
		f = append(f, fmt.Sprintf("$%.4f/h", *p.PricePerHour))
	} else {
		f = append(f, "price unknown")
	}
	switch c := p.Cost; {
	case c == nil && p.PricePerHour != nil:
		f = append(f, "no VM, no cost")
	case c == nil:
		f = append(f, "cost unknown")
	case c.AtLeast:
		f = append(f, fmt.Sprintf("at least $%.4f", c.USD))
	case c.Ongoing:
		f = append(f, fmt.Sprintf("$%.4f so far", c.USD))
	default:
		f = append(f, fmt.Sprintf("$%.4f in all", c.USD))
	}
	f = append(f, "pod "+p.PodPhase)
	if gceAsked && p.VM != nil {
		_, created := p.Entry(podevent.PhaseCreated)
		switch {
		case p.VM.Exists:
			f = append(f, "GCE "+p.VM.Status)
		case created:
			f = append(f, "GCE gone")
		default:
			f = append(f, "GCE no VM")
		}
	}
	// Event fields are written by whoever may write Events: cleaned.
	return termout.Clean(strings.Join(f, "  "))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shape is the machine type and its GPUs: n1-standard-4 + 1×nvidia-tesla-t4.
func shape(t timeline.Timeline) string {
	s := t.MachineType
	if g := gpus(t.GPUCount, t.GPU); g != "" {
		s += " + " + g
	}
	return s
}

func gpus(count int, gpu string) string {
	if gpu == "" {
		return ""
	}
	return fmt.Sprintf("%d×%s", max(count, 1), gpu)
}

// span is the duration a phase ends, in the SPAN column.
func span(t timeline.Timeline, phase string) string {
	var names []string
	switch phase {
	case podevent.PhaseCreated:
		names = []string{timeline.Create}
	case podevent.PhaseBooted:
		names = []string{timeline.Boot}
	case podevent.PhaseReachable:
		names = []string{timeline.Agent, timeline.Total}
	case podevent.PhaseFailed:
		names = []string{timeline.Total}
	}
	var out []string
	for _, n := range names {
		if s, ok := t.Durations[n]; ok {
			out = append(out, n+" "+human(time.Duration(s*float64(time.Second))))
		}
	}
	return strings.Join(out, ", ")
}

// details are a phase's facts, in words: what the provider wrote for
// tools, not its message (but a failure's first line, which says what
// to do).
func details(e timeline.Entry) string {
	f := e.Facts
	var d []string
	add := func(s ...string) {
		for _, v := range s {
			if v != "" {
				d = append(d, v)
			}
		}
	}
	// Facts as timeline checked them: a price or count it did not
	// believe is not among them.
	price := func() string {
		p, ok := timeline.ParsePrice(f[podevent.PriceAnnotation])
		if !ok {
			return ""
		}
		return fmt.Sprintf("$%.4f/h", p)
	}
	count := func() int {
		n, _ := timeline.ParseGPUCount(f[podevent.GPUCountAnnotation])
		return n
	}
	switch e.Phase {
	case podevent.PhaseRequested:
		add(f[podevent.ZoneAnnotation], f[podevent.MachineTypeAnnotation], gpus(count(), f[podevent.GPUAnnotation]), f[podevent.ProvisioningModelAnnotation], price())
	case podevent.PhaseStockout:
		add(strings.ReplaceAll(f[podevent.ZonesAnnotation], ",", ", "))
		if e.Count > 1 {
			add(fmt.Sprintf("(%d stockouts, the last at %s)", e.Count, after(e.Offset)))
		}
	case podevent.PhaseQuota:
		add(f[podevent.QuotaMetricAnnotation])
		if r := f[podevent.RegionAnnotation]; r != "" {
			add("in " + r)
		}
		if z := f[podevent.ZoneAnnotation]; z != "" {
			add("(" + z + ")")
		}
	case podevent.PhaseCreated:
		add(f[podevent.IPAnnotation])
		if z := f[podevent.ZoneAnnotation]; z != "" {
			add("in " + z)
		}
	case podevent.PhaseBooted:
		var b []string
		if v := f[podevent.DriverAnnotation]; v != "" {
			b = append(b, "driver "+v)
		}
		if f[podevent.GPUCountAnnotation] != "" {
			n := count()
			b = append(b, fmt.Sprintf("%d GPU%s", n, map[bool]string{true: "", false: "s"}[n == 1]))
		}
		add(strings.Join(b, ", "))
	case podevent.PhaseFailed, podevent.PhaseLost:
		if class := f[podevent.FailureAnnotation] + f[podevent.CauseAnnotation]; class != "" {
			add(class + ":")
		}
		line, _, _ := strings.Cut(strings.TrimSpace(e.Message), "\n")
		if len(line) > maxDetail {
			line = line[:maxDetail-3] + "..."
		}
		add(line)
	}
	return termout.Clean(strings.Join(d, " "))
}

// human is a duration rounded for people: 0s, 41s, 1m44s, 2h5m.
func human(d time.Duration) string {
	if d < 0 {
		return "-" + human(-d)
	}
	if d >= time.Hour {
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return d.Round(time.Second).String()
}

// after is a phase's offset from the request: +41s (a clock behind the
// first phase's would show -1s).
func after(d time.Duration) string {
	if d < 0 {
		return human(d)
	}
	return "+" + human(d)
}

// chart draws a podVM's start as plan draws a modelled one: a bar per
// span between its phases (create, boot, agent), the span under way
// drawn up to now, the one a failure ended marked so.
func chart(p podVM, now time.Time) []string {
	steps := []struct{ span, from, to string }{
		{timeline.Create, podevent.PhaseRequested, podevent.PhaseCreated},
		{timeline.Boot, podevent.PhaseCreated, podevent.PhaseBooted},
		{timeline.Agent, podevent.PhaseBooted, podevent.PhaseReachable},
	}
	var c termout.Chart
	failed, hasFailed := p.Entry(podevent.PhaseFailed)
	for _, s := range steps {
		from, ok := p.Entry(s.from)
		if !ok {
			break
		}
		bar := termout.Bar{Label: s.span, Start: from.Offset}
		if to, ok := p.Entry(s.to); ok {
			bar.End = to.Offset
		} else if hasFailed && failed.Offset >= from.Offset {
			bar.End, bar.Note = failed.Offset, "failed"
		} else if p.State == timeline.StateStarting && p.PodPhase != "Deleted" {
			bar.End, bar.Ongoing, bar.Note = now.Sub(p.Start()), true, "under way"
		} else {
			break
		}
		c.Bars = append(c.Bars, bar)
	}
	if len(c.Bars) == 0 {
		return nil
	}
	lines, _ := c.Lines("  ", termout.Width)
	return append([]string{"  timeline (" + string(termout.Full) + " a span; " + string(termout.Ongoing) + " under way, up to now):"}, lines...)
}

// unverifiedLine says what was left out of the report, and why.
func unverifiedLine(u unverified) string {
	var parts []string
	if u.Count > 0 {
		parts = append(parts, fmt.Sprintf("%d start-up Event(s) left out: no valid signature from the adaptor (a tenant's, an edited one, or one written before the adaptor had its key), e.g. %s",
			u.Count, strings.Join(u.Samples, ", ")))
	}
	if u.KeyProblem != "" {
		parts = append(parts, "no Event could be verified: "+u.KeyProblem)
	}
	if u.Truncated {
		parts = append(parts, "the listing stopped at its bound; narrow it with -n NAMESPACE or a POD")
	}
	return strings.Join(parts, "; ")
}
