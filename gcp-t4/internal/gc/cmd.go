package gc

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/kubeconfig"
	"github.com/caa-gcp-t4/gcp-t4/internal/providerflags"
)

// Main is `gcp-t4 gc`: the provider's own flags (and env), plus what to
// do with orphans. It exits non-zero when an orphan is left undeleted, so
// a CronJob or a CI check notices.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	fs := flag.NewFlagSet("gcp-t4 gc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pf := providerflags.Register(fs)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file; empty uses the in-cluster service account, then $KUBECONFIG")
	grace := fs.Duration("grace", 10*time.Minute, "leave VMs younger than this alone")
	del := fs.Bool("delete", false, "delete the orphans (default: only list them)")
	interval := fs.Duration("interval", 0, "run every interval until stopped (the sidecar loop); 0 runs once")
	output := fs.String("o", "table", "output: table or json")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *output != "table" && *output != "json" {
		fmt.Fprintf(stderr, "gcp-t4 gc: -o %q: use table or json\n", *output)
		return 2
	}
	prov, err := pf.Provider(ctx, logger)
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 gc: %v\n", err)
		return 2
	}
	defer prov.Teardown()
	kube, err := kubeClient(*kubeconfig)
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 gc: %v\n", err)
		return 2
	}
	c := &Collector{VMs: prov, Pods: KubePods{Client: kube}, Grace: *grace, Skew: 2 * time.Minute, Delete: *del, Now: time.Now, Log: logger}
	if *interval <= 0 {
		return once(ctx, c, *output, stdout, stderr)
	}
	// The sidecar loop: a pass now, then one every interval after the last
	// ended, until stopped; a failed pass is reported and the next one runs.
	wait.UntilWithContext(ctx, func(ctx context.Context) { once(ctx, c, *output, stdout, stderr) }, *interval)
	return 0
}

func once(ctx context.Context, c *Collector, output string, stdout, stderr io.Writer) int {
	findings, err := c.Run(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 gc: %v\n", err)
		return 1
	}
	if err := Print(stdout, output, findings); err != nil {
		fmt.Fprintf(stderr, "gcp-t4 gc: %v\n", err)
		return 1
	}
	for _, f := range findings {
		if f.Verdict == Orphan || f.Verdict == DeleteErr {
			return 1
		}
	}
	return 0
}

// Print writes findings as a table or JSON.
func Print(w io.Writer, output string, findings []Finding) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(findings)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VM\tPOD\tCREATED\tVERDICT\tREASON")
	for _, f := range findings {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", f.VM.ID, f.VM.Pod, f.VM.Created.UTC().Format(time.RFC3339), f.Verdict, f.Reason)
	}
	return tw.Flush()
}

func kubeClient(path string) (kubernetes.Interface, error) {
	cfg, err := kubeconfig.Load(path, "", "gcp-t4-gc")
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}
