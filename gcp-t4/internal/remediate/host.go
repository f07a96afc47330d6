package remediate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/configplan"
)

// Host is the node's filesystem as mounted into the pod: Root is where the
// host's / appears ("/" when running on the host itself).
type Host struct{ Root string }

func (h Host) path(p string) string { return filepath.Join(h.Root, p) }

// MissingKata names the first of the shim or its configuration that is not
// on the host: registering a handler whose shim is missing makes every pod
// of that RuntimeClass fail, so it is not registered until both exist.
func (h Host) MissingKata(hd configplan.Handler) string {
	for _, p := range []string{hd.RuntimePath, hd.ConfigPath} {
		if _, err := os.Stat(h.path(p)); errors.Is(err, fs.ErrNotExist) {
			return p
		} else if err != nil {
			return fmt.Sprintf("%s (%v)", p, err)
		}
	}
	return ""
}

// COSReason says why this is a Container-Optimized OS node, or "". COS
// mounts / read-only and /etc as tmpfs, so /opt/kata cannot exist there;
// peer pods need Ubuntu node pools.
func (h Host) COSReason(node *corev1.Node) string {
	if node != nil {
		if node.Labels["cloud.google.com/gke-os-distribution"] == "cos" {
			return "node label cloud.google.com/gke-os-distribution=cos: Container-Optimized OS cannot hold the kata shim; use an UBUNTU_CONTAINERD node pool"
		}
		if strings.Contains(node.Status.NodeInfo.OSImage, "Container-Optimized OS") {
			return fmt.Sprintf("node osImage %q: Container-Optimized OS cannot hold the kata shim; use an UBUNTU_CONTAINERD node pool", node.Status.NodeInfo.OSImage)
		}
	}
	data, err := os.ReadFile(h.path("/etc/os-release"))
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && k == "ID" && strings.Trim(v, `"`) == "cos" {
			return "host /etc/os-release has ID=cos: Container-Optimized OS cannot hold the kata shim; use an UBUNTU_CONTAINERD node pool"
		}
	}
	return ""
}
