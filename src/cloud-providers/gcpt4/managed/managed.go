// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

// Package managed is what a listing of the gcp-t4 provider's podVMs finds:
// each VM as its labels describe it, and what the listing skipped. The
// provider lists (Provider.ListManaged); the reaper, `gcp-t4 gc` and the
// uninstall guard read the result. CAA calls none of it, so it lives
// beside the provider rather than in what the provider package exports.
//
// Stdlib only: this package is part of the drop-in provider.
package managed

import "time"

// VM is a podVM the provider created, as found by its labels.
type VM struct {
	ID        string
	Name      string
	Zone      string
	Pod       string
	Namespace string
	Sandbox   string
	// Cluster is the caa-cluster label: this cluster's ID, or "" on a VM
	// made before the provider labelled clusters (Unidentified).
	Cluster     string
	ClusterName string
	// Node is the node whose adaptor created the VM, "" if unknown.
	Node    string
	Status  string
	Created time.Time
}

// Unidentified reports a VM without a cluster label: an older install's,
// or another tool's. It is listed and never deleted automatically, since
// it may belong to any cluster that shares the project.
func (vm VM) Unidentified() bool { return vm.Cluster == "" }

// List is what one listing found.
type List struct {
	// VMs are this cluster's podVMs and the unidentified ones, by ID.
	VMs []VM
	// OtherClusters counts podVMs labelled with another cluster's ID,
	// which this cluster never touches.
	OtherClusters int
}
