package providerflags

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/caa-gcp-t4/gcp-t4/internal/termout"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// Help is a command's -h. Go's default usage lists every flag with two
// lines each, alphabetically: a command that registers the provider's ~35
// settings buries its own few flags among them, and lists settings it never
// reads (gc showed -use-public-ip, "Refused: …"). Help lists the command's
// own flags in full and the provider's settings either as names (a command
// that passes them all to the provider) or, with Uses, only those the
// command reads, in full with their env var.
type Help struct {
	// Synopsis follows "usage: ", e.g. "gcp-t4 gc [flags]"; empty is the
	// flag set's name and [flags].
	Synopsis string
	// About says what the command does, one paragraph per string.
	About []string
	// Uses names the provider flags the command reads (without the dash);
	// empty means all of them.
	Uses []string
	// Source says where a provider setting comes from, for the heading;
	// empty is "a flag, else its env var".
	Source string
	// Hide names own flags that are accepted but do nothing the user
	// would ask for here, so not listed.
	Hide []string
	// Commands are the command's subcommands, name and summary, listed
	// under "commands:" after About (plan's serve).
	Commands [][2]string
	// Groups lists own flags by name under a heading of their own, as
	// names only (plan's start-up figures), after the other own flags.
	Groups []FlagGroup
}

// FlagGroup is a heading and the flags listed under it by name.
type FlagGroup struct {
	Heading string
	Flags   []string
}

// Usage is fs.Usage for h.
func (h Help) Usage(fs *flag.FlagSet) func() {
	return func() { h.Write(fs.Output(), fs) }
}

// Write prints h for the flags registered on fs.
func (h Help) Write(w io.Writer, fs *flag.FlagSet) {
	provider := map[string]setting.Key{}
	for _, k := range gcpt4.Keys() {
		provider[k.Flag] = k
	}
	grouped := map[string]bool{}
	for _, g := range h.Groups {
		for _, f := range g.Flags {
			grouped[f] = true
		}
	}
	syn := h.Synopsis
	if syn == "" {
		syn = fs.Name() + " [flags]"
	}
	fmt.Fprintf(w, "usage: %s\n", syn)
	for _, p := range h.About {
		fmt.Fprintf(w, "\n%s\n", strings.Join(termout.Wrap(p, "", "", 100), "\n"))
	}
	if len(h.Commands) > 0 {
		fmt.Fprint(w, "\ncommands:\n")
		for _, c := range h.Commands {
			fmt.Fprintf(w, "  %-12s %s\n", c[0], c[1])
		}
	}
	own := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	own.SetOutput(w)
	var all []string
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := provider[f.Name]; ok {
			all = append(all, "-"+f.Name)
			return
		}
		if !grouped[f.Name] && !slices.Contains(h.Hide, f.Name) {
			copyFlag(own, f, f.Usage, f.DefValue)
		}
	})
	fmt.Fprintf(w, "\nflags:\n")
	own.PrintDefaults()
	for _, g := range h.Groups {
		var names []string
		for _, f := range g.Flags {
			if fs.Lookup(f) != nil {
				names = append(names, "-"+f)
			}
		}
		fmt.Fprintf(w, "\n%s:\n%s\n", g.Heading, strings.Join(termout.Wrap(strings.Join(names, " "), "  ", "  ", 100), "\n"))
	}
	if len(all) == 0 {
		return
	}
	source := "a flag, else its env var"
	if h.Source != "" {
		source = h.Source
	}
	if len(h.Uses) == 0 {
		fmt.Fprintf(w, "\nprovider settings, as CAA reads them (%s; docs/provider.md says what each does):\n%s\n", source, strings.Join(termout.Wrap(strings.Join(all, " "), "  ", "  ", 100), "\n"))
		return
	}
	used := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	used.SetOutput(w)
	for _, name := range h.Uses {
		f, k := fs.Lookup(name), provider[name]
		if f == nil {
			continue
		}
		// The hard-coded default, not the env-derived one: GCP_CREDENTIALS
		// holds a key, which help must not print.
		copyFlag(used, f, k.Env+": "+f.Usage, k.Default)
	}
	fmt.Fprintf(w, "\nprovider settings it reads (%s):\n", source)
	used.PrintDefaults()
	fmt.Fprintf(w, "\n%s\n", strings.Join(termout.Wrap("The provider's other settings (zone, image, network, …) are read the same way and checked as CAA checks them at start, since the provider will not start without them; this command uses none of them.", "", "", 100), "\n"))
}

// copyFlag registers f's value on to under f's name with the given usage
// and default, for printing only.
func copyFlag(to *flag.FlagSet, f *flag.Flag, usage, def string) {
	to.Var(f.Value, f.Name, usage)
	to.Lookup(f.Name).DefValue = def
}
