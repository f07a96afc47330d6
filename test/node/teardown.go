package node

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Stop ends kubelet, the containers, containerd and its shims, then removes
// the network namespaces containerd made, every mount under Dir, the
// cgroup root, the bridge and Dir itself. It returns what it found still
// there and had to remove by force (things kubelet and containerd did not
// clean on their own), for the test to log, and an error for what it could
// not remove. It is safe to call more than once and from a signal handler's
// goroutine.
func (n *Node) Stop() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return nil
	}
	n.stopped = true
	var errs []error
	note := func(format string, args ...any) { n.stopResult = append(n.stopResult, fmt.Sprintf(format, args...)) }

	// The namespaces this node's sandboxes use, read from their bundles
	// before anything is stopped (a killed sandbox's bundle stays; a
	// removed one took its namespace with it).
	n.netnsOurs = n.sandboxNetns()

	// kubelet first, so it starts nothing more.
	for _, p := range n.procs {
		if p.name == "kubelet" && p.stop(20*time.Second) {
			note("kubelet ignored SIGTERM for 20s; killed")
		}
	}
	// The containers' processes are in the node's cgroup root.
	if pids := n.cgroupPIDs(); len(pids) > 0 {
		note("killed %d container processes left in %s: %v", len(pids), n.cgroupRoot, pids)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	for _, p := range n.procs {
		if p.name == "containerd" && p.stop(20*time.Second) {
			note("containerd ignored SIGTERM for 20s; killed")
		}
	}
	// Shims outlive containerd by design; ours name our socket.
	if n.Socket != "" {
		for _, pid := range processesNaming(n.Socket) {
			note("killed shim pid %d", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			waitGone(pid, 5*time.Second)
		}
	}
	// The podVMs' forwarders and agents, namespaces, links and routes
	// (the watcher stops first, so it boots nothing more).
	if n.podVMs != nil {
		if err := n.podVMs.stop(); err != nil {
			note("podVMs: %v", err)
		}
	}
	// Then CAA (its podVMs' pods are gone or going) and the GCE emulator,
	// newest first.
	for i := len(n.procs) - 1; i >= 0; i-- {
		p := n.procs[i]
		if p.name != "kubelet" && p.name != "containerd" && p.stop(30*time.Second) {
			note("%s ignored SIGTERM for 30s; killed", p.name)
		}
	}
	if n.madeCAADir {
		if err := os.RemoveAll(n.caaDir()); err != nil {
			errs = append(errs, fmt.Errorf("node: remove %s (CAA's directory): %w", n.caaDir(), err))
		}
	}
	for _, d := range n.shimDirs {
		removed, files, err := removeShimTree(d)
		if err != nil {
			errs = append(errs, err)
		}
		if removed {
			what := "empty"
			if files > 0 {
				what = fmt.Sprintf("%d files in it: a killed sandbox's state", files)
			}
			note("removed %s (kata's shim leaves it; %s)", d, what)
		}
	}
	if n.madeSecrets {
		if err := os.RemoveAll("/run/secrets"); err != nil {
			errs = append(errs, fmt.Errorf("node: remove /run/secrets (CAA's token): %w", err))
		}
	}
	if n.syslog != nil {
		_ = n.syslog.Close()
		if err := os.Remove(devLog); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("node: remove %s (kata's shim's syslog): %w", devLog, err))
		}
	}
	if ns, err := n.newNetns(); err != nil {
		errs = append(errs, err)
	} else {
		for _, name := range ns {
			p := filepath.Join(netnsDir, name)
			note("removed network namespace %s", p)
			if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
				errs = append(errs, fmt.Errorf("node: unmount %s: %w", p, err))
			}
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("node: remove %s: %w", p, err))
			}
		}
	}
	if n.Dir != "" {
		mounts, err := mountsUnder(n.Dir)
		if err != nil {
			errs = append(errs, err)
		}
		if len(mounts) > 0 {
			note("unmounted %d mounts under the node's directory: %s", len(mounts), strings.Join(mounts, " "))
		}
		// Deepest first, so a mount is never busy with one below it.
		slices.SortFunc(mounts, func(a, b string) int { return len(b) - len(a) })
		for _, m := range mounts {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
				errs = append(errs, fmt.Errorf("node: unmount %s: %w", m, err))
			}
		}
	}
	errs = append(errs, n.removeCgroupRoot())
	if n.bridge != "" {
		if _, err := os.Stat(filepath.Join("/sys/class/net", n.bridge)); err == nil {
			note("deleted bridge %s", n.bridge)
			if out, err := exec.Command("ip", "link", "delete", n.bridge).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("node: ip link delete %s: %w: %s", n.bridge, err, bytes.TrimSpace(out)))
			}
		}
	}
	if n.Dir != "" {
		if err := os.RemoveAll(n.Dir); err != nil {
			errs = append(errs, fmt.Errorf("node: remove %s: %w", n.Dir, err))
		}
	}
	return errors.Join(errs...)
}

// Forced is what the last Stop found still there and removed by force.
func (n *Node) Forced() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.stopResult)
}

// Residue reads the machine afresh for anything of this node's that is
// still there: kubelet's or containerd's process, a shim naming its
// socket, a process in its cgroups, a mount under its directory, a network
// namespace containerd made, a cgroup, the bridge, the directory. Empty
// after a clean Stop.
func (n *Node) Residue() []string {
	var left []string
	for name, pid := range n.PIDs() {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			left = append(left, fmt.Sprintf("%s pid %d still runs", name, pid))
		}
	}
	for _, pid := range processesNaming(n.Socket) {
		left = append(left, fmt.Sprintf("pid %d names the node's socket", pid))
	}
	if pids := n.cgroupPIDs(); len(pids) > 0 {
		left = append(left, fmt.Sprintf("processes %v in cgroup %s", pids, n.cgroupRoot))
	}
	mounts, err := mountsUnder(n.Dir)
	if err != nil {
		left = append(left, err.Error())
	}
	for _, m := range mounts {
		left = append(left, "mount "+m)
	}
	ns, err := n.newNetns()
	if err != nil {
		left = append(left, err.Error())
	}
	for _, name := range ns {
		left = append(left, "network namespace "+filepath.Join(netnsDir, name))
	}
	dirs, _ := cgroupHierarchies(true)
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, n.cgroupRoot)); err == nil {
			left = append(left, "cgroup "+filepath.Join(d, n.cgroupRoot))
		}
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", n.bridge)); err == nil {
		left = append(left, "bridge "+n.bridge)
	}
	if _, err := os.Stat(n.Dir); err == nil {
		left = append(left, "directory "+n.Dir)
	}
	if n.podVMs != nil {
		left = append(left, n.podVMs.residue()...)
	}
	if n.madeCAADir {
		if _, err := os.Stat(n.caaDir()); err == nil {
			left = append(left, n.caaDir()+" (CAA's directory)")
		}
	}
	if n.syslog != nil {
		if _, err := os.Lstat(devLog); err == nil {
			left = append(left, devLog+" (kata's shim's syslog)")
		}
	}
	for _, d := range n.shimDirs {
		if _, err := os.Lstat(d); err == nil {
			left = append(left, d+" (kata's shim's directory)")
		}
	}
	if n.madeSecrets {
		if _, err := os.Stat("/run/secrets"); err == nil {
			left = append(left, "/run/secrets (CAA's token)")
		}
	}
	return left
}

// newNetns lists the namespaces this node's containerd made for its
// sandboxes (CRI names them cni-<uuid>, in the machine's one /var/run/netns)
// that were not there when the node started. Only those a sandbox bundle
// of this node names count: another node on the machine (a second harness
// run, a helper's) makes its own there at the same time, and removing one
// of those took a running pod's network away (its sandbox's next task:
// "failed to Statfs /var/run/netns/cni-…: no such file or directory").
func (n *Node) newNetns() ([]string, error) {
	now, err := listNetns()
	if err != nil {
		return nil, err
	}
	var added []string
	for name := range now {
		if !n.netnsSeen[name] && strings.HasPrefix(name, "cni-") && n.netnsOurs[name] {
			added = append(added, name)
		}
	}
	slices.Sort(added)
	return added, nil
}

// sandboxNetns are the network namespaces the OCI specs of this node's
// containerd bundles name (its state directory's
// io.containerd.runtime.v2.task/<namespace>/<id>/config.json, for runc's
// and kata's shims alike).
func (n *Node) sandboxNetns() map[string]bool {
	out := map[string]bool{}
	bundles, _ := filepath.Glob(filepath.Join(n.path("containerd/state"), "io.containerd.runtime.v2.task", "*", "*", "config.json"))
	for _, b := range bundles {
		data, err := os.ReadFile(b)
		if err != nil {
			continue
		}
		var spec struct {
			Linux struct {
				Namespaces []struct {
					Type string `json:"type"`
					Path string `json:"path"`
				} `json:"namespaces"`
			} `json:"linux"`
		}
		if json.Unmarshal(data, &spec) != nil {
			continue
		}
		for _, ns := range spec.Linux.Namespaces {
			if ns.Type == "network" && ns.Path != "" {
				out[filepath.Base(ns.Path)] = true
			}
		}
	}
	return out
}

// cgroupPIDs lists the processes anywhere under the node's cgroup root, as
// the pids hierarchy (or the first one mounted) sees them.
func (n *Node) cgroupPIDs() []int {
	dirs, err := cgroupHierarchies(false)
	if err != nil || len(dirs) == 0 || n.cgroupRoot == "" {
		return nil
	}
	base := dirs[0]
	for _, d := range dirs {
		if filepath.Base(d) == "pids" {
			base = d
		}
	}
	var pids []int
	_ = filepath.WalkDir(filepath.Join(base, n.cgroupRoot), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		data, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// removeCgroupRoot removes the node's cgroup tree in every hierarchy,
// children before parents (a cgroup directory is removed with rmdir).
func (n *Node) removeCgroupRoot() error {
	dirs, err := cgroupHierarchies(true)
	if err != nil || n.cgroupRoot == "" {
		return err
	}
	var errs []error
	for _, d := range dirs {
		root := filepath.Join(d, n.cgroupRoot)
		var tree []string
		_ = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				tree = append(tree, p)
			}
			return nil
		})
		slices.Reverse(tree)
		for _, p := range tree {
			// A cgroup's last process may take a moment to leave it.
			var err error
			for range 50 {
				if err = syscall.Rmdir(p); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("node: remove cgroup %s: %w", p, err))
			}
		}
	}
	return errors.Join(errs...)
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(dir string) ([]string, error) {
	if dir == "" {
		return nil, nil
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("node: mountinfo: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		// mountinfo escapes blanks as octal; the harness's paths have none.
		mp := fields[4]
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, sc.Err()
}

// processesNaming lists the processes one of whose arguments is exactly
// arg (a shim's -address is the node's socket).
func processesNaming(arg string) []int {
	if arg == "" {
		return nil
	}
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if slices.Contains(strings.Split(string(data), "\x00"), arg) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitGone waits until pid has left /proc (a killed shim is reaped by
// init, not by us).
func waitGone(pid int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
