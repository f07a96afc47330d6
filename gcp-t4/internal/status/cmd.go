// Package status is `gcp-t4 status`: how each peer pod's podVM started,
// read back from the start-up Events the gcp-t4 provider records on the
// pod (internal/timeline), and, when GCE can be asked, whether the podVM
// still exists.
package status

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/caaconfig"
	"github.com/caa-gcp-t4/gcp-t4/internal/kubeconfig"
	"github.com/caa-gcp-t4/gcp-t4/internal/termout"
)

// Usage is `gcp-t4 status -h`.
const Usage = `usage: gcp-t4 status [-kubeconfig FILE] [-n NAMESPACE | -A] [-o table|json] [-gce[=false]] [POD]

Shows how each peer pod's podVM started, from the Events the gcp-t4 provider records
on the pod: each phase with its time (requested, stockout, quota, created, booted,
reachable, failed), the time between phases, the zones that had no capacity, and the
podVM's machine type, GPU, provisioning model, zone, price per hour and cost so far.

flags:
  -kubeconfig FILE  kubeconfig; empty uses the in-cluster service account, then $KUBECONFIG
  -n NAMESPACE      the namespace (default: the kubeconfig context's)
  -A                every namespace
  -o table|json     output (default table)
  -gce              also ask GCE whether each podVM still exists, with the settings of the
                    peer-pods-cm CAA reads and your Application Default Credentials; on
                    by default when that ConfigMap names a project, -gce=false turns it off

The API server keeps Events for its --event-ttl (default 1h): a pod whose podVM started
earlier has none left. Exit status 1 when POD does not exist or a read fails, 2 on a
usage or kubeconfig error.
`

// Main is `gcp-t4 status`.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	return run(ctx, args, stdout, stderr, logger, time.Now)
}

// options are the parsed command line.
type options struct {
	kubeconfig string
	namespace  string
	all        bool
	output     string
	gce        autoBool
	pod        string
}

// autoBool is a boolean flag that also knows whether it was given: -gce
// is on by default only where GCE's settings are found.
type autoBool struct{ set, on bool }

func (b *autoBool) String() string {
	if b == nil || !b.set {
		return "auto"
	}
	return strconv.FormatBool(b.on)
}

func (b *autoBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	b.set, b.on = true, v
	return nil
}

func (b *autoBool) IsBoolFlag() bool { return true }

// parse reads flags before and after POD (flag stops at the first
// argument that is not a flag; `status POD -n NS` is as natural as
// `status -n NS POD`).
func parse(args []string, stderr io.Writer) (options, int, bool) {
	var o options
	fs := flag.NewFlagSet("gcp-t4 status", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "")
	fs.StringVar(&o.namespace, "n", "", "")
	fs.BoolVar(&o.all, "A", false, "")
	fs.StringVar(&o.output, "o", "table", "")
	fs.Var(&o.gce, "gce", "")
	var pods []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return o, 0, false
			}
			fmt.Fprintf(stderr, "gcp-t4 status: %v\n%s", err, Usage)
			return o, 2, false
		}
		if fs.NArg() == 0 {
			break
		}
		pods = append(pods, fs.Arg(0))
		args = fs.Args()[1:]
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var problem string
	switch {
	case len(pods) > 1:
		problem = fmt.Sprintf("one POD at most, got %d (%v)", len(pods), pods)
	case o.output != "table" && o.output != "json":
		problem = fmt.Sprintf("-o %q: use table or json", o.output)
	case o.all && given["n"]:
		problem = "-A and -n exclude each other"
	case o.all && len(pods) == 1:
		problem = "-A lists every namespace; name a POD with -n NAMESPACE instead"
	}
	if problem != "" {
		fmt.Fprintf(stderr, "gcp-t4 status: %s\n%s", problem, Usage)
		return o, 2, false
	}
	if len(pods) == 1 {
		o.pod = pods[0]
	}
	return o, 0, true
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger, now func() time.Time) int {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fmt.Fprint(stdout, Usage)
			return 0
		}
	}
	o, code, ok := parse(args, stderr)
	if !ok {
		return code
	}
	clients, err := caaconfig.Connect(o.kubeconfig, "", "gcp-t4-status")
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 status: %v\n", err)
		return 2
	}
	cs := clients.Kube
	if !o.all && o.namespace == "" {
		if o.namespace, err = kubeconfig.Namespace(o.kubeconfig, ""); err != nil {
			fmt.Fprintf(stderr, "gcp-t4 status: %v\n", err)
			return 2
		}
	}
	st, err := gather(ctx, cs, o)
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 status: %v\n", err)
		return 1
	}
	gce, err := askGCE(ctx, cs, o.gce, logger)
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 status: -gce: %v\n", err)
		return 1
	}
	rep := st.report(now(), gce)
	for _, why := range rep.ignored {
		logger.Warn("gcp-t4 status: not believed", "what", termout.Clean(why))
	}
	if o.output == "json" {
		err = printJSON(stdout, rep)
	} else {
		err = printTable(stdout, rep)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 status: %v\n", err)
		return 1
	}
	if o.pod != "" && st.missing {
		fmt.Fprintf(stderr, "gcp-t4 status: pod %s/%s does not exist\n", o.namespace, o.pod)
		return 1
	}
	return 0
}
