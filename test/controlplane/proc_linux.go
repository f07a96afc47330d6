package controlplane

import "syscall"

// The servers die with the test binary, even when it is killed by a
// timeout, instead of lingering on their ports.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
