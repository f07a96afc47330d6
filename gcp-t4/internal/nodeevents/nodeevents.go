// Package nodeevents names the Events `gcp-t4-node remediate` records on its
// Node, which `gcp-t4 uninstall` and the docs look for. The two run as
// different binaries (the operator CLI links no node code), so the reasons
// live here, in a package of constants both import, and are written nowhere
// else.
package nodeevents

// Reasons of the Node Events the remediation sidecar records.
const (
	// ConfigRestored: the sidecar put kata-remote back into containerd's
	// configuration after it was reset.
	ConfigRestored = "KataRemoteConfigRestored"
	// ConfigRemoved: an uninstall pass restored the node's containerd
	// configuration to what it was before gcp-t4.
	ConfigRemoved = "KataRemoteConfigRemoved"
	// CleanupFailed: an uninstall pass could not restore the node.
	CleanupFailed = "CleanupFailed"
	// UnsupportedOS: the node's OS is one the sidecar does not edit.
	UnsupportedOS = "KataRemoteUnsupportedOS"
	// ShimMissing: kata's shim is not installed on the host yet.
	ShimMissing = "KataRemoteShimMissing"
	// CreateContainerTimeoutSet: the sidecar wrote (or put back, after a
	// node reset or a kata-deploy run removed or changed it) its drop-in
	// that sets kata-remote's create_container_timeout.
	CreateContainerTimeoutSet = "KataRemoteCreateContainerTimeoutSet"
	// CreateContainerTimeoutFailed: the sidecar cannot set or read
	// kata-remote's create_container_timeout (a file it cannot parse, a
	// directory it cannot write).
	CreateContainerTimeoutFailed = "KataRemoteCreateContainerTimeoutFailed"
)
