// Command caa-api-check refuses an upstream CAA checkout whose provider API
// differs from the one the gcpt4 provider targets (our fork's declarations of
// it), listing each difference.
//
//	caa-api-check -fork src/cloud-providers -upstream UPSTREAM/src/cloud-providers
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/caa-gcp-t4/test/upstream/apicheck"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("caa-api-check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fork := fs.String("fork", "", "our fork's src/cloud-providers (the API gcpt4 targets)")
	upstream := fs.String("upstream", "", "the upstream checkout's src/cloud-providers")
	provider := fs.String("provider", "gcpt4", "the provider package directory inside -fork")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *fork == "" || *upstream == "" {
		fmt.Fprintln(stderr, "caa-api-check: -fork and -upstream are required (both a src/cloud-providers directory)")
		return 2
	}
	// The provider and its subpackages are what is being checked, not API.
	skip := func(rel string) bool { return rel == *provider || strings.HasPrefix(rel, *provider+"/") }
	want, err := apicheck.Extract(*fork, skip)
	if err != nil {
		fmt.Fprintf(stderr, "caa-api-check: reading our fork's API: %v\n", err)
		return 2
	}
	got, err := apicheck.Extract(*upstream, skip)
	if err != nil {
		fmt.Fprintf(stderr, "caa-api-check: reading upstream's API: %v\n", err)
		return 2
	}
	uses, err := apicheck.ScanUses(*fork, filepath.Join(*fork, *provider))
	if err != nil {
		fmt.Fprintf(stderr, "caa-api-check: reading what %s uses: %v\n", *provider, err)
		return 2
	}
	keys := want.Used(uses)
	if len(keys) == 0 {
		fmt.Fprintf(stderr, "caa-api-check: %s uses nothing of the provider API; is -fork the right directory?\n", *provider)
		return 2
	}
	diffs, additions := apicheck.Compare(keys, want, got)
	if len(diffs) > 0 {
		fmt.Fprintf(stderr, "refusing %s: its provider API differs from the one %s targets in %d of %d declarations:\n",
			*upstream, *provider, len(diffs), len(keys))
		for _, d := range diffs {
			fmt.Fprintf(stderr, "  %s\n", d)
		}
		fmt.Fprintf(stderr, "Port %s and our fork's declarations to this API first (docs/upstream.md, \"Keeping the drop-in contract when upstream's API moves\"), or use the upstream release the patches target.\n", *provider)
		return 1
	}
	fmt.Fprintf(stdout, "provider API matches: the %d declarations %s uses are identical upstream\n", len(keys), *provider)
	for _, a := range additions {
		fmt.Fprintf(stdout, "  note: upstream adds field %s (unused by %s; mirror it in the fork)\n", a, *provider)
	}
	return 0
}
