package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/caa-gcp-t4/gcp-t4/internal/prices"
	"github.com/caa-gcp-t4/gcp-t4/internal/startup"
	"github.com/caa-gcp-t4/gcp-t4/internal/termout"
)

// Output formats.
const (
	OutputTable   = "table"
	OutputJSON    = "json"
	OutputRequest = "request"
)

// Notes are what a plan says besides its rows. Plan notes are about this
// plan (the stand-ins it used, what it skipped, a namespace it assumed, a
// profile it chose that has no image); Every notes hold for every plan
// (no API called, the boot disk, profiles nobody asked for without an
// image). The table prints Every notes and the price table's sources only
// with All (plan -notes): repeated under every plan they hid the rows;
// JSON carries both.
type Notes struct {
	Plan, Every []string
	All         bool
}

// Render writes entries as a table, as JSON (with each insert request
// inlined, and the modelled starts), or as the exact insert requests alone.
// The table's starts are printed after it (renderStarts).
func Render(w io.Writer, format string, entries []Entry, notes Notes, tab *prices.Table, starts []GroupStart) error {
	switch format {
	case OutputTable:
		return renderTable(w, entries, notes, tab)
	case OutputJSON:
		return renderJSON(w, entries, append(slices.Clone(notes.Plan), notes.Every...), starts)
	case OutputRequest:
		for _, e := range entries {
			b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(e.Insert)
			if err != nil {
				return fmt.Errorf("encoding the insert request of %s %s: %w", e.Workload, e.Group, err)
			}
			if _, err := fmt.Fprintf(w, "%s\n", termout.JSON(b)); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("-o %q: use %s, %s or %s", format, OutputTable, OutputJSON, OutputRequest)
}

func money(e prices.Estimate, v float64) string {
	if !e.Known {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", v)
}

// renderTable prints, for each workload, a table of its groups' podVMs
// (shape, machine, accelerator, prices), then what the rows leave out:
// profile, zones, provisioning model, external IP and next-cheapest shape,
// once for the groups where they are the same, and the podVMs' labels,
// those every group shares once; then the total and the notes. Every line
// fits termout.Width, and every name from a manifest is cleaned.
func renderTable(w io.Writer, entries []Entry, notes Notes, tab *prices.Table) error {
	var b strings.Builder
	var total float64
	allKnown := true
	for i, ws := range byWorkload(entries) {
		if i > 0 {
			b.WriteString("\n")
		}
		writePodVMs(&b, ws)
		for _, e := range ws {
			if e.PerVM.Known {
				total += e.Total
			}
			allKnown = allKnown && e.PerVM.Known
		}
	}
	b.WriteString("\n")
	if allKnown {
		fmt.Fprintf(&b, "estimated total: $%.2f/h\n", total)
	} else {
		writeWrapped(&b, fmt.Sprintf("estimated total: $%.2f/h for the priced rows; n/a rows have no cited price", total), "", "  ")
	}
	for _, e := range entries {
		name := termout.Clean(e.Workload) + " " + termout.Clean(e.Group)
		for _, m := range e.PerVM.Missing {
			writeWrapped(&b, fmt.Sprintf("note: %s: no price for %s in the table", name, m), "", "  ")
		}
		for _, r := range e.Requirements {
			writeWrapped(&b, fmt.Sprintf("requires: %s (profile %s): %s", name, termout.Clean(e.Profile), termout.Clean(r)), "", "  ")
		}
		for _, warn := range e.Warnings {
			writeWrapped(&b, fmt.Sprintf("warning: %s %s", termout.Clean(e.Workload), termout.Clean(warn)), "", "  ")
		}
	}
	for _, n := range notes.Plan {
		writeWrapped(&b, "note: "+termout.Clean(n), "", "  ")
	}
	switch {
	case !notes.All && tab != nil:
		writeWrapped(&b, fmt.Sprintf("prices: %s list prices in %s as of %s, an estimate, not a quote (-notes: what they leave out, their sources and %d more notes)", tab.Region, tab.Currency, tab.AsOf, len(notes.Every)), "", "  ")
	case notes.All:
		for _, n := range notes.Every {
			writeWrapped(&b, "note: "+termout.Clean(n), "", "  ")
		}
		if tab != nil {
			writeWrapped(&b, fmt.Sprintf("prices: %s list prices in %s, as of %s; %s", tab.Region, tab.Currency, tab.AsOf, tab.Note), "", "  ")
			for _, s := range tab.Sources {
				writeWrapped(&b, fmt.Sprintf("[%s] %s (%s), %s", s.ID, s.Title, s.Ref, s.Date), "  ", "    ")
			}
		}
	}
	// Names from a manifest were cleaned as they were formatted; the
	// whole is cleaned again so that one added later without it cannot
	// reach the terminal raw.
	_, err := io.WriteString(w, termout.Lines(b.String()))
	return err
}

// byWorkload splits the entries into runs of one workload each, in order.
func byWorkload(entries []Entry) [][]Entry {
	var out [][]Entry
	for i, e := range entries {
		if i == 0 || e.Workload != entries[i-1].Workload {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], e)
	}
	return out
}

// writePodVMs is one workload: its name, a row per group, each group's
// other fields (once for the groups that share them), its labels.
func writePodVMs(b *strings.Builder, ws []Entry) {
	b.WriteString(termout.Clean(ws[0].Workload) + "\n")
	rows := [][]string{{"GROUP", "REPLICAS", "VCPU", "MEM(MiB)", "GPU", "MACHINE TYPE", "ACCELERATOR", "$/H EACH", "$/H ALL"}}
	var details [][][2]string
	byDetail := map[string][]string{}
	for _, e := range ws {
		group := termout.Clean(e.Group)
		accel := "-"
		if e.AcceleratorCount > 0 {
			accel = fmt.Sprintf("%d x %s", e.AcceleratorCount, e.Accelerator)
		}
		rows = append(rows, []string{group, fmt.Sprint(e.Replicas), fmt.Sprint(e.VCPUs), fmt.Sprint(e.MemoryMiB), fmt.Sprint(e.GPUs),
			termout.Clean(e.MachineType), accel, money(e.PerVM, e.PerVM.Total), money(e.PerVM, e.Total)})
		d := detail(e)
		k := fmt.Sprint(d)
		if _, ok := byDetail[k]; !ok {
			details = append(details, d)
		}
		byDetail[k] = append(byDetail[k], group)
	}
	writeTable(b, rows)
	for _, d := range details {
		b.WriteString("  " + strings.Join(byDetail[fmt.Sprint(d)], ", ") + ":\n")
		for _, l := range termout.Pairs(d, "    ", termout.Width) {
			b.WriteString(l + "\n")
		}
	}
	writeLabels(b, ws)
}

// detail is what a group's row leaves out, under the table's words, one
// field a line.
func detail(e Entry) [][2]string {
	zones := strings.Join(e.Zones, ", ")
	if e.ZonesDiscovered {
		zones += ", +auto"
	}
	alt := "- (named)"
	if a := e.Alternative; a != nil {
		alt = a.MachineType
		if a.AcceleratorCount > 0 {
			alt += fmt.Sprintf(" + %d x %s", a.AcceleratorCount, a.Accelerator)
		}
		alt += " (" + money(a.PerVM, a.PerVM.Total) + ")"
	} else if e.InstanceType == "" {
		alt = "-"
	}
	return [][2]string{
		{"PROFILE", termout.Clean(e.Profile)},
		{"ZONES (fallback order)", zones},
		{"MODEL", strings.Join(e.ProvisioningModels, "→")},
		{"EXTERNAL IP", e.ExternalIP},
		{"NEXT-CHEAPEST ($/H EACH)", alt},
	}
}

// writeLabels prints each podVM's labels, two spaces apart and wrapped:
// those every group of the workload has once, then each group's own.
func writeLabels(b *strings.Builder, ws []Entry) {
	shared := maps.Clone(ws[0].Labels)
	for _, e := range ws[1:] {
		maps.DeleteFunc(shared, func(k, v string) bool { return e.Labels[k] != v })
	}
	line := func(head string, labels map[string]string) {
		if len(labels) == 0 {
			return
		}
		b.WriteString(head + "\n")
		var fields []string
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			fields = append(fields, termout.Clean(k+"="+labels[k]))
		}
		fields[0] = "    " + fields[0]
		for _, l := range termout.JoinWrap(fields, "    ", termout.Width) {
			b.WriteString(l + "\n")
		}
	}
	if len(ws) == 1 {
		line("  labels:", shared)
		return
	}
	groups := make([]string, len(ws))
	for i, e := range ws {
		groups[i] = termout.Clean(e.Group)
	}
	line("  labels of "+strings.Join(groups, ", ")+":", shared)
	for i, e := range ws {
		own := maps.Clone(e.Labels)
		maps.DeleteFunc(own, func(k, _ string) bool { _, ok := shared[k]; return ok })
		line("  labels of "+groups[i]+":", own)
	}
}

func renderJSON(w io.Writer, entries []Entry, notes []string, starts []GroupStart) error {
	type jsonEntry struct {
		Entry
		Insert json.RawMessage `json:"insertRequest"`
	}
	out := struct {
		PodVMs []jsonEntry  `json:"podVMs"`
		Starts []GroupStart `json:"startups,omitempty"`
		Notes  []string     `json:"notes,omitempty"`
	}{Notes: notes, Starts: starts}
	for _, e := range entries {
		b, err := protojson.Marshal(e.Insert)
		if err != nil {
			return fmt.Errorf("encoding the insert request of %s %s: %w", e.Workload, e.Group, err)
		}
		out.PodVMs = append(out.PodVMs, jsonEntry{Entry: e, Insert: b})
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	_, err := w.Write(termout.JSON(b.Bytes()))
	return err
}

// renderStarts prints each group's start: a table of its phases, the
// figures' sources, the start as a chart with a column at each deadline,
// the deadlines with short verdicts, and below them, wrapped, what each
// one not met means and how to fix it; then the bytes through Cloud NAT.
// Groups whose starts are the same are printed once, named together.
// Every line fits termout.Width. It reports whether every deadline is
// met (one of unknown outcome is not counted as missed).
func renderStarts(w io.Writer, starts []GroupStart, cat *startup.Catalog) (bool, error) {
	var b strings.Builder
	var nat int64
	for _, grp := range sameStarts(starts) {
		gs := grp[0]
		names := make([]string, len(grp))
		for i, g := range grp {
			names[i] = termout.Clean(g.Group)
		}
		head := fmt.Sprintf("start-up: %s %s: each pod's podVM starts on its own, so the slowest pod sets the workload's time", termout.Clean(gs.Workload), strings.Join(names, ", "))
		b.WriteString("\n")
		writeWrapped(&b, head, "", "  ")
		writePhases(&b, gs, cat)
		writeChart(&b, gs)
		writeDeadlines(&b, gs)
		if c := gs.Cache; c != nil {
			writeWrapped(&b, cacheLine(c, gs.Start), "  ", "    ")
		}
		writeWrapped(&b, fmt.Sprintf("through Cloud NAT: %.1f GB per start of each pod (x%d)", float64(gs.Start.NATBytes)/1e9, gs.Replicas), "  ", "    ")
		for _, n := range gs.Notes {
			writeWrapped(&b, "note: "+termout.Clean(n), "  ", "    ")
		}
		for _, g := range grp {
			nat += g.Start.NATBytes * g.Replicas
		}
	}
	if len(starts) > 0 {
		b.WriteString("\n")
		writeWrapped(&b, fmt.Sprintf("through Cloud NAT in all: %.1f GB each time every pod starts (again after each preemption or host maintenance: a new podVM pulls and downloads again)", float64(nat)/1e9), "", "  ")
	}
	_, err := io.WriteString(w, termout.Lines(b.String()))
	return allMet(starts), err
}

// allMet says whether every deadline of every start is met; one whose
// outcome is unknown (a size not given) is not counted as missed.
func allMet(starts []GroupStart) bool {
	for _, gs := range starts {
		for _, c := range gs.Start.Checks {
			if !c.Met && !c.Unknown {
				return false
			}
		}
	}
	return true
}

// sameStarts groups the starts of one workload that would print the
// same, in the order they come.
func sameStarts(starts []GroupStart) [][]GroupStart {
	var out [][]GroupStart
	var keys []string
	for _, gs := range starts {
		k, err := json.Marshal(struct {
			W     string
			R     int64
			S     startup.Start
			C     *CacheStart
			N     []string
			Sizes map[string]SizeFrom
		}{gs.Workload, gs.Replicas, gs.Start, gs.Cache, gs.Notes, gs.Sizes})
		if i := slices.Index(keys, string(k)); err == nil && i >= 0 {
			out[i] = append(out[i], gs)
			continue
		}
		keys = append(keys, string(k))
		out = append(out, []GroupStart{gs})
	}
	return out
}

func writeWrapped(b *strings.Builder, text, first, rest string) {
	for _, l := range termout.Wrap(text, first, rest, termout.Width) {
		b.WriteString(l + "\n")
	}
}

// writeTable writes rows as tabwriter aligns them, each row that is wider
// than the width wrapped from its last cell.
func writeTable(b *strings.Builder, rows [][]string) {
	var buf strings.Builder
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, "  "+strings.Join(r, "\t"))
	}
	_ = tw.Flush() // a strings.Builder does not fail
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	// The last cell starts where the header's last word does.
	last := strings.LastIndex(lines[0], rows[0][len(rows[0])-1])
	for _, l := range lines {
		for _, f := range termout.FitLine(strings.TrimRight(l, " "), last, termout.Width) {
			b.WriteString(f + "\n")
		}
	}
}

// flagged says whether a start-up flag was given: the figure it sets is
// the user's.
func (gs GroupStart) flagged(flag string) bool { return gs.given[flag] }

// writePhases is the phase table: each phase's time, its figure, and
// where the figure came from (the user's flag, the catalogue's kind, or
// unknown); then each figure's sources.
func writePhases(b *strings.Builder, gs GroupStart, cat *startup.Catalog) {
	rows := [][]string{{"PHASE", "TIME", "FIGURE", "FROM"}}
	var srcs [][2]string
	var unknown []string
	for _, p := range gs.Start.Phases {
		took, fig := p.Took.String(), p.Figure
		var from string
		var cites []string
		switch {
		case p.Fixed != nil && gs.flagged(p.Flag):
			from = "flag --" + p.Flag
		case p.Fixed != nil:
			from = p.Kind + " (--" + p.Flag + ")"
			cites = append(cites, refOf(cat, p.Source))
		}
		if p.Size != "" {
			sz, ok := gs.Sizes[p.Size]
			sizeFlag := "--" + sizeFlag(cat, p.Size)
			switch {
			case p.Unknown:
				took, fig = "unknown", "not counted: give "+sizeFlag
				unknown = append(unknown, p.ID)
				if from == "" {
					from = "unknown (" + sizeFlag + ")"
				}
			case !ok:
				// Nothing to move (no model): nothing to cite.
			case from == "" && sz.Kind != "":
				from = "size: " + sz.Kind + " (" + sizeFlag + ")"
			case from == "":
				from = "size: " + sz.From
			}
			if ok && sz.Source != "" && !p.Unknown {
				cites = append(cites, p.Size+" size ("+orKind(sz.Kind, sz.From)+"): "+sz.Source)
			} else if ok && strings.HasPrefix(sz.From, "flag ") {
				cites = append(cites, p.Size+" size: "+sz.From)
			}
			if p.Bytes > 0 {
				for _, id := range strings.Split(p.Rate, ",") {
					for _, r := range cat.Rates {
						if r.ID != strings.TrimSpace(id) {
							continue
						}
						if gs.flagged(r.Flag) {
							cites = append(cites, r.ID+" rate: flag --"+r.Flag)
						} else {
							cites = append(cites, r.ID+" rate, "+r.Kind+" (--"+r.Flag+"): "+refOf(cat, r.Source))
						}
					}
				}
			}
		}
		rows = append(rows, []string{p.ID, took, fig, from})
		if len(cites) > 0 {
			srcs = append(srcs, [2]string{p.ID, strings.Join(cites, "; ")})
		}
	}
	total := gs.Start.Total.String()
	if len(unknown) > 0 {
		rows = append(rows, []string{"total", "at least " + total, "not counting " + strings.Join(unknown, ", "), ""})
	} else {
		rows = append(rows, []string{"total", total, "", ""})
	}
	writeTable(b, rows)
	b.WriteString("  sources (each flag replaces its figure):\n")
	for _, s := range srcs {
		writeWrapped(b, s[1], fmt.Sprintf("    %-8s ", s[0]), strings.Repeat(" ", 13))
	}
}

func orKind(kind, from string) string {
	if kind != "" {
		return kind
	}
	return from
}

// deadlineKey is the letter that names a deadline in the chart and the
// table.
func deadlineKey(i int) string { return string(rune('a' + i%26)) }

// phaseSpans are each phase's start and end in a modelled start.
func phaseSpans(st startup.Start) map[string][2]time.Duration {
	spans := map[string][2]time.Duration{}
	var at time.Duration
	for _, p := range st.Phases {
		spans[p.ID] = [2]time.Duration{at, at + p.Took.Duration}
		at += p.Took.Duration
	}
	return spans
}

// writeChart draws the start: a bar per phase, a column at the moment
// each deadline fires (counted from the start of the first phase it
// bounds).
func writeChart(b *strings.Builder, gs GroupStart) {
	spans := phaseSpans(gs.Start)
	var c termout.Chart
	for _, p := range gs.Start.Phases {
		s := spans[p.ID]
		c.Bars = append(c.Bars, termout.Bar{Label: p.ID, Start: s[0], End: s[1], Unknown: p.Unknown})
	}
	for i, ch := range gs.Start.Checks {
		if ch.Have.Duration > 0 {
			c.Deadlines = append(c.Deadlines, termout.Deadline{Key: deadlineKey(i), At: spans[ch.Deadline.From][0] + ch.Have.Duration})
		}
	}
	b.WriteString("  timeline (" + string(termout.Full) + " a phase; " + string(termout.Mark) + " a deadline, lettered as in the table below):\n")
	lines, beyond := c.Lines("  ", termout.Width)
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	if len(beyond) > 0 {
		var far []string
		for _, d := range beyond {
			far = append(far, d.Key+" at "+termout.Duration(d.At))
		}
		writeWrapped(b, "past the chart's end: "+strings.Join(far, ", "), "  ", "    ")
	}
}

// writeDeadlines is the deadline table, verdicts in a word, then where
// each value came from, the call each bounds, and for each not met its
// meaning and fix, wrapped.
func writeDeadlines(b *strings.Builder, gs GroupStart) {
	rows := [][]string{{"", "DEADLINE", "BOUNDS", "NEEDS", "HAS", "VERDICT"}}
	var setBy, calls []string
	var from []string
	byFrom := map[string][]string{}
	var explain []string
	var unknown []string
	for i, c := range gs.Start.Checks {
		k := deadlineKey(i)
		name := c.Owner + " " + c.Setting
		if c.Factor > 1 {
			name += fmt.Sprintf(" x%g", c.Factor)
		}
		bounds := c.Deadline.From
		if c.Deadline.To != c.Deadline.From {
			bounds += ".." + c.Deadline.To
		}
		need, have, verdict := c.Need.String(), c.Have.String(), "met"
		if c.Have.Duration == 0 {
			have = "none"
		}
		switch {
		case c.Unknown:
			need, verdict = "unknown", "unknown"
			unknown = append(unknown, k)
		case !c.Met:
			verdict = "NOT MET"
			kind := "fatal: the start fails"
			if c.Retried {
				kind = "retried: the step is tried again"
			}
			explain = append(explain, fmt.Sprintf("%s  %s (%s) needs %s, has %s (%s); %s. Fix: %s. When it fires: %s.",
				k, name, c.Call, c.Need, c.Have, c.From, kind, c.Fix, c.OnExpiry))
		}
		rows = append(rows, []string{k, name, bounds, need, have, verdict})
		if _, ok := byFrom[c.From]; !ok {
			from = append(from, c.From)
		}
		byFrom[c.From] = append(byFrom[c.From], k)
		calls = append(calls, k+" "+c.Call)
	}
	if len(gs.Start.Checks) == 0 {
		return
	}
	writeTable(b, rows)
	for _, f := range from {
		setBy = append(setBy, strings.Join(byFrom[f], ", ")+" "+termout.Clean(f))
	}
	writeWrapped(b, "values from: "+strings.Join(setBy, "; "), "  ", "    ")
	writeWrapped(b, "calls bounded: "+strings.Join(calls, "; "), "  ", "    ")
	if len(unknown) > 0 {
		writeWrapped(b, fmt.Sprintf("unknown: %s bound a phase whose size is not known; the sources above name its flag", strings.Join(unknown, ", ")), "  ", "    ")
	}
	if len(explain) > 0 {
		b.WriteString("  NOT MET:\n")
		for _, e := range explain {
			writeWrapped(b, e, "  ", "     ")
		}
	}
}

// cacheLine is the start with the cache against its goal: when over, by
// how much and the phases that make up the gap, each with its figure.
func cacheLine(c *CacheStart, st startup.Start) string {
	line := fmt.Sprintf("with the cache (--cache %s): %s, %s without it; ", termout.Clean(c.Layout), c.Total, c.WithoutCache)
	if c.Met {
		return line + fmt.Sprintf("within the %s goal (--cache-goal)", c.Goal)
	}
	var causes []string
	for _, id := range c.Causes {
		for _, p := range st.Phases {
			if p.ID == id {
				causes = append(causes, fmt.Sprintf("%s %s, %s", p.ID, p.Took, p.Figure))
			}
		}
	}
	return line + fmt.Sprintf("%s over the %s goal (--cache-goal), made up by the longest phases: %s", c.Over, c.Goal, strings.Join(causes, "; "))
}
