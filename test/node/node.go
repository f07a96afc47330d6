// Package node runs one real Kubernetes node on this machine for tests: a
// kubelet built from the k8s.io/kubernetes module, registered as a node to a
// test/controlplane API server with a node client certificate, over a
// project containerd build with runc and the reference CNI plugins (bridge,
// host-local, loopback), everything under one temporary directory. Stop
// removes every process, mount, network namespace, cgroup, link and file it
// made, and Residue says what is left. The binaries are built from the Go
// module proxy (`make node-e2e` does it); see docs/node-harness.md.
package node

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/caa-gcp-t4/test/controlplane"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Environment variables naming the binaries; `make node-e2e` sets them.
const (
	EnvKubelet    = "NODE_KUBELET"
	EnvContainerd = "NODE_CONTAINERD" // the containerd binary; ctr and containerd-shim-runc-v2 beside it
	// EnvContainerd17 is a containerd 1.7 binary, ctr and the runc shim
	// beside it: the release line GKE ran before 2.x, which the first
	// scenarios also run on (Options.Containerd).
	EnvContainerd17 = "NODE_CONTAINERD17"
	EnvCNIDir       = "NODE_CNI_DIR"
	EnvGcpT4Node    = "NODE_GCP_T4_NODE" // the gcp-t4-node command: the remediation sidecar
	EnvNydus        = "NODE_SNAPSHOTTER" // the nydus snapshotter stand-in (test/node/_snapshotter)
	MakeCommand     = "make node-e2e"
	netnsDir        = "/var/run/netns"
	cgroupMountRoot = "/sys/fs/cgroup"
)

// ErrNoBinaries is returned when the binaries are not configured or absent.
var ErrNoBinaries = errors.New("node binaries missing")

// Binaries are the executables a node runs. Runc is found on PATH
// (test/node/deps.sh installs it).
type Binaries struct {
	Kubelet, Containerd, Ctr, Shim, CNIDir, Runc string
	// ContainerdMajor is the containerd's major version, as it reports
	// it: 1 takes a version 2 configuration, 2 a version 3 one.
	ContainerdMajor int
}

// WithContainerd is b with another containerd (ctr and the runc shim
// beside it), checked as BinariesFromEnv checks NODE_CONTAINERD's.
func (b Binaries) WithContainerd(bin string) (Binaries, error) {
	b.Containerd = bin
	b.Ctr = filepath.Join(filepath.Dir(bin), "ctr")
	b.Shim = filepath.Join(filepath.Dir(bin), "containerd-shim-runc-v2")
	for _, p := range []string{b.Containerd, b.Ctr, b.Shim} {
		if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return b, fmt.Errorf("%w: %s is not an executable file; run `%s`, which builds containerd, ctr and the runc shim of each release it runs", ErrNoBinaries, p, MakeCommand)
		}
	}
	major, err := containerdMajor(bin)
	if err != nil {
		return b, err
	}
	b.ContainerdMajor = major
	return b, nil
}

// containerdMajor reads `containerd --version` ("containerd
// github.com/containerd/containerd 1.7.29+unknown", "… /v2 2.4.2 …").
func containerdMajor(bin string) (int, error) {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return 0, fmt.Errorf("%s --version: %w", bin, err)
	}
	f := strings.Fields(string(out))
	if len(f) >= 3 {
		v := strings.TrimPrefix(f[2], "v")
		if major, _, ok := strings.Cut(v, "."); ok {
			if n, err := strconv.Atoi(major); err == nil && (n == 1 || n == 2) {
				return n, nil
			}
		}
	}
	return 0, fmt.Errorf("%s --version printed %q: not a containerd 1.x or 2.x", bin, strings.TrimSpace(string(out)))
}

// BinariesFromEnv reads NODE_KUBELET, NODE_CONTAINERD and NODE_CNI_DIR and
// checks each file; the error says how to get them.
func BinariesFromEnv() (Binaries, error) {
	b := Binaries{Kubelet: os.Getenv(EnvKubelet), Containerd: os.Getenv(EnvContainerd), CNIDir: os.Getenv(EnvCNIDir)}
	var problems []string
	check := func(what, path string) {
		if path == "" {
			problems = append(problems, what+" is not set")
			return
		}
		if st, err := os.Stat(path); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			problems = append(problems, fmt.Sprintf("%s=%s is not an executable file", what, path))
		}
	}
	check(EnvKubelet, b.Kubelet)
	check(EnvContainerd, b.Containerd)
	if b.Containerd != "" {
		b.Ctr = filepath.Join(filepath.Dir(b.Containerd), "ctr")
		b.Shim = filepath.Join(filepath.Dir(b.Containerd), "containerd-shim-runc-v2")
		check("ctr beside "+EnvContainerd, b.Ctr)
		check("containerd-shim-runc-v2 beside "+EnvContainerd, b.Shim)
		if len(problems) == 0 {
			major, err := containerdMajor(b.Containerd)
			if err != nil {
				problems = append(problems, err.Error())
			}
			b.ContainerdMajor = major
		}
	}
	if b.CNIDir == "" {
		problems = append(problems, EnvCNIDir+" is not set")
	} else {
		for _, p := range []string{"bridge", "host-local", "loopback"} {
			check(p+" in "+EnvCNIDir, filepath.Join(b.CNIDir, p))
		}
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		problems = append(problems, "runc is not on PATH (test/node/deps.sh installs it)")
	}
	b.Runc = runc
	if len(problems) > 0 {
		return b, fmt.Errorf("%w: %s; run `%s`, which builds them once (cached by version) and runs the test", ErrNoBinaries, strings.Join(problems, "; "), MakeCommand)
	}
	return b, nil
}

// Image is the one image the harness imports: the pod's and the sandbox's.
const Image = "caa-gcp-t4.test/node-harness:v1"

// Options tune a node. The zero value needs ImageBinary.
type Options struct {
	// ImageBinary is a static Linux binary that becomes the image's
	// /sleeper entrypoint (test/node/sleeper).
	ImageBinary string
	// Logger receives the phases; nil discards them.
	Logger *slog.Logger
	// ReadyTimeout bounds each wait (containerd's socket, the Node Ready);
	// default 3 minutes, for a loaded 2-core machine.
	ReadyTimeout time.Duration
	// Kata, when set, adds the kata-remote runtime handler to containerd
	// as kata-deploy lays it out (kata.go); StartPeerPods then runs CAA.
	Kata *Kata
	// KataDeployNydus, without Kata, lays kata-remote out as kata-deploy's
	// chart does (Kata.KataDeployDropIn), its nydus snapshotter this
	// stand-in; the shim and its configuration are placeholders that no
	// pod runs (no kata-remote pod runs without the kata stage).
	KataDeployNydus string
	// KataDeployNoSnapshotter, without Kata, lays kata-remote out as
	// kata-deploy does without a snapshotter mapping for its remote shim:
	// its drop-in names no snapshotter and no nydus runs (placeholders as
	// for KataDeployNydus, which it excludes).
	KataDeployNoSnapshotter bool
	// Containerd, when set, is the containerd binary to run instead of
	// NODE_CONTAINERD's (ctr and the runc shim beside it): a 1.x one gets
	// a version 2 configuration.
	Containerd string
}

// Node is a running kubelet and containerd.
type Node struct {
	// Name is the Node object's name.
	Name string
	// Dir holds everything the node writes: state, logs, configs.
	Dir string
	// Socket is containerd's CRI and API socket.
	Socket string
	// IP is the node's InternalIP, where kubelet serves: the address of
	// the interface of the default route.
	IP string

	bin        Binaries
	cp         *controlplane.ControlPlane
	logger     *slog.Logger
	id         string
	bridge     string
	cgroupRoot string
	netnsSeen  map[string]bool
	netnsOurs  map[string]bool // at Stop: the namespaces its sandboxes' bundles name
	kata       *Kata

	mu         sync.Mutex
	procs      []*proc
	stopped    bool
	stopResult []string
	// madeSecrets: CAA's token directory was written (kata.go), and
	// Stop removes /run/secrets.
	madeSecrets bool
	// madeCAADir: CAA's directory under /run was made; Stop removes it.
	madeCAADir bool
	// shimDirs: kata's shim's directories under /run that were not there
	// when the node started (kata.go shimRunDirs); Stop removes them.
	shimDirs []string
	// syslog is the /dev/log this node serves for kata's shim, if it
	// made it (kata.go serveSyslog).
	syslog *net.UnixConn
	// podVMs boots the emulator's instances (podvm.go), when the kata
	// stage runs.
	podVMs *podVMHost
	// containerdStarted is when the running containerd first answered
	// (systemd's ActiveEnterTimestamp for its stand-in, systemd.go).
	containerdStarted time.Time
	// systemd is the stand-in for systemd's D-Bus API, when served.
	systemd *systemdStandIn
	// kataDeploy: kata-remote as kata-deploy's chart lays it out, with
	// this shim and nydus stand-in (Kata.KataDeployDropIn or
	// Options.KataDeployNydus).
	kataDeploy *kataDeployLayout
	// caa is CAA's process now; caaArgs and caaEnvs are the arguments
	// and environment it was started with, for RestartCAA.
	caa              *proc
	caaArgs, caaEnvs []string
	caaRestarts      int
}

// kataDeployLayout is what kata-deploy's drop-in names on this node.
type kataDeployLayout struct {
	shim, nydus string
}

// ControlPlaneFlags are the kube-apiserver flags a node needs beyond
// controlplane's: the Node authorizer and NodeRestriction, so the kubelet
// is judged as a real node is. Pass them as Options.ExtraAPIServerFlags.
var ControlPlaneFlags = []string{
	// Appended to the RBAC mode controlplane sets (the flag is a list).
	"--authorization-mode=Node",
	"--enable-admission-plugins=NodeRestriction",
	// Logs and exec reach the kubelet at the address it reports: a
	// node's Hostname does not resolve here.
	"--kubelet-preferred-address-types=InternalIP",
}

// Start brings up containerd, imports the image and starts kubelet, then
// waits until the Node is Ready. On error everything started is removed.
func Start(ctx context.Context, bin Binaries, cp *controlplane.ControlPlane, opts Options) (n *Node, err error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	timeout := opts.ReadyTimeout
	if timeout <= 0 {
		timeout = 3 * time.Minute
	}
	idb := make([]byte, 3)
	if _, err := rand.Read(idb); err != nil {
		return nil, err
	}
	id := hex.EncodeToString(idb)
	n = &Node{
		Name:       "node-harness-" + id,
		bin:        bin,
		cp:         cp,
		logger:     logger,
		id:         id,
		bridge:     "nh" + id,                 // a link name: 15 bytes at most
		cgroupRoot: "/caa-node-harness-" + id, // under each v1 hierarchy
		kata:       opts.Kata,
	}
	// Network namespaces are named by containerd, not by us: what is new
	// after the node is gone was made by it.
	if n.netnsSeen, err = listNetns(); err != nil {
		return nil, err
	}
	if n.Dir, err = os.MkdirTemp("", "node-harness-"); err != nil {
		return nil, fmt.Errorf("node: temporary directory: %w", err)
	}
	defer func() {
		if err != nil {
			if stopErr := n.Stop(); stopErr != nil {
				err = errors.Join(err, stopErr)
			}
			n = nil
		}
	}()
	n.Socket = filepath.Join(n.Dir, "containerd.sock")
	for _, d := range []string{"containerd/root", "containerd/state", "cni/net.d", "cni/ipam", "kubelet/root", "kubelet/pki", "kubelet/pod-logs", "kubelet/volume-plugins"} {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	if err := n.makeCgroupRoot(); err != nil {
		return nil, err
	}
	if err := n.writeCNI(); err != nil {
		return nil, err
	}
	if n.kata != nil {
		if err := n.writeKataConfig(n.kata); err != nil {
			return nil, err
		}
		if err := n.serveSyslog(); err != nil {
			return nil, err
		}
	}

	switch {
	case n.kata != nil && n.kata.KataDeployDropIn:
		n.kataDeploy = &kataDeployLayout{shim: n.kata.Shim, nydus: n.kata.Nydus}
	case n.kata == nil && (opts.KataDeployNydus != "" || opts.KataDeployNoSnapshotter):
		if opts.KataDeployNydus != "" && opts.KataDeployNoSnapshotter {
			return nil, errors.New("node: Options.KataDeployNydus and KataDeployNoSnapshotter: kata-deploy runs its nydus only for a snapshotter mapping; set one")
		}
		shim, err := n.placeholderKata()
		if err != nil {
			return nil, err
		}
		n.kataDeploy = &kataDeployLayout{shim: shim, nydus: opts.KataDeployNydus}
	}
	if n.kataDeploy != nil && n.kataDeploy.nydus != "" {
		if err := n.startNydus(ctx); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	if err := n.startContainerd(ctx, timeout); err != nil {
		return nil, err
	}
	logger.Info("containerd up", "took", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	tarPath := filepath.Join(n.Dir, "image.tar")
	if err := writeImage(tarPath, opts.ImageBinary, Image); err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, bin.Ctr, "--address", n.Socket, "--namespace", "k8s.io", "images", "import", tarPath).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("node: ctr images import: %w: %s", err, out)
	}
	logger.Info("image imported", "image", Image, "took", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	if err := n.startKubelet(); err != nil {
		return nil, err
	}
	if err := n.waitReady(ctx, timeout); err != nil {
		return nil, err
	}
	logger.Info("node Ready", "node", n.Name, "took", time.Since(start).Round(time.Millisecond))
	return n, nil
}

func (n *Node) path(p string) string { return filepath.Join(n.Dir, p) }

// writeCNI writes the bridge conflist containerd's CRI reads. The subnet is
// one /24 of 10.244.0.0/16 chosen by the node's id, so two harnesses on one
// machine rarely meet; no masquerade and no port maps, so no iptables rule
// is made that teardown would have to find. A default route through the
// bridge, as every cluster CNI gives a pod: CAA finds the pod's primary
// interface by it ("failed to identify primary interface" without).
func (n *Node) writeCNI() error {
	subnet := fmt.Sprintf("10.244.%d.0/24", int(n.id[0])%200+10)
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "node-harness",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "loopback"}
  ]
}
`, n.bridge, n.path("cni/ipam"), subnet)
	return os.WriteFile(n.path("cni/net.d/10-node-harness.conflist"), []byte(conf), 0o600)
}

// containerdConfig is the node's containerd configuration: version 3, the
// node's own paths, runc, and with the kata stage the kata-remote handler
// (inline, or in kata-deploy's drop-in imported by its literal path when
// Kata.KataDeployDropIn or Options.KataDeployNydus is set).
func (n *Node) containerdConfig() (string, error) {
	// Config version 3 (containerd 2.x): its own root, state, sockets and
	// CNI directories; runc through the runc shim with cgroupfs, as
	// kubelet's cgroupDriver says; the image as the pinned sandbox image,
	// so kubelet's image GC keeps it.
	conf := fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[metrics]
  address = ""

[plugins.'io.containerd.internal.v1.opt']
  path = %[5]q

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = %[6]q

[plugins.'io.containerd.cri.v1.runtime']
  # This machine's root may not lower a process's oom_score_adj (runc:
  # "failed to update /proc/self/oom_score_adj: Permission denied" for the
  # sandbox's -998); keep it no lower than containerd's own, as a
  # containerd inside a container must.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[7]q]
    conf_dir = %[8]q
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %[9]q
        SystemdCgroup = false
`, n.path("containerd/root"), n.path("containerd/state"), n.Socket, n.Socket+".ttrpc",
		n.path("containerd/opt"), Image, n.bin.CNIDir, n.path("cni/net.d"), n.bin.Runc)
	if n.bin.ContainerdMajor == 1 {
		return n.containerdConfigV2()
	}
	switch {
	case n.kataDeploy != nil:
		dropIn := n.KataDeployDropIn()
		if err := os.MkdirAll(filepath.Dir(dropIn), 0o755); err != nil {
			return "", fmt.Errorf("node: %w", err)
		}
		data, err := n.kataDeployDropIn()
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(dropIn, []byte(data), 0o644); err != nil {
			return "", fmt.Errorf("node: kata-deploy's drop-in: %w", err)
		}
		conf = strings.Replace(conf, "version = 3\n", fmt.Sprintf("version = 3\nimports = [%q]\n", dropIn), 1)
	case n.kata != nil:
		conf += n.kataRuntime(n.kata)
	}
	return conf, nil
}

// containerdConfigV2 is containerdConfig for containerd 1.7, whose
// configuration is version 2: the CRI plugin is one,
// io.containerd.grpc.v1.cri, holding what 2.x splits into its images and
// runtime plugins (sandbox_image for pinned_images.sandbox, a single
// cni.bin_dir), the runtimes under it as in 2.x. kata-deploy's drop-in
// layout is the remediation fixtures' version 3 one, so it is refused here.
func (n *Node) containerdConfigV2() (string, error) {
	if n.kataDeploy != nil {
		return "", errors.New("node: kata-deploy's drop-in layout is laid out for containerd 2.x (its fixture is a version 3 file); containerd 1.7 runs the inline handler")
	}
	conf := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  # As in containerdConfig: this machine's root may not lower its own
  # oom_score_adj.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[7]q
    conf_dir = %[8]q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %[9]q
        SystemdCgroup = false
`, n.path("containerd/root"), n.path("containerd/state"), n.Socket, n.Socket+".ttrpc",
		n.path("containerd/opt"), Image, n.bin.CNIDir, n.path("cni/net.d"), n.bin.Runc)
	if n.kata != nil {
		conf += strings.ReplaceAll(n.kataRuntime(n.kata), `'io.containerd.cri.v1.runtime'`, `"io.containerd.grpc.v1.cri"`)
	}
	return conf, nil
}

// ContainerdConfig is the path of containerd's main configuration file.
func (n *Node) ContainerdConfig() string { return n.path("containerd/config.toml") }

func (n *Node) startContainerd(ctx context.Context, timeout time.Duration) error {
	conf, err := n.containerdConfig()
	if err != nil {
		return err
	}
	if err := os.WriteFile(n.ContainerdConfig(), []byte(conf), 0o600); err != nil {
		return fmt.Errorf("node: containerd config: %w", err)
	}
	return n.runContainerd(ctx, timeout)
}

// runContainerd starts containerd with the configuration file as it is and
// waits until it answers.
func (n *Node) runContainerd(ctx context.Context, timeout time.Duration) error {
	cfg := n.ContainerdConfig()
	// The shim is found on PATH, beside containerd.
	env := append(os.Environ(), "PATH="+filepath.Dir(n.bin.Containerd)+":"+os.Getenv("PATH"))
	if n.kata != nil {
		// The shims inherit containerd's environment: a shim built with
		// -race writes its reports here (one file per process), where the
		// kata tests read them; other binaries ignore the variable.
		env = append(env, "GORACE=log_path="+n.path("race/shim"))
		if err := os.MkdirAll(n.path("race"), 0o700); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	p, err := n.start("containerd", env, n.bin.Containerd, "--config", cfg, "--log-level", "info")
	if err != nil {
		return err
	}
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if err := p.exited(); err != nil {
			return err
		}
		if out, err := exec.CommandContext(waitCtx, n.bin.Ctr, "--address", n.Socket, "version").CombinedOutput(); err == nil && strings.Contains(string(out), "Server:") {
			n.mu.Lock()
			n.containerdStarted = time.Now()
			n.mu.Unlock()
			return nil
		}
		select {
		case <-waitCtx.Done():
			return fmt.Errorf("node: containerd did not answer on %s: %w; log ends:\n%s", n.Socket, waitCtx.Err(), tail(p.log, 2000))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (n *Node) startKubelet() error {
	// kubelet refuses a loopback node IP ("nodeIP can't be loopback
	// address") and then reports no address, which leaves the API server
	// no way to reach it for logs: it serves on the default route's.
	ip, err := defaultRouteIP()
	if err != nil {
		return err
	}
	n.IP = ip
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	kubeconfig := n.path("kubelet/kubeconfig")
	// A node's identity, as TLS bootstrap would give it: the Node
	// authorizer and NodeRestriction limit it to its own objects.
	if err := n.cp.WriteCertKubeconfig(kubeconfig, "system:node:"+n.Name, "system:nodes"); err != nil {
		return err
	}
	conf := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The hierarchy is cgroup v1 and PID 1 is not systemd.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]s
containerRuntimeEndpoint: unix://%[2]s
address: %[8]s
port: %[3]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[4]d
# Only the API server's kubelet client certificate (controlplane's CA)
# gets in, and what it may do is asked of the API server.
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: %[5]s
authorization:
  mode: Webhook
failSwapOn: false
podLogsDir: %[6]s
volumePluginDir: %[7]s
# A shared, loaded machine: thresholds no test should trip.
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`, n.cgroupRoot, n.Socket, ports[0], ports[1], n.cp.CAFile(), n.path("kubelet/pod-logs"), n.path("kubelet/volume-plugins"), ip)
	cfg := n.path("kubelet/config.yaml")
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		return fmt.Errorf("node: kubelet config: %w", err)
	}
	_, err = n.start("kubelet", os.Environ(), n.bin.Kubelet,
		"--config="+cfg,
		"--kubeconfig="+kubeconfig,
		"--root-dir="+n.path("kubelet/root"),
		"--cert-dir="+n.path("kubelet/pki"),
		"--hostname-override="+n.Name,
		"--node-ip="+ip,
		"--v=2",
	)
	return err
}

// waitReady waits for the Node object and its Ready condition.
func (n *Node) waitReady(ctx context.Context, timeout time.Duration) error {
	cs, err := kubernetes.NewForConfig(n.cp.Config())
	if err != nil {
		return fmt.Errorf("node: client: %w", err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := "no Node object yet"
	for {
		if err := n.procs[len(n.procs)-1].exited(); err != nil {
			return err
		}
		node, err := cs.CoreV1().Nodes().Get(waitCtx, n.Name, metav1.GetOptions{})
		if err == nil {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady {
					if c.Status == corev1.ConditionTrue {
						return nil
					}
					last = fmt.Sprintf("Ready=%s: %s", c.Status, c.Message)
				}
			}
		}
		select {
		case <-waitCtx.Done():
			return fmt.Errorf("node: %s not Ready: %w (%s); kubelet log ends:\n%s", n.Name, waitCtx.Err(), last, n.LogTail("kubelet", 3000))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// LogTail returns the last n bytes of a process's log ("kubelet",
// "containerd").
func (n *Node) LogTail(name string, size int) string {
	return tail(n.path(name+".log"), size)
}

// PIDs are the process ids of kubelet and containerd, for a test to check
// they are gone after Stop.
func (n *Node) PIDs() map[string]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	m := map[string]int{}
	for _, p := range n.procs {
		m[p.name] = p.cmd.Process.Pid
	}
	return m
}

type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func (n *Node) start(name string, env []string, bin string, args ...string) (*proc, error) {
	logPath := n.path(name + ".log")
	// Appended: a process started again (containerd restarted) keeps
	// its earlier lines.
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("node: log file: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so a Ctrl-C reaches only the test, whose
	// teardown then stops the node in order; Pdeathsig, so a test killed
	// outright takes the daemons with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("node: start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	n.mu.Lock()
	n.procs = append(n.procs, p)
	n.mu.Unlock()
	return p, nil
}

func (p *proc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("node: %s exited (%v); log %s ends:\n%s", p.name, p.err, p.log, tail(p.log, 3000))
	default:
		return nil
	}
}

func (p *proc) stop(grace time.Duration) (forced bool) {
	select {
	case <-p.done:
		return false
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return false
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return true
	}
}

func tail(path string, size int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(data) > size {
		data = data[len(data)-size:]
	}
	return string(data)
}

func freePorts(count int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range count {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("node: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func listNetns() (map[string]bool, error) {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("node: list %s: %w", netnsDir, err)
	}
	m := map[string]bool{}
	for _, e := range entries {
		m[e.Name()] = true
	}
	return m, nil
}

// cgroupHierarchies are the v1 hierarchies mounted under /sys/fs/cgroup
// (named after their controllers); with unified, also the cgroup2 one a
// hybrid layout mounts beside them (kubelet makes the node's tree there
// too).
func cgroupHierarchies(unified bool) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("node: mountinfo: %w", err)
	}
	defer f.Close()
	var dirs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+1 >= len(fields) || !(fields[sep+1] == "cgroup" || unified && fields[sep+1] == "cgroup2") {
			continue
		}
		if strings.HasPrefix(fields[4], cgroupMountRoot+"/") && !slices.Contains(dirs, fields[4]) {
			dirs = append(dirs, fields[4])
		}
	}
	return dirs, sc.Err()
}

// makeCgroupRoot creates the node's cgroupRoot in every hierarchy: kubelet
// requires it to exist, and one root per node is what teardown removes.
func (n *Node) makeCgroupRoot() error {
	dirs, err := cgroupHierarchies(false)
	if err != nil {
		return err
	}
	if len(dirs) == 0 {
		return fmt.Errorf("node: no cgroup v1 hierarchy under %s; the harness is written for the v1 machines it runs on", cgroupMountRoot)
	}
	for _, d := range dirs {
		p := filepath.Join(d, n.cgroupRoot)
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("node: cgroup %s: %w", p, err)
		}
		// A new cpuset has no CPUs or memory nodes until given its
		// parent's.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(d, f)); err == nil {
				if err := os.WriteFile(filepath.Join(p, f), v, 0o644); err != nil {
					return fmt.Errorf("node: cgroup %s: %w", filepath.Join(p, f), err)
				}
			}
		}
	}
	return nil
}

// defaultRouteIP is the first IPv4 address of the interface the default
// route leaves by (/proc/net/route).
func defaultRouteIP() (string, error) {
	data, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return "", fmt.Errorf("node: routes: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 2 || f[1] != "00000000" {
			continue
		}
		iface, err := net.InterfaceByName(f[0])
		if err != nil {
			return "", fmt.Errorf("node: default route's interface %s: %w", f[0], err)
		}
		addrs, err := iface.Addrs()
		if err != nil {
			return "", fmt.Errorf("node: addresses of %s: %w", f[0], err)
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				return ipn.IP.String(), nil
			}
		}
	}
	return "", errors.New("node: no IPv4 default route; kubelet needs a non-loopback node IP the API server can reach")
}
