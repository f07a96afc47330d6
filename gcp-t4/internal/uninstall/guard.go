package uninstall

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/managed"

	"github.com/caa-gcp-t4/gcp-t4/internal/caaconfig"
	"github.com/caa-gcp-t4/gcp-t4/internal/install"
	"github.com/caa-gcp-t4/gcp-t4/internal/peerpod"
	"github.com/caa-gcp-t4/gcp-t4/internal/providerflags"
)

// guardOptions is the uninstall guard: uninstalling CAA and the
// kata-remote RuntimeClass under live peer pods, or with this cluster's
// podVMs still in the project, leaves VMs billing that nothing will ever
// delete.
type guardOptions struct {
	deletePodVMs    bool
	force           bool
	credentialsFile string
}

func (g *guardOptions) register(fs *flag.FlagSet) {
	fs.BoolVar(&g.deletePodVMs, "delete-podvms", false, "delete this cluster's podVMs (their pods must be gone) and wait for them before uninstalling")
	fs.BoolVar(&g.force, "force", false, "uninstall even with kata-remote pods or podVMs left (they keep billing; nothing collects them)")
	fs.StringVar(&g.credentialsFile, "gcp-credentials-file", "", "service account key for listing and deleting podVMs; default: your Application Default Credentials")
}

// errGuard marks a refusal: nothing was deleted.
var errGuard = errors.New("refusing to uninstall; nothing was deleted")

// check runs before uninstall deletes anything. dryRun only reports.
func (g guardOptions) check(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, ns string, dryRun bool, stdout io.Writer) error {
	pods, err := liveKataPods(ctx, cs)
	if err != nil {
		return err
	}
	vms, prov, err := g.podVMs(ctx, cs, ns)
	if prov != nil {
		defer prov.Teardown()
	}
	if err != nil {
		if g.force {
			fmt.Fprintf(stdout, "warning: --force: could not list podVMs (%v); any left keep billing\n", err)
			return nil
		}
		return fmt.Errorf("%w: cannot list this cluster's podVMs to check none is left (%v); fix the credentials (--gcp-credentials-file, or gcloud auth application-default login), or pass --force", errGuard, err)
	}
	var ours, unidentified []managed.VM
	for _, vm := range vms {
		if vm.Unidentified() {
			unidentified = append(unidentified, vm)
		} else {
			ours = append(ours, vm)
		}
	}
	for _, vm := range unidentified {
		fmt.Fprintf(stdout, "note: podVM %s has no cluster label (an older install's, or another cluster's): not counted; check it by hand\n", vm.ID)
	}
	list := func() string {
		var lines []string
		for _, p := range pods {
			lines = append(lines, "  pod "+p)
		}
		for _, vm := range ours {
			lines = append(lines, fmt.Sprintf("  podVM %s (pod %s/%s, node %s)", vm.ID, vm.Namespace, vm.Pod, vm.Node))
		}
		return strings.Join(lines, "\n")
	}
	switch {
	case len(pods) == 0 && len(ours) == 0:
		return releaseAll(ctx, dyn, dryRun, stdout)
	case g.force:
		fmt.Fprintf(stdout, "warning: --force: uninstalling with these left; the podVMs keep billing and nothing will collect them:\n%s\n", list())
		return nil
	case len(pods) > 0:
		return fmt.Errorf("%w: %d kata-remote pod(s) are running and %d podVM(s) of this cluster exist:\n%s\ndelete the pods first (their VMs go with them), then uninstall; --force uninstalls anyway", errGuard, len(pods), len(ours), list())
	case !g.deletePodVMs:
		return fmt.Errorf("%w: %d podVM(s) of this cluster are left with no pod using them:\n%s\nrerun with --delete-podvms to delete them and wait, or --force to leave them billing", errGuard, len(ours), list())
	case dryRun:
		fmt.Fprintf(stdout, "would delete %d podVM(s) of this cluster and wait:\n%s\n", len(ours), list())
		return nil
	}
	for _, vm := range ours {
		if err := prov.DeleteInstance(ctx, vm.ID); err != nil {
			return fmt.Errorf("deleting podVM %s (nothing uninstalled): %w", vm.ID, err)
		}
		fmt.Fprintf(stdout, "deleted podVM %s\n", vm.ID)
	}
	// Each delete waited for GCE's operation; the list must now be empty.
	left, err := prov.ListManaged(ctx)
	if err != nil {
		return fmt.Errorf("listing podVMs after deleting them (nothing uninstalled): %w", err)
	}
	for _, vm := range left {
		if !vm.Unidentified() {
			return fmt.Errorf("podVM %s is still listed after its delete finished (nothing uninstalled); rerun", vm.ID)
		}
	}
	return releaseAll(ctx, dyn, false, stdout)
}

// releaseAll removes the finalizer of every gcp-t4 PeerPod once no pod and
// no podVM is left: otherwise deleting the PeerPod CRD would wait on them.
func releaseAll(ctx context.Context, dyn dynamic.Interface, dryRun bool, stdout io.Writer) error {
	c := peerpod.Client{Dynamic: dyn}
	pps, err := c.List(ctx)
	if errors.Is(err, peerpod.ErrNoCRD) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, pp := range pps {
		if !pp.Finalized || pp.CloudProvider != gcpt4.ProviderName {
			continue
		}
		if dryRun {
			fmt.Fprintf(stdout, "would release PeerPod %s/%s (its podVM is gone)\n", pp.Namespace, pp.Name)
			continue
		}
		if err := c.Release(ctx, pp.Namespace, pp.Name); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "released PeerPod %s/%s (its podVM is gone)\n", pp.Namespace, pp.Name)
	}
	return nil
}

// liveKataPods are the pods of the kata-remote RuntimeClass that have not
// finished, as namespace/name (install.KataPods, which install's roll
// check shares; names cleaned for the terminal).
func liveKataPods(ctx context.Context, cs kubernetes.Interface) ([]string, error) {
	pods, err := install.KataPods(ctx, cs)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errGuard, err)
	}
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.String())
	}
	return out, nil
}

// podVMs lists this cluster's podVMs (and the unidentified ones) with the
// installed configuration (config), completed by this process's
// environment.
func (g guardOptions) podVMs(ctx context.Context, cs kubernetes.Interface, ns string) ([]managed.VM, *gcpt4.Provider, error) {
	cfg, err := g.config(ctx, cs, ns, os.LookupEnv)
	if err != nil {
		return nil, nil, err
	}
	p, err := gcpt4.NewProvider(ctx, providerflags.ForListing(cfg), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("the installed %s: %w", install.ConfigMapName, err)
	}
	vms, err := p.ListManaged(ctx)
	return vms, p, err
}

// config is the provider configuration CAA in ns runs with, read as every
// command reads it (caaconfig: the peer-pods-cm its DaemonSet names, every
// key of the provider's table); env gives only what the ConfigMap leaves
// to the default (an endpoint, credentials: how this machine reaches
// GCE), so the podVMs counted are those of CAA's project and zones. The
// cluster's ID is its kube-system UID, whatever the ConfigMap says (the
// podVMs to count are this cluster's), and --gcp-credentials-file
// replaces the credentials.
func (g guardOptions) config(ctx context.Context, cs kubernetes.Interface, ns string, env func(string) (string, bool)) (gcpt4.Config, error) {
	in, err := caaconfig.InNamespace(ctx, cs, ns)
	if err != nil {
		return gcpt4.Config{}, err
	}
	if len(in.Missing) > 0 {
		return gcpt4.Config{}, fmt.Errorf("ConfigMap %s/%s, which holds the podVMs' project, does not exist", ns, in.Missing[0])
	}
	cfg, err := in.ConfigWith(env)
	if err != nil {
		return gcpt4.Config{}, err
	}
	if cfg.ClusterID, err = caaconfig.ClusterID(ctx, cs); err != nil {
		return gcpt4.Config{}, err
	}
	if g.credentialsFile != "" {
		key, err := os.ReadFile(g.credentialsFile)
		if err != nil {
			return gcpt4.Config{}, fmt.Errorf("--gcp-credentials-file: %w", err)
		}
		cfg.Credentials = string(key)
	}
	return cfg, nil
}
