package gc

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// caaDaemonSet is the DaemonSet every install path names CAA's (the base,
// upstream's chart): its envFrom names the peer-pods-cm CAA reads.
const caaDaemonSet = "cloud-api-adaptor-daemonset"

// FromCluster fills the provider flags (and -grace) that neither the
// command line nor the environment set from the peer-pods-cm the
// installed CAA DaemonSet reads, as `gcp-t4 uninstall` does, so `gcp-t4 gc
// -kubeconfig K` judges exactly the VMs CAA and the reaper create: the
// same project, zones, network and cluster ID. A GCP_CLUSTER_ID still
// empty then is this cluster's own, the kube-system namespace's UID
// (what VerifyClusterID requires anyway). It returns what it filled, for
// the user to see; with no CAA installed it fills nothing but the ID.
// `gcp-t4 status -gce` asks GCE with the same settings.
func FromCluster(ctx context.Context, fs *flag.FlagSet, cs kubernetes.Interface, namespace string) (filled []string, source string, err error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	unset := func(flagName, env string) bool {
		return !given[flagName] && os.Getenv(env) == "" && fs.Lookup(flagName) != nil
	}
	cm, source, err := readPeerPodsCM(ctx, cs, namespace)
	if err != nil {
		return nil, "", err
	}
	keys := append(gcpt4.Keys(), gcpt4.Key{Env: "REAPER_GRACE", Flag: "grace"})
	for _, k := range keys {
		v := cm[k.Env]
		if v == "" || !unset(k.Flag, k.Env) {
			continue
		}
		if err := fs.Set(k.Flag, v); err != nil {
			return nil, "", fmt.Errorf("%s %s: %w", source, k.Env, err)
		}
		filled = append(filled, k.Env)
	}
	if f := fs.Lookup("cluster-id"); f != nil && f.Value.String() == "" {
		ns, err := cs.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
		if err != nil {
			return nil, "", fmt.Errorf("GCP_CLUSTER_ID is not set (-cluster-id, or peer-pods-cm) and reading namespace kube-system for it failed (needs RBAC get on it): %w", err)
		}
		if err := fs.Set("cluster-id", string(ns.UID)); err != nil {
			return nil, "", err
		}
		filled = append(filled, "GCP_CLUSTER_ID (kube-system's UID)")
	}
	sort.Strings(filled)
	return filled, source, nil
}

// readPeerPodsCM finds CAA's DaemonSet (in namespace, or in any) and
// reads the peer-pods-cm its container's envFrom names; none installed is
// an empty map.
func readPeerPodsCM(ctx context.Context, cs kubernetes.Interface, namespace string) (map[string]string, string, error) {
	list, err := cs.AppsV1().DaemonSets(namespace).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + caaDaemonSet})
	if err != nil {
		return nil, "", fmt.Errorf("looking for CAA's DaemonSet %s (needs RBAC list on daemonsets; or give every setting as a flag): %w", caaDaemonSet, err)
	}
	switch len(list.Items) {
	case 0:
		return map[string]string{}, "", nil
	case 1:
	default:
		var nss []string
		for _, d := range list.Items {
			nss = append(nss, d.Namespace)
		}
		return nil, "", fmt.Errorf("CAA's DaemonSet %s is in several namespaces (%s): pick one with -caa-namespace", caaDaemonSet, strings.Join(nss, ", "))
	}
	ds := list.Items[0]
	out := map[string]string{}
	source := ""
	for _, c := range ds.Spec.Template.Spec.Containers {
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef == nil || !strings.HasPrefix(e.ConfigMapRef.Name, "peer-pods-cm") {
				continue
			}
			cm, err := cs.CoreV1().ConfigMaps(ds.Namespace).Get(ctx, e.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil {
				return nil, "", fmt.Errorf("reading %s/%s, the ConfigMap CAA reads: %w", ds.Namespace, e.ConfigMapRef.Name, err)
			}
			for k, v := range cm.Data {
				out[k] = v
			}
			source = ds.Namespace + "/" + e.ConfigMapRef.Name
		}
	}
	return out, source, nil
}
