// Package uninstall is `gcp-t4 uninstall`: it removes exactly what `gcp-t4
// install` created (its inventory, else the objects carrying its part-of
// label), after the guard (guard.go) has made sure no peer pod runs and
// no podVM of this cluster is left to bill, and after the remediation
// sidecar has restored each node (nodes.go). What install adopted is
// released, not deleted; the namespace goes only when nothing else lives
// in it. It reads the installation with install's own reader
// (install.ReadLive, install.Cluster) and the installed provider settings
// with caaconfig, as every command does.
package uninstall

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/cli"
	"github.com/caa-gcp-t4/gcp-t4/internal/install"
)

// options are `gcp-t4 uninstall`'s flags.
type options struct {
	cluster   install.ClusterFlags
	namespace string
	dryRun    bool
	timeout   time.Duration
	guard     guardOptions
}

// Main is `gcp-t4 uninstall`. Like install, it talks to a person at a
// terminal: what it deletes and keeps on stdout, the error on stderr.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, _ *slog.Logger) int {
	o := &options{}
	fs := cli.NewFlagSet("gcp-t4 uninstall", cli.Usage{
		Synopsis: []string{"gcp-t4 uninstall [flags]"},
		About: []string{"Removes exactly what gcp-t4 install created, as its inventory names it: the remediation sidecar " +
			"first, so each node gets its containerd configuration back, then the rest in reverse apply order, the " +
			"namespace last and only when nothing else lives in it. While kata-remote pods or podVMs are left it " +
			"refuses (-delete-podvms deletes the podVMs of pods already gone; -force goes on). docs/install.md"},
	})
	o.cluster.Register(fs)
	fs.StringVar(&o.namespace, "namespace", "", "namespace CAA was installed in (default: found from the inventory)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "list what would be deleted; delete nothing")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long to wait for the objects to be gone")
	o.guard.register(fs)
	if code, ok := cli.Parse(fs, args, stdout, stderr); !ok {
		return code
	}
	if code, ok := cli.NoArgs(fs, stderr); !ok {
		return code
	}
	if err := run(ctx, o, stdout); err != nil {
		fmt.Fprintf(stderr, "gcp-t4 uninstall: %v\n", err)
		return 1
	}
	return 0
}

// run removes what the inventory (else the part-of label) names, once the
// guard allows it: the remediation sidecar first, so it restores each
// node, then the rest in reverse apply order, the namespace last and only
// when nothing else lives in it.
func run(ctx context.Context, o *options, stdout io.Writer) error {
	c, err := o.cluster.Connect("gcp-t4-uninstall")
	if err != nil {
		return err
	}
	live, err := install.ReadLive(ctx, c.Kube, o.namespace)
	if err != nil {
		return err
	}
	cl := install.Cluster{Dynamic: c.Dynamic, Mapper: c.Mapper, Namespace: live.Namespace}
	if cl.Namespace == "" {
		cl.Namespace = o.namespace
	}
	if cl.Namespace == "" {
		cl.Namespace = install.Namespace
	}
	if live.HelmRelease != "" {
		return fmt.Errorf("daemonset %s/%s belongs to Helm release %q: remove it with helm uninstall %s --namespace %s", live.Namespace, install.DaemonSetName, live.HelmRelease, live.HelmRelease, live.Namespace)
	}
	inv, err := cl.ReadInventory(ctx)
	if err != nil {
		return err
	}
	if len(inv.Objects) == 0 {
		// No inventory: applied with kubectl apply -k, or an install
		// from before inventories were written first. Our objects carry
		// the part-of label.
		if inv.Objects, err = cl.Labelled(ctx); err != nil {
			return err
		}
		if len(inv.Objects) > 0 {
			fmt.Fprintf(stdout, "no inventory %s/%s: removing the objects labelled %s=%s instead\n", cl.Namespace, install.InventoryName, install.PartOfLabel, install.PartOfValue)
		}
	}
	if len(inv.Objects) == 0 {
		fmt.Fprintf(stdout, "nothing to uninstall: no inventory %s/%s and no object labelled %s=%s\n", cl.Namespace, install.InventoryName, install.PartOfLabel, install.PartOfValue)
		return nil
	}
	// An object Helm adopted since (the kata-remote RuntimeClass, by
	// kata-deploy's chart) is Helm's now.
	for _, r := range inv.Objects {
		if !slices.Contains(inv.Adopted, r) && cl.HelmOwned(ctx, r) {
			inv.Adopted = append(inv.Adopted, r)
		}
	}
	if err := o.guard.check(ctx, c.Kube, c.Dynamic, cl.Namespace, o.dryRun, stdout); err != nil {
		return err
	}
	var del, adopted []install.Ref
	var ns *install.Ref
	for _, r := range inv.Objects {
		switch {
		case slices.Contains(inv.Adopted, r):
			adopted = append(adopted, r)
		case r.Kind == "Namespace" && r.APIVersion == "v1":
			ns = &r
		default:
			del = append(del, r)
		}
	}
	del = append(del, install.Ref{APIVersion: "v1", Kind: "ConfigMap", Namespace: cl.Namespace, Name: install.InventoryName})
	// The nodes first, while the sidecar's identity still exists (nodes.go).
	rctx, rcancel := context.WithTimeout(ctx, o.timeout)
	err = restoreNodes(rctx, c.Kube, cl.Namespace, o.dryRun, stdout)
	rcancel()
	if err != nil {
		return err
	}
	if o.dryRun {
		for _, r := range adopted {
			fmt.Fprintf(stdout, "would keep %s (it existed before install) and drop the fields install set\n", r)
		}
		for _, r := range del {
			fmt.Fprintf(stdout, "would delete %s\n", r)
		}
		if ns != nil {
			fmt.Fprintf(stdout, "would delete %s if nothing else is left in it\n", *ns)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	for _, r := range adopted {
		if err := cl.Release(ctx, r); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "keeping %s: it existed before install; dropped the fields install set\n", r)
	}
	if err := cl.DeleteAll(ctx, del); err != nil {
		return err
	}
	for _, r := range del {
		fmt.Fprintf(stdout, "deleted %s\n", r)
	}
	if ns == nil {
		return nil
	}
	others, err := foreignObjects(ctx, c.Kube, ns.Name)
	if err != nil {
		return err
	}
	if len(others) > 0 {
		fmt.Fprintf(stdout, "keeping %s: it holds objects install did not create: %s\n", *ns, strings.Join(others, ", "))
		return nil
	}
	if err := cl.DeleteAll(ctx, []install.Ref{*ns}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "deleted %s\n", *ns)
	return nil
}

// foreignObjects lists what else lives in ns (say peerpod-ctrl or a
// kata-deploy installed there later), so uninstall does not delete the
// namespace under it. Pods of the deleted DaemonSet and what Kubernetes
// puts in every namespace do not count.
func foreignObjects(ctx context.Context, cs kubernetes.Interface, ns string) ([]string, error) {
	var out []string
	add := func(kind string, names ...string) {
		for _, n := range names {
			out = append(out, kind+"/"+n)
		}
	}
	opts := metav1.ListOptions{}
	dss, err := cs.AppsV1().DaemonSets(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list daemonsets in %s: %w", ns, err)
	}
	for _, x := range dss.Items {
		add("DaemonSet", x.Name)
	}
	deps, err := cs.AppsV1().Deployments(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list deployments in %s: %w", ns, err)
	}
	for _, x := range deps.Items {
		add("Deployment", x.Name)
	}
	sts, err := cs.AppsV1().StatefulSets(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list statefulsets in %s: %w", ns, err)
	}
	for _, x := range sts.Items {
		add("StatefulSet", x.Name)
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list pods in %s: %w", ns, err)
	}
	for _, x := range pods.Items {
		if !ownedByOurWorkloads(x) {
			add("Pod", x.Name)
		}
	}
	cms, err := cs.CoreV1().ConfigMaps(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list configmaps in %s: %w", ns, err)
	}
	for _, x := range cms.Items {
		if x.Name != "kube-root-ca.crt" {
			add("ConfigMap", x.Name)
		}
	}
	secs, err := cs.CoreV1().Secrets(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list secrets in %s: %w", ns, err)
	}
	for _, x := range secs.Items {
		add("Secret", x.Name)
	}
	sas, err := cs.CoreV1().ServiceAccounts(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list serviceaccounts in %s: %w", ns, err)
	}
	for _, x := range sas.Items {
		if x.Name != "default" {
			add("ServiceAccount", x.Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// ownedByOurWorkloads: the pods of what uninstall just deleted (CAA's and
// the remediation DaemonSets, the reaper Deployment's ReplicaSets), which
// terminate with the namespace: a reaper pod still in its grace period
// must not keep the namespace install created.
func ownedByOurWorkloads(p corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		switch {
		case o.Kind == "DaemonSet" && (o.Name == install.DaemonSetName || o.Name == install.RemediationDaemonSet):
			return true
		case o.Kind == "ReplicaSet" && strings.HasPrefix(o.Name, install.ReaperName+"-") && p.Labels["app"] == install.ReaperName:
			return true
		}
	}
	return false
}
