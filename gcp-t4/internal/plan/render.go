package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/caa-gcp-t4/gcp-t4/internal/prices"
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
			if _, err := fmt.Fprintf(w, "%s\n", b); err != nil {
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

func renderTable(w io.Writer, entries []Entry, notes Notes, tab *prices.Table) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tGROUP\tREPLICAS\tVCPU\tMEM(MiB)\tGPU\tPROFILE\tMACHINE TYPE\tACCELERATOR\tZONES (fallback order)\tMODEL\tEXTERNAL IP\t$/H EACH\t$/H ALL\tNEXT-CHEAPEST ($/H EACH)")
	var total float64
	allKnown := true
	for _, e := range entries {
		accel := "-"
		if e.AcceleratorCount > 0 {
			accel = fmt.Sprintf("%d x %s", e.AcceleratorCount, e.Accelerator)
		}
		zones := strings.Join(e.Zones, ",")
		if e.ZonesDiscovered {
			zones += ",+auto"
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
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			e.Workload, e.Group, e.Replicas, e.VCPUs, e.MemoryMiB, e.GPUs, e.Profile, e.MachineType, accel,
			zones, strings.Join(e.ProvisioningModels, "→"), e.ExternalIP, money(e.PerVM, e.PerVM.Total), money(e.PerVM, e.Total), alt)
		if e.PerVM.Known {
			total += e.Total
		}
		allKnown = allKnown && e.PerVM.Known
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if allKnown {
		fmt.Fprintf(w, "\nestimated total: $%.2f/h\n", total)
	} else {
		fmt.Fprintf(w, "\nestimated total: $%.2f/h for the priced rows; n/a rows have no cited price\n", total)
	}
	for _, e := range entries {
		for _, m := range e.PerVM.Missing {
			fmt.Fprintf(w, "note: %s %s: no price for %s in the table\n", e.Workload, e.Group, m)
		}
		for _, r := range e.Requirements {
			fmt.Fprintf(w, "requires: %s %s (profile %s): %s\n", e.Workload, e.Group, e.Profile, r)
		}
		for _, warn := range e.Warnings {
			fmt.Fprintf(w, "warning: %s %s\n", e.Workload, warn)
		}
		keys := make([]string, 0, len(e.Labels))
		for k := range e.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var kv []string
		for _, k := range keys {
			kv = append(kv, k+"="+e.Labels[k])
		}
		fmt.Fprintf(w, "labels: %s %s: %s\n", e.Workload, e.Group, strings.Join(kv, " "))
	}
	for _, n := range notes.Plan {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if !notes.All {
		if tab != nil {
			fmt.Fprintf(w, "prices: %s list prices in %s as of %s, an estimate, not a quote (-notes: what they leave out, their sources and %d more notes)\n", tab.Region, tab.Currency, tab.AsOf, len(notes.Every))
		}
		return nil
	}
	for _, n := range notes.Every {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if tab != nil {
		fmt.Fprintf(w, "prices: %s list prices in %s, as of %s; %s\n", tab.Region, tab.Currency, tab.AsOf, tab.Note)
		for _, s := range tab.Sources {
			fmt.Fprintf(w, "  [%s] %s (%s), %s\n", s.ID, s.Title, s.Ref, s.Date)
		}
	}
	return nil
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
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
