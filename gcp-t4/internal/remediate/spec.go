// Package remediate keeps the kata-remote runtime handler in a GKE node's
// containerd configuration: GKE rewrites config.toml at every bootstrap and
// drops it, so a one-time patch does not hold. It is the sidecar's loop:
// watch, ask configplan for the change, write it safely, restart containerd
// and roll back. What differs between containerd releases is data
// (containerdrelease), read by configplan and here.
package remediate

import "github.com/caa-gcp-t4/gcp-t4/internal/remediate/configplan"

// DefaultHandler is the handler the sidecar keeps unless its flags say
// otherwise: kata-deploy 4.x's kata-remote (configplan.KataDeployHandler).
func DefaultHandler() configplan.Handler { return configplan.KataDeployHandler() }
