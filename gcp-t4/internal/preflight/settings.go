package preflight

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/caaconfig"
)

// defaultNamespace is where every install path puts CAA.
const defaultNamespace = "confidential-containers-system"

// fromCluster sets the provider flags that neither the command line nor
// the environment gave from the peer-pods-cm the installed CAA DaemonSet
// reads (caaconfig, as gcp-t4 gc does), and says on stderr which it set.
// With -caa-namespace not given it finds CAA wherever it is installed and
// points the cluster checks there. A cluster it cannot read is a warning
// among the results (the checks that need the cluster say more); a value
// in peer-pods-cm the provider refuses is an error (exit 2), as the same
// value on the command line is.
func fromCluster(ctx context.Context, fs *flag.FlagSet, kube kubernetes.Interface, namespace *string, daemonSet string, stderr io.Writer) ([]Result, int) {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "caa-namespace" })
	look := *namespace
	if !given {
		look = ""
	}
	in, err := caaconfig.Read(ctx, kube, look, daemonSet)
	if err != nil {
		return []Result{warn("installed settings", "give the settings as flags (-gcp-project-id, -zone, -image-name, -network …) or env vars; docs/provider.md",
			"not read from the cluster: %v", err)}, 0
	}
	for _, w := range in.Ignored {
		fmt.Fprintf(stderr, "gcp-t4 preflight: %s\n", w)
	}
	if in.Namespace != "" && !given {
		*namespace = in.Namespace
	}
	filled, err := in.Fill(fs, os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 preflight: %v (the provider refuses it at start too: correct it with gcp-t4 install --set KEY=VALUE, or give the flag to check another value)\n", err)
		return nil, 2
	}
	if len(filled) > 0 {
		fmt.Fprintf(stderr, "gcp-t4 preflight: settings from %s, which CAA reads: %s (a flag or env var overrides each)\n", in.Source(), strings.Join(filled, ", "))
	}
	return nil, 0
}

// required are the settings every configuration needs, with a stand-in
// that lets Validate go on to the next problem, so one run names every
// missing setting instead of one per run.
var required = []struct {
	missing func(*gcpt4.Config) bool
	standIn func(*gcpt4.Config)
}{
	{func(c *gcpt4.Config) bool { return c.ProjectID == "" }, func(c *gcpt4.Config) { c.ProjectID = "project-id" }},
	{func(c *gcpt4.Config) bool { return c.Zone == "" }, func(c *gcpt4.Config) { c.Zone = "us-central1-a" }},
	{func(c *gcpt4.Config) bool { return c.InstanceTemplate == "" && c.ImageName == "" }, func(c *gcpt4.Config) { c.ImageName = "podvm-t4" }},
	{func(c *gcpt4.Config) bool { return c.InstanceTemplate == "" && c.Network == "" }, func(c *gcpt4.Config) { c.Network = "global/networks/default" }},
}

// checkConfig validates the settings as the provider does at start. Each
// missing required setting is its own failure, in the provider's words;
// after those, the first value it refuses.
func checkConfig(cfg gcpt4.Config, withCluster bool) []Result {
	const check = "config"
	fix := "set the variable the message names, or its flag (docs/provider.md)"
	if !withCluster {
		fix += "; with -kubeconfig of a cluster CAA is installed in, preflight reads them from its peer-pods-cm"
	}
	var rs []Result
	probe, last := cfg, ""
	for range len(required) + 1 {
		err := probe.Validate()
		if err == nil || err.Error() == last {
			// Valid, or a refused value the stand-ins do not touch.
			break
		}
		last = err.Error()
		rs = append(rs, fail(check, fix, "%v", err))
		filled := false
		for _, r := range required {
			if r.missing(&probe) {
				r.standIn(&probe)
				filled = true
				break
			}
		}
		if !filled {
			break // a refused value: the provider names one at a time
		}
	}
	if len(rs) > 0 {
		return rs
	}
	return []Result{pass(check, "provider settings are valid (project %s, zones %s)", cfg.ProjectID, strings.Join(cfg.Zones(), ","))}
}
