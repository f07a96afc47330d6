package status

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/caaconfig"
	"github.com/caa-gcp-t4/gcp-t4/internal/providerflags"
	"github.com/caa-gcp-t4/gcp-t4/internal/timeline"
)

// gceResult is whether GCE was asked, and what it said.
type gceResult struct {
	Asked bool `json:"asked"`
	// Note says why it was not asked, or what the answer was from.
	Note string `json:"note,omitempty"`
	// Error is why asking failed, when -gce was not given (given, it is
	// the command's error).
	Error string `json:"error,omitempty"`
	// vms by the namespace the VM's labels name, and its name: an Event
	// in another namespace that names the VM does not get its word.
	vms map[timeline.Key]timeline.VM
}

// askGCE lists this cluster's podVMs once (one aggregated list, as the
// reaper does) with the settings of the peer-pods-cm CAA reads, filled
// as `gcp-t4 gc` fills them (caaconfig.FromCluster), and the caller's
// Application Default Credentials. Not given -gce, it asks only where that ConfigMap (or the
// environment) names a project, and a failure is a note, not an error:
// the Events alone are the answer then.
func askGCE(ctx context.Context, cs kubernetes.Interface, mode autoBool, logger *slog.Logger) (gceResult, error) {
	if mode.set && !mode.on {
		return gceResult{Note: "not asked (-gce=false)"}, nil
	}
	fail := func(err error) (gceResult, error) {
		if mode.set {
			return gceResult{}, err
		}
		return gceResult{Note: "not asked: the attempt failed", Error: err.Error()}, nil
	}
	// The provider's ~35 flags are not status's: they are filled from
	// the environment and peer-pods-cm only, never the command line.
	fs := flag.NewFlagSet("gcp-t4 status: provider settings", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	pf := providerflags.Register(fs)
	if err := fs.Parse(nil); err != nil {
		return fail(err)
	}
	if err := pf.CheckEnv(os.LookupEnv); err != nil {
		return fail(err)
	}
	_, source, err := caaconfig.FromCluster(ctx, fs, cs, "", os.Getenv, func(w string) { logger.Warn(w) })
	if err != nil {
		return fail(fmt.Errorf("reading GCE settings from CAA's peer-pods-cm: %w", err))
	}
	if pf.Config().ProjectID == "" {
		if mode.set {
			return gceResult{}, fmt.Errorf("no GCP project: CAA's peer-pods-cm is not in this cluster and GCP_PROJECT_ID is not set")
		}
		return gceResult{Note: "not asked: no peer-pods-cm names a GCP project (pass -gce with GCP_PROJECT_ID set to ask anyway)"}, nil
	}
	prov, err := pf.Lister(ctx, logger)
	if err != nil {
		return fail(err)
	}
	defer func() { _ = prov.Teardown() }()
	list, err := prov.ListManagedDetail(ctx)
	if err != nil {
		return fail(err)
	}
	vms := map[timeline.Key]timeline.VM{}
	for _, vm := range list.VMs {
		vms[timeline.Key{Namespace: vm.Namespace, PodVM: vm.Name}] = timeline.VM{Exists: true, Status: vm.Status}
	}
	from := "the environment"
	if source != "" {
		from = source
	}
	return gceResult{Asked: true, Note: fmt.Sprintf("project %s, settings from %s", pf.Config().ProjectID, from), vms: vms}, nil
}
