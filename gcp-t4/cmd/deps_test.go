// Package cmd holds the binaries, one per place caa-gcp-t4 runs. This test
// keeps each binary to what its place needs: the podVM image is inside the
// trust boundary and the node sidecar holds root-equivalent host access, so
// neither may carry the GCE emulator, the cloud client, or kustomize.
package cmd

import (
	"os/exec"
	"strings"
	"testing"
)

func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// forbidden prefixes for every binary but the operator CLI.
var offNode = []string{
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake",
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4",
	"cloud.google.com/go",
	"google.golang.org/api",
	"sigs.k8s.io/kustomize",
	"github.com/caa-gcp-t4/gcp-t4/internal/install",
	"github.com/caa-gcp-t4/gcp-t4/internal/uninstall",
	"github.com/caa-gcp-t4/install", // the embedded kustomize tree
	"github.com/caa-gcp-t4/gcp-t4/internal/demo",
}

// The node sidecar asks Kubernetes for its Node, its DaemonSet's metadata
// and to record Events: a REST client for core/v1, not the clientset, whose
// typed clients and apply configurations link every API group.
var offNodeKube = []string{
	"k8s.io/client-go/kubernetes",
	"k8s.io/client-go/applyconfigurations",
	"k8s.io/client-go/dynamic",
	"k8s.io/client-go/discovery",
	"k8s.io/client-go/informers",
	"k8s.io/client-go/listers",
	"k8s.io/client-go/restmapper",
}

func TestNodeSidecarLinksNoCloudOrInstaller(t *testing.T) {
	for _, d := range deps(t, "./gcp-t4-node") {
		for _, p := range append(offNode, offNodeKube...) {
			if d == p || strings.HasPrefix(d, p+"/") {
				t.Errorf("gcp-t4-node links %s (forbidden: %s)", d, p)
			}
		}
		if strings.HasPrefix(d, "k8s.io/api/") && d != "k8s.io/api/core/v1" {
			t.Errorf("gcp-t4-node links API group %s; it needs core/v1 only", d)
		}
	}
}

// gpu-init, podvm-notice, podvm-cache-mirror and podvm-cache-store run in
// the podVM, and modelcar in a tenant's pod there: the standard library, each its own packages, and
// internal/cli/stdflags (the common flag layout, itself held to the
// standard library here) only. imagestore, which podvm-cache-store uses
// and the operator CLI writes with, is held to the standard library too.
// A module path has a dot in its first element; the standard library's
// never does.
func TestPodVMBinariesLinkStandardLibraryOnly(t *testing.T) {
	const stdflags = "github.com/caa-gcp-t4/gcp-t4/internal/cli/stdflags"
	const imagestore = "github.com/caa-gcp-t4/gcp-t4/internal/imagestore"
	for _, lib := range []string{stdflags, imagestore} {
		for _, d := range deps(t, lib) {
			if first, _, _ := strings.Cut(d, "/"); strings.Contains(first, ".") && d != lib {
				t.Errorf("%s links %s: the podVM's binaries use it, so it may use the standard library only", lib, d)
			}
		}
	}
	for bin, own := range map[string][]string{
		"gpu-init":           {"github.com/caa-gcp-t4/gcp-t4/internal/gpuinit"},
		"podvm-notice":       {"github.com/caa-gcp-t4/gcp-t4/internal/notice"},
		"modelcar":           {"github.com/caa-gcp-t4/gcp-t4/internal/modelcar"},
		"podvm-cache-mirror": {"github.com/caa-gcp-t4/gcp-t4/internal/cachemirror"},
		"podvm-cache-store":  {"github.com/caa-gcp-t4/gcp-t4/internal/cachestore", imagestore},
	} {
		allowed := map[string]bool{stdflags: true, "github.com/caa-gcp-t4/gcp-t4/cmd/" + bin: true}
		for _, o := range own {
			allowed[o] = true
		}
		for _, d := range deps(t, "./"+bin) {
			if first, _, _ := strings.Cut(d, "/"); strings.Contains(first, ".") && !allowed[d] {
				t.Errorf("%s links %s: a podVM binary may use the standard library, %s and %s only", bin, d, strings.Join(own, ", "), stdflags)
			}
		}
	}
}

// The operator CLI must not carry the node's job, nor the podVM's.
func TestOperatorCLILinksNoNodeOrGuestCode(t *testing.T) {
	for _, d := range deps(t, "./gcp-t4") {
		for _, p := range []string{"github.com/caa-gcp-t4/gcp-t4/internal/remediate", "github.com/caa-gcp-t4/gcp-t4/internal/gpuinit", "github.com/caa-gcp-t4/gcp-t4/internal/notice", "github.com/caa-gcp-t4/gcp-t4/internal/restart", "github.com/caa-gcp-t4/gcp-t4/internal/cachestore"} {
			if d == p {
				t.Errorf("gcp-t4 links %s, which belongs to another binary", d)
			}
		}
	}
}
