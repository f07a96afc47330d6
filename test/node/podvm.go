package node

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"
)

// The podVMs of the kata stage. The GCE emulator's instance is a record
// with a 10.x address; nothing of a guest runs there. The harness "boots"
// each instance as a podVM would, far enough for CAA's agent connection:
//
//   - a network namespace holds the VM's address on its eth0 (a veth
//     whose other end is on the node, with a /32 route to it there), and
//     reaches the node's address as a GCE VM reaches its cluster's nodes;
//   - a second namespace is the guest's pod namespace (/run/netns/podns,
//     which the podVM image's netns@podns unit makes);
//   - in the VM's namespace, with a private tmpfs as its /run, the real
//     agent-protocol-forwarder (CAA v0.22.0) runs with the podVM unit's
//     flags, reading /run/peerpod/apf.json from the instance's user-data
//     cloud-config as process-user-data writes it; it sets up the pod's
//     VXLAN end (iptables included) and serves TLS on 0.0.0.0:15150;
//   - behind it, on /run/kata-containers/agent.sock, the stand-in
//     kata-agent (test/node/_agent).
//
// The watcher polls the emulator's aggregated list, as a hypervisor's
// event source would tell of a boot: an instance RUNNING with an address
// is booted, one gone (or no longer RUNNING) is shut down and its
// namespaces, veth and route removed.

// podVMScript runs in the VM's network namespace (`ip netns exec`, which
// also gives it a mount namespace that propagates nothing back): it makes
// the guest's /run and execs the stand-in agent, which starts the
// forwarder once its socket listens.
const podVMScript = `set -eu
vm=$1 podns=$2 agent=$3 forwarder=$4
shift 4
# The pod namespace, kept across the tmpfs that hides the node's /run.
mount --bind "/run/netns/$podns" "$vm/podns"
mount -t tmpfs -o mode=0755 podvm-run /run
mkdir -p /run/netns /run/kata-containers
: >/run/netns/podns
mount --bind "$vm/podns" /run/netns/podns
# What process-user-data writes from the cloud-config.
cp -R "$vm/root/run/." /run/
exec "$agent" "$@" -- "$forwarder" -pod-namespace /run/netns/podns -kata-agent-socket /run/kata-containers/agent.sock
`

// gceVM is what the watcher reads of an emulated instance.
type gceVM struct {
	Name              string `json:"name"`
	Status            string `json:"status"`
	NetworkInterfaces []struct {
		NetworkIP string `json:"networkIP"`
	} `json:"networkInterfaces"`
	Metadata struct {
		Items []struct {
			Key   string `json:"key"`
			Value string `json:"value"`
		} `json:"items"`
	} `json:"metadata"`
	Disks []struct {
		DeviceName string `json:"deviceName"`
	} `json:"disks"`
}

// The cache disk the emulator's project holds for the harness (SeedProject
// in gcp-t4/internal/demo), and a dm-verity value of the form the provider
// takes; the disk holds no bytes here, so nothing checks the hash.
const (
	CacheImage  = "caa-gcp-t4-cache-demo"
	CacheVerity = "root=" + "5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed" + ",offset=1063256064"
	// cacheDevice and cacheVerityKey are what the provider attaches and
	// sets (gcpt4.CacheDeviceName, gcpt4.CacheVerityMetadata), which a
	// podVM's podvm-cache-store looks for.
	cacheDevice    = "caa-gcp-t4-cache"
	cacheVerityKey = "caa-gcp-t4-cache-verity"
)

// hasCache says whether the instance has the cache disk and its dm-verity
// value, as the podVM would open it.
func (v *gceVM) hasCache() bool {
	for _, d := range v.Disks {
		if d.DeviceName == cacheDevice {
			return v.meta(cacheVerityKey) != ""
		}
	}
	return false
}

func (v *gceVM) meta(key string) string {
	for _, it := range v.Metadata.Items {
		if it.Key == key {
			return it.Value
		}
	}
	return ""
}

// listGCE lists every instance of the project (GCE's aggregatedList).
func listGCE(ctx context.Context, endpoint, project string) ([]gceVM, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/compute/v1/projects/"+project+"/aggregated/instances", nil)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("node: GCE aggregated/instances: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("node: GCE aggregated/instances: %s", resp.Status)
	}
	var body struct {
		Items map[string]struct {
			Instances []gceVM `json:"instances"`
		} `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("node: GCE aggregated/instances: %w", err)
	}
	var out []gceVM
	for _, scope := range body.Items {
		out = append(out, scope.Instances...)
	}
	return out, nil
}

// PodVMEvent is one boot or shutdown the watcher did, for a test to time.
type PodVMEvent struct {
	At   time.Time
	Name string // the instance
	IP   string
	What string // "booted", "boot failed: …", "shut down"
	// PodNS names (under /run/netns) the namespace that is the guest's
	// /run/netns/podns, where the forwarder put the pod's VXLAN end.
	PodNS string
}

type podVM struct {
	name, ip     string
	vmNS, podNS  string
	veth, dir    string
	log          string
	cmd          *exec.Cmd
	done         chan struct{}
	routeAdded   bool
	netnsCreated []string
}

type podVMHost struct {
	n                   *Node
	agent, forwarder    string
	pull                time.Duration
	images              map[string]string // the stand-in's -image
	failures            int               // its -pull-failures
	store               []string          // its -store, for a podVM with the cache disk
	endpoint, project   string
	cancel              context.CancelFunc
	done                chan struct{}
	mu                  sync.Mutex
	vms                 map[string]*podVM
	seq                 int
	events              []PodVMEvent
	failed              map[string]bool
	hardOff             map[string]bool
	dead                []*podVM // hard off: namespaces kept, dropping, until stop
	stopped             bool
	everIPs, everNetns  []string
	everVeths, everLogs []string
}

// startPodVMs starts the watcher; Node.Stop stops it and every podVM.
func (n *Node) startPodVMs(k *Kata, endpoint, project string) error {
	for _, tool := range []string{"ip", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("node: the podVMs need %s: %w", tool, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &podVMHost{n: n, agent: k.Agent, forwarder: k.Forwarder, pull: k.AgentPull, images: k.AgentImages, failures: k.AgentPullFailures,
		store: k.Cache, endpoint: endpoint, project: project,
		cancel: cancel, done: make(chan struct{}), vms: map[string]*podVM{}, failed: map[string]bool{}, hardOff: map[string]bool{}}
	n.mu.Lock()
	n.podVMs = h
	n.mu.Unlock()
	go h.watch(ctx)
	return nil
}

// podVMHost is the node's podVM host, nil before the kata stage starts it.
func (n *Node) podVMHost() *podVMHost {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.podVMs
}

// PodVMEvents are the boots and shutdowns so far.
func (n *Node) PodVMEvents() []PodVMEvent {
	h := n.podVMHost()
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

func (h *podVMHost) note(name, ip, podNS, what string) {
	h.mu.Lock()
	h.events = append(h.events, PodVMEvent{At: time.Now(), Name: name, IP: ip, What: what, PodNS: podNS})
	h.mu.Unlock()
	h.n.logger.Info("podVM "+what, "instance", name, "ip", ip)
}

// watch polls the emulator every 200 ms: a boot is seen within that.
func (h *podVMHost) watch(ctx context.Context) {
	defer close(h.done)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		if vms, err := listGCE(ctx, h.endpoint, h.project); err == nil {
			h.reconcile(ctx, vms)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (h *podVMHost) reconcile(ctx context.Context, vms []gceVM) {
	running := map[string]bool{}
	for i := range vms {
		v := &vms[i]
		if v.Status != "RUNNING" || len(v.NetworkInterfaces) == 0 || v.NetworkInterfaces[0].NetworkIP == "" {
			continue
		}
		running[v.Name] = true
		h.mu.Lock()
		_, have := h.vms[v.Name]
		failed := h.failed[v.Name]
		h.mu.Unlock()
		if have || failed {
			continue
		}
		if err := h.boot(ctx, v); err != nil {
			h.mu.Lock()
			h.failed[v.Name] = true
			h.mu.Unlock()
			h.note(v.Name, v.NetworkInterfaces[0].NetworkIP, "", "boot failed: "+err.Error())
		}
	}
	h.mu.Lock()
	var gone []*podVM
	for name, vm := range h.vms {
		if !running[name] {
			gone = append(gone, vm)
			delete(h.vms, name)
		}
	}
	h.mu.Unlock()
	for _, vm := range gone {
		h.mu.Lock()
		hard := h.hardOff[vm.name]
		h.mu.Unlock()
		if hard {
			what := "powered off hard"
			if err := h.powerOff(vm); err != nil {
				what += " (" + err.Error() + ")"
			}
			h.note(vm.name, vm.ip, vm.podNS, what)
			continue
		}
		err := h.shutdown(vm)
		what := "shut down"
		if err != nil {
			what += " (" + err.Error() + ")"
		}
		h.note(vm.name, vm.ip, vm.podNS, what)
	}
}

// userDataFiles decodes the instance's user-data (base64, as the gcp-t4
// provider writes it) as CAA's cloud-config and returns its write_files
// below /run, as process-user-data would write them in the guest.
func userDataFiles(v *gceVM) (map[string]string, error) {
	raw := v.meta("user-data")
	if raw == "" {
		return nil, errors.New("no user-data in the instance's metadata")
	}
	data := []byte(raw)
	if v.meta("user-data-encoding") == "base64" {
		var err error
		if data, err = base64.StdEncoding.DecodeString(raw); err != nil {
			return nil, fmt.Errorf("user-data: %w", err)
		}
	}
	var cc struct {
		WriteFiles []struct {
			Path    string `json:"path"`
			Content string `json:"content"`
		} `json:"write_files"`
	}
	if err := yaml.Unmarshal(data, &cc); err != nil {
		return nil, fmt.Errorf("user-data is not a cloud-config: %w", err)
	}
	files := map[string]string{}
	for _, f := range cc.WriteFiles {
		if filepath.Clean(f.Path) != f.Path || !strings.HasPrefix(f.Path, "/run/") {
			return nil, fmt.Errorf("user-data writes %q, outside the guest's /run this harness models", f.Path)
		}
		files[f.Path] = f.Content
	}
	if _, ok := files["/run/peerpod/apf.json"]; !ok {
		return nil, errors.New("user-data has no /run/peerpod/apf.json (the forwarder's configuration)")
	}
	return files, nil
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// boot makes the VM's namespaces, link and route and starts its
// forwarder and agent. On error what it made is removed.
func (h *podVMHost) boot(ctx context.Context, v *gceVM) (err error) {
	files, err := userDataFiles(v)
	if err != nil {
		return err
	}
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return errors.New("the node is stopping")
	}
	h.seq++
	i := h.seq
	h.mu.Unlock()
	id := h.n.id
	vm := &podVM{name: v.Name, ip: v.NetworkInterfaces[0].NetworkIP,
		vmNS: fmt.Sprintf("nh%s-vm%d", id, i), podNS: fmt.Sprintf("nh%s-pod%d", id, i),
		veth: fmt.Sprintf("nh%sv%d", id, i), // a link name: 15 bytes at most
		dir:  h.n.path(fmt.Sprintf("podvm-%d", i)), log: h.n.path(fmt.Sprintf("podvm-%d.log", i))}
	h.mu.Lock()
	h.everNetns = append(h.everNetns, vm.vmNS, vm.podNS)
	h.everVeths = append(h.everVeths, vm.veth)
	h.everIPs = append(h.everIPs, vm.ip)
	h.everLogs = append(h.everLogs, vm.log)
	h.mu.Unlock()
	defer func() {
		if err != nil {
			err = errors.Join(err, h.shutdown(vm))
		}
	}()
	for path, content := range files {
		p := filepath.Join(vm.dir, "root", path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("node: %w", err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(vm.dir, "podns"), nil, 0o600); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	script := filepath.Join(vm.dir, "boot.sh")
	if err := os.WriteFile(script, []byte(podVMScript), 0o700); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	// A route to the VM's address that something else holds (another
	// run's podVM, a machine's own 10.x network) would take its traffic:
	// refuse rather than steal it.
	if out, err := exec.Command("ip", "route", "show", vm.ip+"/32").Output(); err == nil && len(bytes.TrimSpace(out)) > 0 {
		return fmt.Errorf("node: a route to %s/32 exists already (%s); another harness run, or this machine's own network, has that address", vm.ip, bytes.TrimSpace(out))
	}
	for _, ns := range []string{vm.vmNS, vm.podNS} {
		if err := ipCmd("netns", "add", ns); err != nil {
			return fmt.Errorf("node: %w", err)
		}
		vm.netnsCreated = append(vm.netnsCreated, ns)
	}
	steps := [][]string{
		{"link", "add", vm.veth, "type", "veth", "peer", "name", "eth0", "netns", vm.vmNS},
		{"link", "set", vm.veth, "up"},
		{"-n", vm.vmNS, "link", "set", "lo", "up"},
		{"-n", vm.vmNS, "addr", "add", vm.ip + "/32", "dev", "eth0"},
		{"-n", vm.vmNS, "link", "set", "eth0", "up"},
		// The node's address, and a default route through it: the
		// forwarder takes the default route's interface as the VM's
		// primary one (its pod network's underlay).
		{"-n", vm.vmNS, "route", "add", h.n.IP + "/32", "dev", "eth0"},
		{"-n", vm.vmNS, "route", "add", "default", "via", h.n.IP, "dev", "eth0", "onlink"},
		{"-n", vm.podNS, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	if err := ipCmd("route", "add", vm.ip+"/32", "dev", vm.veth); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	vm.routeAdded = true

	f, err := os.OpenFile(vm.log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	args := []string{"netns", "exec", vm.vmNS, "/bin/sh", script, vm.dir, vm.podNS, h.agent, h.forwarder,
		"-pull-duration", h.pull.String(), "-pull-failures", strconv.Itoa(h.failures)}
	for name, digest := range h.images {
		args = append(args, "-image", name+"="+digest)
	}
	if v.hasCache() && len(h.store) > 0 {
		args = append(args, "-store", strings.Join(h.store, ","))
	}
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("node: start podVM %s: %w", vm.name, err)
	}
	vm.cmd, vm.done = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(vm.done)
	}()
	// Booted once the forwarder listens: its log says so.
	if err := waitFor(ctx, time.Minute, "podVM "+vm.name+"'s forwarder", func() (bool, error) {
		select {
		case <-vm.done:
			return false, fmt.Errorf("node: podVM %s exited; its log ends:\n%s", vm.name, tail(vm.log, 2000))
		default:
		}
		data, _ := os.ReadFile(vm.log)
		return bytes.Contains(data, []byte("Starting agent-protocol-forwarder listener")), nil
	}); err != nil {
		return err
	}
	h.mu.Lock()
	h.vms[vm.name] = vm
	h.mu.Unlock()
	h.note(vm.name, vm.ip, vm.podNS, "booted")
	return nil
}

// shutdown stops the VM's processes (the forwarder tears its VXLAN down on
// SIGTERM) and removes its route and namespaces (the veth goes with the
// VM's namespace).
func (h *podVMHost) shutdown(vm *podVM) error {
	var errs []error
	if vm.cmd != nil {
		_ = vm.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-vm.done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-vm.cmd.Process.Pid, syscall.SIGKILL)
			<-vm.done
			errs = append(errs, fmt.Errorf("podVM %s ignored SIGTERM for 15s; killed", vm.name))
		}
	}
	if vm.routeAdded {
		if err := ipCmd("route", "del", vm.ip+"/32", "dev", vm.veth); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ns := range vm.netnsCreated {
		if err := ipCmd("netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// HardOff makes the next end of instance's podVM a death without a
// shutdown, as a host failure or a power-off past the guest's grace ends
// a VM: nothing in the guest closes its connections. Its namespace stays,
// dropping every packet in and out (a dead host's address answers
// nothing: no FIN, no RST, no ICMP), its processes are killed, and only
// Node.Stop removes it.
func (n *Node) HardOff(instance string) {
	h := n.podVMHost()
	if h == nil {
		return
	}
	h.mu.Lock()
	h.hardOff[instance] = true
	h.mu.Unlock()
}

// powerOff drops the VM's traffic, then kills its processes (whose
// closing packets are dropped too); the namespaces, link and route stay
// until stop.
func (h *podVMHost) powerOff(vm *podVM) error {
	var errs []error
	for _, chain := range []string{"INPUT", "OUTPUT"} {
		if out, err := exec.Command("ip", "netns", "exec", vm.vmNS, "iptables", "-I", chain, "-j", "DROP").CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("iptables %s DROP in %s: %w: %s", chain, vm.vmNS, err, bytes.TrimSpace(out)))
		}
	}
	if vm.cmd != nil {
		_ = syscall.Kill(-vm.cmd.Process.Pid, syscall.SIGKILL)
		<-vm.done
	}
	// The killed processes' sockets, orphaned, would hold the namespace
	// for minutes; destroying them sends nothing (their resets are
	// dropped). Best effort: ss -K needs the kernel's socket destroy.
	_ = exec.Command("ip", "netns", "exec", vm.vmNS, "ss", "-K", "-t").Run()
	h.mu.Lock()
	h.dead = append(h.dead, vm)
	h.mu.Unlock()
	return errors.Join(errs...)
}

// stop ends the watcher and shuts every podVM down.
func (h *podVMHost) stop() error {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	h.cancel()
	<-h.done
	h.mu.Lock()
	vms := h.vms
	h.vms = map[string]*podVM{}
	dead := h.dead
	h.dead = nil
	h.mu.Unlock()
	var errs []error
	for _, vm := range vms {
		errs = append(errs, h.shutdown(vm))
	}
	for _, vm := range dead {
		vm.cmd = nil // killed already
		errs = append(errs, h.shutdown(vm))
		// A namespace outlives its name while a socket holds it: a socket
		// left after the hard off (ss -K is best effort) keeps the VM's
		// namespace, and its veth with it, until the kernel gives it up
		// (minutes). The link goes now (unless the namespace's teardown,
		// which the kernel finishes in the background, took it first).
		if _, err := os.Stat(filepath.Join("/sys/class/net", vm.veth)); err == nil {
			if out, err := exec.Command("ip", "link", "del", vm.veth).CombinedOutput(); err != nil && !bytes.Contains(out, []byte("Cannot find device")) {
				errs = append(errs, fmt.Errorf("ip link del %s: %w: %s", vm.veth, err, bytes.TrimSpace(out)))
			}
		}
	}
	return errors.Join(errs...)
}

// residue is what of the podVMs is still on the machine.
func (h *podVMHost) residue() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var left []string
	for _, ns := range h.everNetns {
		if _, err := os.Stat(filepath.Join(netnsDir, ns)); err == nil {
			left = append(left, "podVM network namespace "+ns)
		}
	}
	for _, l := range h.everVeths {
		if _, err := os.Stat(filepath.Join("/sys/class/net", l)); err == nil {
			left = append(left, "podVM link "+l)
		}
	}
	for _, ip := range h.everIPs {
		if out, err := exec.Command("ip", "route", "show", ip+"/32").Output(); err == nil && len(bytes.TrimSpace(out)) > 0 {
			left = append(left, "route "+string(bytes.TrimSpace(out)))
		}
	}
	for _, vm := range h.vms {
		left = append(left, "podVM "+vm.name+" still running")
	}
	return left
}

// PodVMLogs are the podVMs' logs (forwarder and stand-in agent), in boot
// order.
func (n *Node) PodVMLogs() []string {
	h := n.podVMHost()
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.everLogs)
}

// ListenInNetns listens on TCP addr inside the network namespace named
// name (under /run/netns): a test's stand-in for a server in the pod,
// reached through the pod's network as a client on the node reaches it.
// The socket keeps its namespace after the thread returns to the test's.
func ListenInNetns(name, addr string) (net.Listener, error) {
	target, err := os.Open(filepath.Join(netnsDir, name))
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	defer target.Close()
	type result struct {
		l   net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread enters the namespace and leaves it; were the way
		// back to fail, the thread stays locked and ends with the
		// goroutine, so no other goroutine runs in the wrong namespace.
		runtime.LockOSThread()
		self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			ch <- result{err: fmt.Errorf("node: %w", err)}
			return
		}
		defer self.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("node: setns %s: %w", name, err)}
			return
		}
		l, lerr := net.Listen("tcp", addr)
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			if l != nil {
				l.Close()
			}
			ch <- result{err: fmt.Errorf("node: setns back: %w", err)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{l, lerr}
	}()
	r := <-ch
	return r.l, r.err
}
