// Package util holds helpers shared by providers.
package util

import (
	"fmt"
	"strings"
)

// PodVMNamePrefix starts every podVM instance name.
const PodVMNamePrefix = "podvm"

// sanitize maps a name onto the [a-z0-9-] alphabet cloud APIs accept.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		}
		return '-'
	}, strings.ToLower(s))
}

// GenerateInstanceName returns podvm-<pod>-<first 8 of sandboxID>; with
// podvmNameMax > 0 the pod part is shortened to fit. It panics when
// podvmNameMax cannot even hold the prefix and the sandbox part, as upstream.
func GenerateInstanceName(podName, sandboxID string, podvmNameMax int) string {
	pod, sid := sanitize(podName), sanitize(sandboxID)
	if len(sid) > 8 {
		sid = sid[:8]
	}
	if podvmNameMax > 0 {
		room := podvmNameMax - len(PodVMNamePrefix) - 10
		if room < 0 {
			panic(fmt.Errorf("podvmNameMax is too small: %d", podvmNameMax))
		}
		if len(pod) > room {
			pod = pod[:room]
		}
	}
	return PodVMNamePrefix + "-" + pod + "-" + sid
}
