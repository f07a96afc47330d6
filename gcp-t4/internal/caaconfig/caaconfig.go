// Package caaconfig reads the settings the installed Cloud API Adaptor runs
// with: the peer-pods-cm its DaemonSet's envFrom names. Commands a person
// runs against a cluster (`gcp-t4 gc`, `gcp-t4 preflight`) take from it
// every provider setting no flag or environment variable gives, so they
// judge the project and VMs CAA itself uses without the person repeating
// install's flags.
package caaconfig

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strings"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DaemonSet is the name every install path gives CAA's DaemonSet (the
// kustomize base, upstream's chart).
const DaemonSet = "cloud-api-adaptor-daemonset"

// configMapPrefix is how the ConfigMap CAA reads is named: peer-pods-cm,
// or peer-pods-cm-<hash> where a kustomize generator named it.
const configMapPrefix = "peer-pods-cm"

// Installed is what Read found: CAA's DaemonSet and its settings. Zero
// when CAA is not installed.
type Installed struct {
	// Namespace is the DaemonSet's namespace.
	Namespace string
	// ConfigMaps are the peer-pods-cm ConfigMaps its containers' envFrom
	// name, in the order CAA reads them.
	ConfigMaps []string
	// Data is their keys, a later ConfigMap's value winning as in a
	// container's environment.
	Data map[string]string
}

// Source names where the settings came from (namespace/name), "" when
// nothing was read.
func (in Installed) Source() string {
	if len(in.ConfigMaps) == 0 {
		return ""
	}
	return in.Namespace + "/" + strings.Join(in.ConfigMaps, ",")
}

// Read finds CAA's DaemonSet, name, in namespace ("" looks in every
// namespace, and refuses when there is more than one) and reads the
// peer-pods-cm its containers' envFrom name. None installed is a zero
// Installed and no error.
func Read(ctx context.Context, cs kubernetes.Interface, namespace, name string) (Installed, error) {
	list, err := cs.AppsV1().DaemonSets(namespace).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		return Installed{}, fmt.Errorf("looking for CAA's DaemonSet %s (needs RBAC list on daemonsets; or give every setting as a flag): %w", name, err)
	}
	switch len(list.Items) {
	case 0:
		return Installed{Data: map[string]string{}}, nil
	case 1:
	default:
		var nss []string
		for _, d := range list.Items {
			nss = append(nss, d.Namespace)
		}
		sort.Strings(nss)
		return Installed{}, fmt.Errorf("CAA's DaemonSet %s is in several namespaces (%s): pick one with -caa-namespace", name, strings.Join(nss, ", "))
	}
	ds := list.Items[0]
	in := Installed{Namespace: ds.Namespace, Data: map[string]string{}}
	for _, c := range ds.Spec.Template.Spec.Containers {
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef == nil || !strings.HasPrefix(e.ConfigMapRef.Name, configMapPrefix) {
				continue
			}
			cm, err := cs.CoreV1().ConfigMaps(ds.Namespace).Get(ctx, e.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil {
				return Installed{}, fmt.Errorf("reading %s/%s, the ConfigMap CAA reads: %w", ds.Namespace, e.ConfigMapRef.Name, err)
			}
			for k, v := range cm.Data {
				in.Data[k] = v
			}
			in.ConfigMaps = append(in.ConfigMaps, e.ConfigMapRef.Name)
		}
	}
	return in, nil
}

// Fill sets each of keys' flags in fs that neither the command line nor
// the environment (getenv) gave, from data, through the flag itself, so
// a value is parsed and refused exactly as on the command line. It
// returns the environment names it set, sorted. source names data in
// errors.
func Fill(fs *flag.FlagSet, getenv func(string) string, data map[string]string, keys []gcpt4.Key, source string) ([]string, error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var filled []string
	for _, k := range keys {
		v := data[k.Env]
		if v == "" || given[k.Flag] || getenv(k.Env) != "" || fs.Lookup(k.Flag) == nil {
			continue
		}
		if err := fs.Set(k.Flag, v); err != nil {
			return nil, fmt.Errorf("%s %s: %w", source, k.Env, err)
		}
		filled = append(filled, k.Env)
	}
	sort.Strings(filled)
	return filled, nil
}
