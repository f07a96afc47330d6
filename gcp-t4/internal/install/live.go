package install

import (
	"context"
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/caaconfig"
)

// Helm's ownership metadata (helm.sh/helm/v3 pkg/action/validate.go).
const (
	helmReleaseAnnotation   = "meta.helm.sh/release-name"
	helmNamespaceAnnotation = "meta.helm.sh/release-namespace"
)

// Live is what an earlier install left running: what an upgrade keeps
// unless a flag changes it.
type Live struct {
	// Found: a CAA DaemonSet exists (whoever installed it).
	Found     bool
	Namespace string
	// Inventory: gcp-t4 install recorded one there.
	Inventory bool
	// HelmRelease is set when Helm manages the DaemonSet (upstream's
	// peerpods chart): then `helm upgrade` is the way to change it.
	HelmRelease string
	Image       string
	// Config is the data of the peer-pods-cm the DaemonSet reads (hashed
	// names from installs before fixed names included), read by
	// caaconfig as every command reads it; nil when there is none.
	Config map[string]string
	// Credentials is GCP_CREDENTIALS from the Secret the DaemonSet reads.
	Credentials []byte
	// WIF is the credential configuration the gcp-wif volume projects.
	WIF []byte
	TLS *TLSFiles
	// Remediation: the DaemonSet has the remediate sidecar.
	Remediation bool
	// GuardMaxGPUsPerPod is the cost guard's installed maxGPUsPerPod, ""
	// without its ConfigMap.
	GuardMaxGPUsPerPod string
	// CreateContainerTimeout is the remediation sidecar's
	// --create-container-timeout, "" without the sidecar.
	CreateContainerTimeout string
}

// ReadLive finds an existing installation: the namespace holding an
// inventory, else one with the CAA DaemonSet (kubectl apply -k, Helm).
// want, if not empty, is the namespace the user asked for; an
// installation elsewhere is an error rather than a second copy.
func ReadLive(ctx context.Context, cs kubernetes.Interface, want string) (Live, error) {
	var live Live
	inv, err := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", InventoryName).String()})
	if err != nil {
		return live, fmt.Errorf("look for an earlier install (the installer needs cluster-admin): %w", err)
	}
	var nss []string
	for _, cm := range inv.Items {
		if cm.Labels[PartOfLabel] == PartOfValue {
			nss = append(nss, cm.Namespace)
		}
	}
	if len(nss) == 0 {
		dss, err := cs.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", DaemonSetName).String()})
		if err != nil {
			return live, fmt.Errorf("look for an earlier install: %w", err)
		}
		for _, ds := range dss.Items {
			nss = append(nss, ds.Namespace)
		}
	} else {
		live.Inventory = true
	}
	sort.Strings(nss)
	switch {
	case len(nss) > 1:
		return live, fmt.Errorf("CAA is installed in more than one namespace (%s): one DaemonSet per node is all CAA supports; uninstall the extra ones (gcp-t4 uninstall --namespace NS)", strings.Join(nss, ", "))
	case len(nss) == 0:
		return live, nil
	case want != "" && nss[0] != want:
		return live, fmt.Errorf("--namespace %s: CAA is installed in namespace %s; upgrade it there (omit --namespace), or uninstall it first to move it", want, nss[0])
	}
	live.Namespace = nss[0]
	if live.GuardMaxGPUsPerPod, err = readGuardMax(ctx, cs, live.Namespace); err != nil {
		return live, err
	}
	if live.CreateContainerTimeout, err = readCreateContainerTimeout(ctx, cs, live.Namespace); err != nil {
		return live, err
	}
	ds, err := cs.AppsV1().DaemonSets(live.Namespace).Get(ctx, DaemonSetName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return live, nil // an inventory without the DaemonSet: a failed first install
	case err != nil:
		return live, fmt.Errorf("read daemonset %s/%s: %w", live.Namespace, DaemonSetName, err)
	}
	live.Found = true
	live.HelmRelease = ds.Annotations[helmReleaseAnnotation]
	return live, live.readPod(ctx, cs, ds)
}

func (l *Live) readPod(ctx context.Context, cs kubernetes.Interface, ds *appsv1.DaemonSet) error {
	spec := ds.Spec.Template.Spec
	var caa *corev1.Container
	for i := range spec.Containers {
		switch spec.Containers[i].Name {
		case "cloud-api-adaptor-con":
			caa = &spec.Containers[i]
		case "remediate":
			l.Remediation = true
		}
	}
	if caa == nil {
		return fmt.Errorf("daemonset %s/%s has no cloud-api-adaptor-con container; not a CAA installation this installer can upgrade", l.Namespace, DaemonSetName)
	}
	l.Image = caa.Image
	var secretName string
	for _, e := range caa.EnvFrom {
		if e.SecretRef != nil && strings.HasPrefix(e.SecretRef.Name, SecretName) {
			secretName = e.SecretRef.Name
		}
	}
	// A peer-pods-cm the DaemonSet names that is gone is no error here:
	// the upgrade writes it again, from the flags.
	in, err := caaconfig.Of(ctx, cs, ds)
	if err != nil {
		return err
	}
	if len(in.ConfigMaps) > 0 {
		l.Config = in.Data
	}
	if secretName != "" {
		sec, err := cs.CoreV1().Secrets(l.Namespace).Get(ctx, secretName, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("read secret %s/%s: %w", l.Namespace, secretName, err)
		}
		if err == nil && len(sec.Data[credentialsFile]) > 0 {
			l.Credentials = sec.Data[credentialsFile]
		}
	}
	for _, v := range spec.Volumes {
		switch {
		case v.Name == "gcp-wif" && v.Projected != nil:
			for _, src := range v.Projected.Sources {
				if src.ConfigMap == nil {
					continue
				}
				cm, err := cs.CoreV1().ConfigMaps(l.Namespace).Get(ctx, src.ConfigMap.Name, metav1.GetOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("read configmap %s/%s: %w", l.Namespace, src.ConfigMap.Name, err)
				}
				if err == nil && cm.Data[wifConfigFile] != "" {
					l.WIF = []byte(cm.Data[wifConfigFile])
				}
			}
		case v.Name == "certs" && v.Secret != nil:
			sec, err := cs.CoreV1().Secrets(l.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("read secret %s/%s: %w", l.Namespace, v.Secret.SecretName, err)
			}
			if err == nil {
				l.TLS = &TLSFiles{CA: sec.Data[tlsCAKey], Cert: sec.Data[tlsCertKey], Key: sec.Data[tlsKeyKey]}
			}
		}
	}
	return nil
}

// Labelled finds the objects carrying our part-of label in the kinds the
// manifests render (every component included), in c's namespace or
// cluster-scoped: what uninstall removes where no inventory was written
// (kubectl apply -k).
func (c Cluster) Labelled(ctx context.Context) ([]Ref, error) {
	objs, err := Build(everyComponent(c.ns()))
	if err != nil {
		return nil, err
	}
	seen := map[schema.GroupVersionKind]bool{}
	var out []Ref
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		if seen[gvk] {
			continue
		}
		seen[gvk] = true
		m, err := c.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		switch {
		case meta.IsNoMatchError(err):
			// A kind this API server does not serve (the cost guard's
			// before Kubernetes 1.30) holds nothing of ours.
			continue
		case err != nil:
			return nil, fmt.Errorf("%s: %w", gvk, err)
		}
		var l *unstructured.UnstructuredList
		opts := metav1.ListOptions{LabelSelector: PartOfLabel + "=" + PartOfValue}
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			l, err = c.Dynamic.Resource(m.Resource).Namespace(metav1.NamespaceAll).List(ctx, opts)
		} else {
			l, err = c.Dynamic.Resource(m.Resource).List(ctx, opts)
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", m.Resource.Resource, err)
		}
		for i := range l.Items {
			it := &l.Items[i]
			// Namespaced objects in our namespace, plus the RBAC in
			// "default" the GKE component adds.
			if it.GetNamespace() != "" && it.GetNamespace() != c.ns() && it.GetNamespace() != metav1.NamespaceDefault {
				continue
			}
			if it.GetKind() == "ConfigMap" && it.GetName() == InventoryName {
				continue
			}
			out = append(out, refOf(it))
		}
	}
	sortRefs(out)
	return out, nil
}

// HelmOwned reports whether Helm has written the object since (the
// kata-remote RuntimeClass, adopted by kata-deploy's chart): then it is
// Helm's to delete, not ours.
func (c Cluster) HelmOwned(ctx context.Context, r Ref) bool {
	ri, err := c.resource(r)
	if err != nil {
		return false
	}
	u, err := ri.Get(ctx, r.Name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	return helmManaged(u.GetManagedFields())
}
