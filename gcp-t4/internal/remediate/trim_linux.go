//go:build linux

package remediate

import (
	"bufio"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// trimResident gives back memory that start-up touched and the idle loop
// never uses again. The sidecar is the multi-command gcp-t4 binary: package
// initialisation of the provider, GCE and Kubernetes clients faults in tens
// of MiB of the executable's image, all clean file pages; MADV_PAGEOUT
// drops them from this process (the kernel reads back any page that is
// used later), and FreeOSMemory returns the start-up heap. Best effort:
// kernels before 5.4 do not know MADV_PAGEOUT, and nothing breaks then.
func trimResident() {
	debug.FreeOSMemory()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[5] != exe || strings.Contains(fields[1], "w") {
			continue
		}
		start, end, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		s, err1 := strconv.ParseUint(start, 16, 64)
		e, err2 := strconv.ParseUint(end, 16, 64)
		if err1 != nil || err2 != nil || e <= s {
			continue
		}
		unix.Syscall(unix.SYS_MADVISE, uintptr(s), uintptr(e-s), unix.MADV_PAGEOUT)
	}
}
