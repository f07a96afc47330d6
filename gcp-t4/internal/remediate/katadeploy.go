package remediate

import (
	"fmt"

	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/configplan"
	corev1 "k8s.io/api/core/v1"
)

// kataRuntimeLabel is the node label kata-deploy 4.0.0 and 4.1.0 set once
// an install finished and remove first when they uninstall (kata-containers
// tools/packaging/kata-deploy/binary/src/main.rs KATA_RUNTIME_LABEL,
// install_stage_label). What kata-deploy leaves in files is configplan's
// (DetectKataDeploy).
const kataRuntimeLabel = "katacontainers.io/kata-runtime"

// kataDeployInstalling reports why kata-deploy is seen to be at work on
// this node: its files are there but the node lacks the label it sets when
// an install is done (and removes first when it uninstalls).
func kataDeployInstalling(kd configplan.KataDeploy, node *corev1.Node) string {
	if !kd.Present || node == nil || node.Labels[kataRuntimeLabel] == "true" {
		return ""
	}
	return fmt.Sprintf("kata-deploy's files are on the node but it lacks %s=true: kata-deploy is installing or removing itself; waiting for it", kataRuntimeLabel)
}
