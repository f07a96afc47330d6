// Package caaconfig is the one reader of the settings the installed Cloud
// API Adaptor runs with: CAA's DaemonSet, the peer-pods-cm its containers'
// envFrom name, and the provider configuration CAA builds from it, through
// the provider's own key table (gcpt4.Keys, gcpt4.ConfigFromEnv), never a
// list of keys of ours. Commands a person runs against a cluster take from
// it every provider setting no flag or environment variable gives (`gcp-t4
// gc`, `gcp-t4 preflight`, `gcp-t4 status -gce`); `gcp-t4 install` reads
// the installed ConfigMap through it to keep it on an upgrade, and the
// uninstall guard lists podVMs with it. A new provider key therefore
// reaches every command at once.
//
// It also builds the API clients those commands use (clients.go), so they
// reach the API server the same way.
package caaconfig

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/termout"
)

// DaemonSet is the name every install path gives CAA's DaemonSet (the
// kustomize base, upstream's chart).
const DaemonSet = "cloud-api-adaptor-daemonset"

// DefaultNamespace is the namespace `gcp-t4 install` and the kustomize
// base install CAA in unless told otherwise.
const DefaultNamespace = "confidential-containers-system"

// ServiceAccount is the name every install path gives CAA's
// ServiceAccount.
const ServiceAccount = "cloud-api-adaptor"

// installBindings are the ClusterRoleBindings the install paths give CAA's
// ServiceAccount (install/base/rbac.yaml for `gcp-t4 install` and
// `kubectl apply -k`, install/helm/caa-provider-rbac.yaml for Helm). They
// are cluster-scoped, so only a cluster admin writes them: the namespace
// their subject names is the install's, whatever a tenant creates in its
// own namespace.
func installBindings() []string {
	return []string{"caa-gcp-t4-cloud-api-adaptor", "caa-gcp-t4-provider"}
}

// appLabel is the pod label both install paths select CAA's pods by (the
// base's daemonset.yaml, upstream's chart).
const appLabel, appValue = "app", "cloud-api-adaptor"

// ConfigMap is the name install gives the ConfigMap CAA reads. A name that
// starts with it is CAA's too: peer-pods-cm-<hash>, where a kustomize
// generator named it (installs from before fixed names).
const ConfigMap = "peer-pods-cm"

// Installed is what a read found: CAA's DaemonSet and its settings. Zero
// but for an empty Data when CAA is not installed.
type Installed struct {
	// Namespace is the DaemonSet's namespace.
	Namespace string
	// DaemonSet is CAA's DaemonSet; nil when none was found.
	DaemonSet *appsv1.DaemonSet
	// ConfigMaps are the peer-pods-cm ConfigMaps its containers' envFrom
	// name and that exist, in the order CAA reads them.
	ConfigMaps []string
	// Missing are those it names that do not exist: its pods cannot
	// start until they do (an envFrom ConfigMap is required).
	Missing []string
	// Data is their keys, a later ConfigMap's value winning as in a
	// container's environment.
	Data map[string]string
	// Ignored says, one line each and safe to print, which DaemonSets of
	// CAA's name Read passed over as not the install's (a tenant's
	// look-alike), so the command can tell the admin.
	Ignored []string
}

// Source names where the settings came from (namespace/name), "" when
// nothing was read.
func (in Installed) Source() string {
	if len(in.ConfigMaps) == 0 {
		return ""
	}
	return in.Namespace + "/" + strings.Join(in.ConfigMaps, ",")
}

// Read finds CAA's DaemonSet, name, in namespace and reads the
// peer-pods-cm its containers' envFrom name (Of). With namespace "" it
// looks in every namespace but takes only a DaemonSet that is the
// install's (Recognised): any user who may create DaemonSets can give one
// CAA's name in their own namespace, and its peer-pods-cm would then
// choose the project, zones and cluster ID that status, gc and preflight
// act on. Those passed over are in Ignored; more than one recognised is an
// error. None installed is a zero Installed and no error; a ConfigMap it
// names that does not exist is an error, as it is to CAA's pods.
func Read(ctx context.Context, cs kubernetes.Interface, namespace, name string) (Installed, error) {
	list, err := cs.AppsV1().DaemonSets(namespace).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		return Installed{}, fmt.Errorf("looking for CAA's DaemonSet %s (needs RBAC list on daemonsets; or give every setting as a flag): %w", name, err)
	}
	found := list.Items
	var ignored []string
	if namespace == "" && len(found) > 0 {
		nss, err := InstallNamespaces(ctx, cs)
		if err != nil {
			return Installed{}, err
		}
		found = nil
		for _, d := range list.Items {
			if why := Recognised(&d, nss); why != "" {
				ignored = append(ignored, fmt.Sprintf("ignored DaemonSet %s/%s: %s; give -caa-namespace if it is CAA's",
					termout.Clean(d.Namespace), termout.Clean(d.Name), why))
				continue
			}
			found = append(found, d)
		}
	}
	switch len(found) {
	case 0:
		return Installed{Data: map[string]string{}, Ignored: ignored}, nil
	case 1:
	default:
		var nss []string
		for _, d := range found {
			nss = append(nss, d.Namespace)
		}
		sort.Strings(nss)
		return Installed{}, fmt.Errorf("CAA's DaemonSet %s is in several namespaces (%s): pick one with -caa-namespace", name, strings.Join(nss, ", "))
	}
	in, err := Of(ctx, cs, &found[0])
	if err != nil {
		return Installed{}, err
	}
	in.Ignored = ignored
	if len(in.Missing) > 0 {
		return Installed{}, fmt.Errorf("%s/%s, the ConfigMap CAA reads, does not exist", in.Namespace, in.Missing[0])
	}
	return in, nil
}

// InstallNamespaces are the namespaces CAA may be installed in as only a
// cluster admin can say: DefaultNamespace, and the namespace of CAA's
// ServiceAccount in the install's ClusterRoleBindings (installBindings).
// A binding that is absent, or that this user may not read, adds none.
func InstallNamespaces(ctx context.Context, cs kubernetes.Interface) (map[string]bool, error) {
	nss := map[string]bool{DefaultNamespace: true}
	for _, name := range installBindings() {
		b, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("reading ClusterRoleBinding %s, which names CAA's namespace: %w", name, err)
		}
		for _, s := range b.Subjects {
			if s.Kind == "ServiceAccount" && s.Name == ServiceAccount && s.Namespace != "" {
				nss[s.Namespace] = true
			}
		}
	}
	return nss, nil
}

// Recognised says why ds is not the install's CAA DaemonSet, "" when it
// is: in one of the install's namespaces (InstallNamespaces), selecting
// the pods the install paths label app=cloud-api-adaptor.
func Recognised(ds *appsv1.DaemonSet, installNamespaces map[string]bool) string {
	if !installNamespaces[ds.Namespace] {
		names := slices.Sorted(maps.Keys(installNamespaces))
		return fmt.Sprintf("namespace %s is not the install's (%s here: the default, or where ClusterRoleBinding %s binds ServiceAccount %s)",
			termout.Clean(ds.Namespace), strings.Join(names, ", "), strings.Join(installBindings(), " or "), ServiceAccount)
	}
	if ds.Spec.Selector == nil || ds.Spec.Selector.MatchLabels[appLabel] != appValue {
		return fmt.Sprintf("it does not select the install's pods (label %s=%s)", appLabel, appValue)
	}
	return ""
}

// Of reads the peer-pods-cm ConfigMaps the containers of ds, CAA's
// DaemonSet, name through envFrom (configMapRef), as the kubelet gives
// them to CAA. One that does not exist is listed in Missing, not an
// error: an upgrade rewrites it, a check reports it.
func Of(ctx context.Context, cs kubernetes.Interface, ds *appsv1.DaemonSet) (Installed, error) {
	in := Installed{Namespace: ds.Namespace, DaemonSet: ds, Data: map[string]string{}}
	var names []string
	for _, c := range ds.Spec.Template.Spec.Containers {
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef != nil && strings.HasPrefix(e.ConfigMapRef.Name, ConfigMap) && !slices.Contains(names, e.ConfigMapRef.Name) {
				names = append(names, e.ConfigMapRef.Name)
			}
		}
	}
	for _, name := range names {
		if err := in.add(ctx, cs, name); err != nil {
			return Installed{}, err
		}
	}
	return in, nil
}

// InNamespace reads the settings of CAA's DaemonSet in namespace. Where no
// DaemonSet there names a peer-pods-cm (an install that failed before it
// created the DaemonSet, or one deleted by hand), the ConfigMap install
// writes, under its fixed name, is read instead: the podVMs such an
// install may have made were made with it.
func InNamespace(ctx context.Context, cs kubernetes.Interface, namespace string) (Installed, error) {
	in := Installed{Namespace: namespace, Data: map[string]string{}}
	ds, err := cs.AppsV1().DaemonSets(namespace).Get(ctx, DaemonSet, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return Installed{}, fmt.Errorf("reading DaemonSet %s/%s: %w", namespace, DaemonSet, err)
	default:
		if in, err = Of(ctx, cs, ds); err != nil {
			return Installed{}, err
		}
	}
	if len(in.ConfigMaps) == 0 && len(in.Missing) == 0 {
		if err := in.add(ctx, cs, ConfigMap); err != nil {
			return Installed{}, err
		}
	}
	return in, nil
}

// add reads one ConfigMap into in.
func (in *Installed) add(ctx context.Context, cs kubernetes.Interface, name string) error {
	cm, err := cs.CoreV1().ConfigMaps(in.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		in.Missing = append(in.Missing, name)
		return nil
	case err != nil:
		return fmt.Errorf("reading %s/%s, the ConfigMap CAA reads: %w", in.Namespace, name, err)
	}
	for k, v := range cm.Data {
		in.Data[k] = v
	}
	in.ConfigMaps = append(in.ConfigMaps, name)
	return nil
}

// lookup is Data as an environment: a key set to "" is unset, as to
// CAA's registrar.
func (in Installed) lookup(name string) (string, bool) {
	v, ok := in.Data[name]
	return v, ok && v != ""
}

// Config is the provider configuration CAA builds from Data: every key of
// the provider's table, parsed as strictly as the provider parses it at
// start (gcpt4.ConfigFromEnv), the hard-coded default where Data has none.
// It is not validated. The process environment plays no part: this is
// what CAA runs with, not what this command would.
func (in Installed) Config() (gcpt4.Config, error) {
	cfg, err := gcpt4.ConfigFromEnv(in.lookup)
	if err != nil {
		return gcpt4.Config{}, fmt.Errorf("%s: %w", in.where(), err)
	}
	return cfg, nil
}

// ConfigWith is Config with env (a process environment) giving each key
// Data does not: CAA's settings, completed by the command's own for what
// CAA leaves to the default, such as the endpoint and the credentials
// this machine reaches GCE with. Data wins over env, unlike in Fill: the
// uninstall guard must count the podVMs of the project and cluster CAA
// uses, whatever this shell says. Each value is parsed strictly.
func (in Installed) ConfigWith(env func(string) (string, bool)) (gcpt4.Config, error) {
	// Data's own errors first, named after it.
	if _, err := in.Config(); err != nil {
		return gcpt4.Config{}, err
	}
	cfg, err := gcpt4.ConfigFromEnv(func(name string) (string, bool) {
		if v, ok := in.lookup(name); ok {
			return v, true
		}
		v, ok := env(name)
		return v, ok && v != ""
	})
	if err != nil {
		return gcpt4.Config{}, fmt.Errorf("the environment, for a key %s does not set: %w", in.where(), err)
	}
	return cfg, nil
}

// where names the settings in an error, also when nothing was read.
func (in Installed) where() string {
	if s := in.Source(); s != "" {
		return s
	}
	return ConfigMap
}

// Fill sets each flag in fs of the provider's keys, and of extra (a
// command's own peer-pods-cm keys, such as the reaper's REAPER_GRACE),
// that neither the command line nor the environment (getenv) gave, from
// Data. A provider key is parsed as strictly as the provider parses it
// at start, and the flag is set to the value CAA gets (so "010" is ten,
// as to CAA, not eight, as to Go's flag parser); an extra key goes
// through its flag alone. It returns the environment names it set,
// sorted. Every value it refuses is in the error, each after Source.
func (in Installed) Fill(fs *flag.FlagSet, getenv func(string) string, extra ...setting.Key) ([]string, error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	provider := gcpt4.Keys()
	var filled []string
	var errs []error
	for i, k := range append(provider, extra...) {
		v := in.Data[k.Env]
		if v == "" || given[k.Flag] || getenv(k.Env) != "" || fs.Lookup(k.Flag) == nil {
			continue
		}
		if i < len(provider) {
			var err error
			if v, err = asCAAReadsIt(k, v); err != nil {
				errs = append(errs, fmt.Errorf("%s %w", in.where(), err))
				continue
			}
		}
		if err := fs.Set(k.Flag, v); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", in.where(), k.Env, err))
			continue
		}
		filled = append(filled, k.Env)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	sort.Strings(filled)
	return filled, nil
}

// asCAAReadsIt parses v, the value of the provider's key k, as the
// provider does at start (Manager.CheckEnv), and returns it as k's flag
// prints it: what setting the flag to it gives is what CAA has. The error
// names the key, its flag and the fix, in the provider's words.
func asCAAReadsIt(k setting.Key, v string) (string, error) {
	scratch := flag.NewFlagSet(k.Flag, flag.ContinueOnError)
	scratch.SetOutput(io.Discard)
	var m gcpt4.Manager
	m.ParseCmd(scratch)
	if err := m.CheckEnv(func(name string) (string, bool) { return v, name == k.Env }); err != nil {
		return "", err
	}
	f := scratch.Lookup(k.Flag)
	if f == nil {
		return "", fmt.Errorf("%s: the provider registers no flag -%s", k.Env, k.Flag)
	}
	return f.Value.String(), nil
}

// ClusterID is this cluster's ID as the provider and the reaper know it:
// the kube-system namespace's UID.
func ClusterID(ctx context.Context, cs kubernetes.Interface) (string, error) {
	ns, err := cs.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading namespace kube-system, whose UID is the cluster's ID (needs RBAC get on it): %w", err)
	}
	return string(ns.UID), nil
}

// FromCluster is what `gcp-t4 gc` and `gcp-t4 status -gce` do before they
// build the provider: Read CAA's DaemonSet in namespace ("" wherever it
// is), Fill fs from its peer-pods-cm (the provider's keys and extra), and
// then, if -cluster-id is still empty, set it to this cluster's own ID
// (ClusterID), which is what VerifyClusterID requires anyway. So they
// judge exactly the VMs CAA and the reaper create: the same project,
// zones, network and cluster ID. It returns what it filled, for the user
// to see, and Source; with no CAA installed it fills nothing but the ID.
// warn gets each line of Ignored.
func FromCluster(ctx context.Context, fs *flag.FlagSet, cs kubernetes.Interface, namespace string, getenv func(string) string, warn func(string), extra ...setting.Key) (filled []string, source string, err error) {
	in, err := Read(ctx, cs, namespace, DaemonSet)
	if err != nil {
		return nil, "", err
	}
	for _, w := range in.Ignored {
		warn(w)
	}
	if filled, err = in.Fill(fs, getenv, extra...); err != nil {
		return nil, "", err
	}
	if f := fs.Lookup("cluster-id"); f != nil && f.Value.String() == "" {
		id, err := ClusterID(ctx, cs)
		if err != nil {
			return nil, "", fmt.Errorf("GCP_CLUSTER_ID is not set (-cluster-id, or peer-pods-cm) and %w", err)
		}
		if err := fs.Set("cluster-id", id); err != nil {
			return nil, "", err
		}
		filled = append(filled, "GCP_CLUSTER_ID (kube-system's UID)")
	}
	sort.Strings(filled)
	return filled, in.Source(), nil
}
