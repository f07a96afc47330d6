// Package stdflags is the common command-line layout for the podVM's
// binaries (gpu-init, podvm-notice, podvm-cache-mirror): they are inside
// the trust boundary and link the standard library only, so they cannot
// use internal/cli; this package imports nothing else either, and
// gcp-t4/cmd's TestPodVMBinariesLinkStandardLibraryOnly holds both to it.
package stdflags

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// Parse parses args as every command of ours does (internal/cli's Parse
// and NoArgs, for the podVM's binaries, which link the standard library,
// their own package and this one only): -h prints the usage on stdout and exits 0; a flag
// error or an argument prints "NAME: problem" and the usage on stderr and
// exits 2. The usage is the common layout: "usage: NAME [flags]", what
// the command does, then "flags:". ok is false when the caller must
// return code now.
func Parse(fs *flag.FlagSet, args []string, about string, stdout, stderr io.Writer) (code int, ok bool) {
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "usage: %s [flags]\n\n%s\n\nflags:\n", fs.Name(), about)
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
	}
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		usage(stdout)
		return 0, false
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v (the flags it takes are below)\n", fs.Name(), err)
		usage(stderr)
		return 2, false
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "%s: unexpected argument %q: it takes flags only (below)\n", fs.Name(), fs.Arg(0))
		usage(stderr)
		return 2, false
	}
	return 0, true
}
