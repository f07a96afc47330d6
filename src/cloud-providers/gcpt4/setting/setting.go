// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

// Package setting describes the gcp-t4 provider's settings as data: each
// one's environment variable (a peer-pods-cm key), flag, kind and default
// (Key, which the provider's Keys lists), the values its enumerated
// settings take, and the strict boolean parser they share. Our tools read
// it (install writes peer-pods-cm by it, preflight and the reaper check
// it); CAA calls none of it, so it lives beside the provider rather than
// in what the provider package exports.
//
// Stdlib only: this package is part of the drop-in provider.
package setting

import (
	"fmt"
	"strings"
)

// Provisioning models the provider creates podVMs with.
const (
	ProvisioningStandard = "STANDARD"
	ProvisioningSpot     = "SPOT"
)

// ZonesAuto as GCP_ZONES asks the provider to find the fallback zones
// itself: the zones of GCP_ZONE's region that offer the accelerator.
const ZonesAuto = "auto"

// NIC types GCE knows (NetworkInterface.nicType).
const (
	NICTypeGVNIC  = "GVNIC"
	NICTypeVirtio = "VIRTIO_NET"
)

// Kinds of value a Key holds, named as upstream's config-extractor names
// the FlagRegistrar methods (src/cloud-providers/cmd/config-extractor at
// CAA v0.22.0, 38d0fcf7).
const (
	KindString   = "string"
	KindInt      = "int"
	KindUint     = "uint"
	KindUint64   = "uint64"
	KindFloat64  = "float64"
	KindBool     = "bool"
	KindDuration = "duration"
	KindCustom   = "custom"
)

// Key is one setting the provider reads: the environment variable (a
// peer-pods-cm key), the flag that overrides it, its kind and hard-coded
// default. The provider's table is what its ParseCmd registers, so it
// cannot drift from the flags.
type Key struct {
	Env, Flag, Kind, Default, Usage string
}

// ParseBool reads a boolean setting: true, false, 1 or 0, in any case.
// Upstream reads "1" and "true" as true and everything else as false, so
// a typo silently turns a feature off; this refuses it.
func ParseBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean; use true or false", v)
}
