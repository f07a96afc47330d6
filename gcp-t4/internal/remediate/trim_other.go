//go:build !linux

package remediate

import "runtime/debug"

// trimResident only returns the start-up heap where MADV_PAGEOUT does not
// exist; the sidecar runs on Linux nodes.
func trimResident() { debug.FreeOSMemory() }
