package startup

import (
	"fmt"
	"strings"
	"time"
)

// SidecarFlag is the node sidecar's flag (gcp-t4-node remediate) that
// sets kata-remote's create_container_timeout, the row
// KataCreateContainer: install writes it into the sidecar's DaemonSet and
// preflight reads it back from there.
const SidecarFlag = "create-container-timeout"

// CheckSidecarTimeout validates the flag's value: 0 (leave kata-remote's
// configuration alone) or whole seconds, as kata reads
// create_container_timeout.
func CheckSidecarTimeout(d time.Duration) error {
	if d < 0 || d%time.Second != 0 {
		return fmt.Errorf("--%s %s: want 0 (leave kata-remote's configuration alone) or a whole number of seconds, e.g. 1200s", SidecarFlag, d)
	}
	return nil
}

// SidecarTimeoutArg finds the flag in a container's command line (its
// command, then its args), as -flag=value, --flag=value or the flag then
// its value; found is false when it is not there.
func SidecarTimeoutArg(argv []string) (value string, found bool, err error) {
	for i, a := range argv {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != SidecarFlag {
			continue
		}
		if !hasVal {
			if i+1 >= len(argv) {
				return "", false, fmt.Errorf("%s has no value", a)
			}
			val = argv[i+1]
		}
		return val, true, nil
	}
	return "", false, nil
}
