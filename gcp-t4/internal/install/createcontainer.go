package install

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/startup"
	kustomizetree "github.com/caa-gcp-t4/install"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// kata-remote's create_container_timeout bounds the agent's CreateContainer,
// guest pull included (60 s in kata 4.0.0's configuration-remote.toml.in).
// Install sets it through the remediation sidecar, which keeps a drop-in in
// the remote shim's config.d and is Ready only while the effective value is
// at least its --create-container-timeout (internal/remediate,
// katatimeout.go). The component's YAML carries the startup catalogue's
// value (internal/startup, row kata-create-container); a test holds the two
// equal. Install rewrites that one argument.
const createContainerArg = "--" + startup.SidecarFlag + "="

// CheckCreateContainerTimeout validates --create-container-timeout as the
// sidecar reads it: 0 (leave kata-remote's configuration alone) or whole
// seconds.
func CheckCreateContainerTimeout(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("--%s %q: want 0 (leave kata-remote's configuration alone) or a whole number of seconds, e.g. 1200s", startup.SidecarFlag, v)
	}
	return startup.CheckSidecarTimeout(d)
}

// DefaultCreateContainerTimeout is the catalogue's value, in the form the
// component's YAML writes it.
func DefaultCreateContainerTimeout() (string, error) {
	c, err := startup.Load()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%ds", int64(c.InstallCreateContainerTimeout()/time.Second)), nil
}

// createContainerArgIndex finds the argument in the component's
// DaemonSet: the remediate container's index and the argument's, and its
// value there.
func createContainerArgIndex() (ci, ai int, value string, err error) {
	p := path.Join(componentGKE, "daemonset.yaml")
	data, err := fs.ReadFile(kustomizetree.Tree(), p)
	if err != nil {
		return 0, 0, "", err
	}
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal(data, &ds); err != nil {
		return 0, 0, "", fmt.Errorf("%s: %w", p, err)
	}
	for i, c := range ds.Spec.Template.Spec.Containers {
		if c.Name != "remediate" {
			continue
		}
		for j, a := range c.Args {
			if v, ok := strings.CutPrefix(a, createContainerArg); ok {
				return i, j, v, nil
			}
		}
	}
	return 0, 0, "", fmt.Errorf("%s: the remediate container has no %s argument", p, createContainerArg)
}

// createContainerPatch is the JSON patch that sets the argument to v; its
// test operation makes kustomize fail rather than replace another argument
// should the YAML move it.
func createContainerPatch(v string) (string, error) {
	ci, ai, cur, err := createContainerArgIndex()
	if err != nil {
		return "", err
	}
	p := fmt.Sprintf("/spec/template/spec/containers/%d/args/%d", ci, ai)
	return fmt.Sprintf("- op: test\n  path: %s\n  value: %q\n- op: replace\n  path: %s\n  value: %q\n", p, createContainerArg+cur, p, createContainerArg+v), nil
}

// readCreateContainerTimeout is the installed sidecar's argument, "" when
// there is no sidecar or it has none.
func readCreateContainerTimeout(ctx context.Context, cs kubernetes.Interface, ns string) (string, error) {
	ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, RemediationDaemonSet, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("read daemonset %s/%s: %w", ns, RemediationDaemonSet, err)
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name != "remediate" {
			continue
		}
		v, _, err := startup.SidecarTimeoutArg(append(append([]string(nil), c.Command...), c.Args...))
		if err != nil {
			return "", fmt.Errorf("daemonset %s/%s: %w", ns, RemediationDaemonSet, err)
		}
		return v, nil
	}
	return "", nil
}
