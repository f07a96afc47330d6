// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

// Package consoleline names, once, the lines the podVM prints on its
// serial console that the provider reads. The image's own services write
// one line each, with a fixed prefix and a JSON body, so that a reader
// finds them among kernel and systemd output (podvm/mkosi.extra:
// gpu-init's readiness line, boot-failed, cdh-check; the cache disk's
// programs). The provider may not import the gcp-t4 module, where most of
// those programs live, so the prefixes are spelled here and gcp-t4's tests
// hold both sides alike (internal/repocheck).
//
// Stdlib only, no imports: this package travels with the drop-in.
package consoleline

const (
	// GPUPrefix starts gpu-init's readiness line (ready, no-gpu or
	// failed, with the driver version and GPU count).
	GPUPrefix = "CAA-GCP-T4-GPU "
	// BootFailedPrefix starts the line the podVM prints instead of an
	// emergency shell before it powers itself off.
	BootFailedPrefix = "CAA-GCP-T4-BOOT-FAILED "
	// CDHFailedPrefix starts the line printed when the confidential data
	// hub did not listen, so kata-agent was not started.
	CDHFailedPrefix = "CAA-GCP-T4-CDH-FAILED "
	// StorePrefix starts the cache disk's line (podvm-cache-store):
	// whether the disk was opened through dm-verity and its pre-unpacked
	// store handed to image-rs, or which miss kept it out (docs/cache.md).
	StorePrefix = "CAA-GCP-T4-STORE "
	// LayersPrefix starts the line of the podVM's sweep of the layer
	// directories failed image pulls leave in image-rs's work_dir
	// (podvm-cache-store sweep, docs/cache.md "A failed pull"): what it
	// removed, what a pull may still be writing, and the space left.
	LayersPrefix = "CAA-GCP-T4-LAYERS "
	// PullPrefix starts the cache mirror's line for an image it served
	// (its manifest, its first layer) or lacked (docs/cache.md "Where each
	// image came from").
	PullPrefix = "CAA-GCP-T4-PULL "
)
