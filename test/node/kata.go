package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Environment variables naming the kata stage's executables; `make
// node-e2e UPSTREAM=… KATA=…` builds them from the two checkouts and sets
// them. With none set the kata test skips; with some, it fails naming the
// others.
const (
	EnvKataShim   = "NODE_KATA_SHIM"    // containerd-shim-kata-v2 built from KATA
	EnvKataConfig = "NODE_KATA_CONFIG"  // configuration-remote.toml rendered by KATA's src/runtime Makefile
	EnvCAA        = "NODE_CAA"          // cloud-api-adaptor from UPSTREAM with our series, -tags gcp_t4
	EnvGCE        = "NODE_GCE_EMULATOR" // gcp-t4/internal/demo/gceonly: the seeded emulator alone
	EnvGcpT4      = "NODE_GCP_T4"       // the gcp-t4 command: install renders and applies our manifests
	EnvEntrypoint = "NODE_CAA_ENTRYPOINT"
	EnvForwarder  = "NODE_FORWARDER" // agent-protocol-forwarder from UPSTREAM (the podVM's side of CAA)
	EnvAgent      = "NODE_AGENT"     // the stand-in kata-agent (test/node/_agent) built against KATA

	// KataMakeCommand builds them and runs the kata test.
	KataMakeCommand = "make node-e2e UPSTREAM=<CAA checkout> KATA=<kata-containers checkout>"
	// KataHandler is the runtime handler and RuntimeClass kata-deploy
	// makes for the remote shim.
	KataHandler = "kata-remote"
	// kataTimeout is the sidecar's create_container_timeout (gcp-t4
	// install's default, 20 minutes).
	kataTimeout = 1200
	// secretsDir is where client-go's InClusterConfig, and gcp-t4's
	// cluster ID check, read a pod's ServiceAccount token; CAA reads
	// nothing else, so a host process gets its identity there.
	secretsDir = "/run/secrets/kubernetes.io/serviceaccount"
)

// ErrNoKata is returned by KataFromEnv when none of the kata stage's
// variables is set: the caller skips.
var ErrNoKata = errors.New("the kata stage's binaries are not given")

// Kata are the executables and files of the kata stage.
type Kata struct {
	Shim, Config, CAA, GCE, GcpT4, Entrypoint string
	// GcpT4Node is the node binary (the remediation sidecar).
	GcpT4Node string
	// Nydus is the nydus snapshotter stand-in (KataDeployDropIn).
	Nydus string
	// Forwarder and Agent run in each podVM (podvm.go).
	Forwarder, Agent string
	// WebhookBin is CAA's peer-pods webhook (upstream src/webhook),
	// built from UPSTREAM (webhook.go).
	WebhookBin string
	// Webhook runs WebhookBin and registers it with the API server
	// (Node.StartWebhook) before any pod is made: a pod's cpu, memory and
	// nvidia.com/gpu requests become kata's default_vcpus, default_memory
	// and default_gpus annotations, and its first container requests
	// kata.peerpods.io/vm, as on a cluster with upstream's webhook
	// installed (docs/install.md).
	Webhook bool
	// AgentPull is the stand-in agent's modelled in-guest pull time per
	// image (test/node/_agent/pull.go); a test sets it.
	AgentPull time.Duration
	// AgentImages is the modelled registry: an image reference's config
	// digest (the stand-in's -image); others get a digest of their name.
	AgentImages map[string]string
	// AgentPullFailures is how many pulls in each podVM fail halfway
	// before one succeeds (the stand-in's -pull-failures).
	AgentPullFailures int
	// Cache, when set, installs with GCP_CACHE_IMAGE (the emulator's
	// CacheImage) and its dm-verity value, so the provider attaches the
	// cache disk to every podVM; a podVM that has it starts its stand-in
	// agent with these config digests in the pre-unpacked store (what
	// podvm-cache-store hands image-rs from the disk: modelled, the disk
	// holds no bytes here).
	Cache []string
	// NoTimeoutDropIn leaves out the remediation sidecar's
	// create_container_timeout drop-in: kata's own default (60 s) holds.
	NoTimeoutDropIn bool
	// KataDeployDropIn lays kata-remote out as kata-deploy 4.0.0 does on
	// containerd 2.x with its chart's nydus mapping for the remote shim:
	// its drop-in <kata-dir>/containerd/config.d/kata-deploy.toml,
	// imported by the main file by its literal path (config.rs
	// containerd_drop_in_conf_file at cf82bb35), not inline; the drop-in
	// is the remediation tests' fixture of it, with the node's paths; its
	// nydus-for-kata-tee snapshotter is the stand-in (Nydus).
	KataDeployDropIn bool
	// Remediation: gcp-t4 install adds the remediation sidecar's objects
	// (--gke=on), whose ServiceAccount the sidecar's process runs as.
	Remediation bool
	// Containerd, when set, runs that containerd (Options.Containerd)
	// instead of NODE_CONTAINERD's.
	Containerd string
	// Spot installs CAA with GCP_PROVISIONING_MODEL=SPOT (gcp-t4 install
	// --set, into peer-pods-cm as an admin would), so the provider makes
	// the pod a Spot VM, which GCE may preempt.
	Spot bool
}

// KataDir is kata-deploy's install directory on this node (/opt/kata on
// a real one).
func (n *Node) KataDir() string { return n.path("opt-kata") }

// KataDeployDropIn is kata-deploy's containerd drop-in under KataDir.
func (n *Node) KataDeployDropIn() string {
	return filepath.Join(n.KataDir(), "containerd", "config.d", "kata-deploy.toml")
}

// kataDeployFixture is kata-deploy 4.x's drop-in over a version 3 main
// file, as the remediation tests hold it; kataDeployFixtureNoSnapshotter
// the same without a snapshotter mapping for the remote shim.
const (
	kataDeployFixture              = "../../gcp-t4/internal/remediate/testdata/kata-deploy-4.x-dropin-v3.toml"
	kataDeployFixtureNoSnapshotter = "../../gcp-t4/internal/remediate/testdata/kata-deploy-4.x-dropin-v3-nosnapshotter.toml"
)

// nydusSocket is the nydus snapshotter stand-in's socket on this node
// (/run/nydus-for-kata-tee/containerd-nydus-grpc.sock on a real one).
func (n *Node) nydusSocket() string { return n.path("nydus/containerd-nydus-grpc.sock") }

// kataDeployDropIn is the fixture with this node's paths: the shim, its
// configuration, the snapshotter's socket and root.
func (n *Node) kataDeployDropIn() (string, error) {
	fixture := kataDeployFixture
	subst := [][2]string{
		{`"/opt/kata/bin/containerd-shim-kata-v2"`, fmt.Sprintf("%q", n.kataDeploy.shim)},
		{`"/opt/kata/share/defaults/kata-containers/runtimes/remote/configuration-remote.toml"`, fmt.Sprintf("%q", n.kataConfigPath())},
		{`"/run/nydus-for-kata-tee/containerd-nydus-grpc.sock"`, fmt.Sprintf("%q", n.nydusSocket())},
		{`"/var/lib/nydus-for-kata-tee"`, fmt.Sprintf("%q", n.path("nydus/root"))},
	}
	if n.kataDeploy.nydus == "" {
		fixture, subst = kataDeployFixtureNoSnapshotter, subst[:2]
	}
	data, err := os.ReadFile(fixture)
	if err != nil {
		return "", fmt.Errorf("node: kata-deploy's drop-in fixture: %w", err)
	}
	s := string(data)
	for _, r := range subst {
		if !strings.Contains(s, r[0]) {
			return "", fmt.Errorf("node: %s has no %s; the fixture changed", fixture, r[0])
		}
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	return s, nil
}

// placeholderKata writes, for a node without the kata stage, what
// kata-deploy installs that containerd's kata-remote handler and the
// remediation sidecar name: a shim that only says it is a placeholder (no
// pod runs it) and a kata-remote configuration file with its config.d
// (the sidecar, run with --create-container-timeout=0, leaves both alone).
// It returns the shim's path.
func (n *Node) placeholderKata() (string, error) {
	shim := filepath.Join(n.KataDir(), "bin", "containerd-shim-kata-v2")
	cfg := n.kataConfigPath()
	for _, d := range []string{filepath.Dir(shim), filepath.Join(filepath.Dir(cfg), "config.d")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", fmt.Errorf("node: %w", err)
		}
	}
	if err := os.WriteFile(shim, []byte("#!/bin/sh\necho 'the node harness has no kata shim here: a placeholder for containerd'\\''s kata-remote handler' >&2\nexit 1\n"), 0o755); err != nil {
		return "", fmt.Errorf("node: %w", err)
	}
	if err := os.WriteFile(cfg, []byte("# The node harness's placeholder: no kata-remote pod runs on this node.\n[hypervisor.remote]\n"), 0o644); err != nil {
		return "", fmt.Errorf("node: %w", err)
	}
	return shim, nil
}

// startNydus starts the snapshotter stand-in kata-deploy's drop-in names,
// before containerd, and waits for its socket.
func (n *Node) startNydus(ctx context.Context) error {
	if err := os.MkdirAll(n.path("nydus/root"), 0o700); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	p, err := n.start("nydus-standin", os.Environ(), n.kataDeploy.nydus, n.nydusSocket(), n.path("nydus/root"))
	if err != nil {
		return err
	}
	return waitFor(ctx, 30*time.Second, "the snapshotter stand-in's socket", func() (bool, error) {
		if err := p.exited(); err != nil {
			return false, err
		}
		_, err := os.Stat(n.nydusSocket())
		return err == nil, nil
	})
}

// KataFromEnv reads the kata stage's variables. None set: ErrNoKata.
// Some set: an error naming what is missing and the command that sets
// them all.
func KataFromEnv() (Kata, error) {
	k := Kata{Shim: os.Getenv(EnvKataShim), Config: os.Getenv(EnvKataConfig), CAA: os.Getenv(EnvCAA),
		GCE: os.Getenv(EnvGCE), GcpT4: os.Getenv(EnvGcpT4), Entrypoint: os.Getenv(EnvEntrypoint),
		Forwarder: os.Getenv(EnvForwarder), Agent: os.Getenv(EnvAgent), GcpT4Node: os.Getenv(EnvGcpT4Node), Nydus: os.Getenv(EnvNydus),
		WebhookBin: os.Getenv(EnvWebhook)}
	// The sidecar and the nydus stand-in are not the kata stage's: e2e.sh
	// builds them for every run; a test that needs one checks it.
	vars := []struct {
		name, val string
		exec      bool
	}{{EnvKataShim, k.Shim, true}, {EnvKataConfig, k.Config, false}, {EnvCAA, k.CAA, true},
		{EnvGCE, k.GCE, true}, {EnvGcpT4, k.GcpT4, true}, {EnvEntrypoint, k.Entrypoint, true},
		{EnvForwarder, k.Forwarder, true}, {EnvAgent, k.Agent, true}, {EnvWebhook, k.WebhookBin, true}}
	set := 0
	var problems []string
	for _, v := range vars {
		if v.val == "" {
			problems = append(problems, v.name+" is not set")
			continue
		}
		set++
		st, err := os.Stat(v.val)
		if err != nil || st.IsDir() || (v.exec && st.Mode()&0o111 == 0) {
			problems = append(problems, fmt.Sprintf("%s=%s is not a file%s", v.name, v.val, map[bool]string{true: " that can be run", false: ""}[v.exec]))
		}
	}
	if set == 0 {
		return k, ErrNoKata
	}
	if len(problems) > 0 {
		return k, fmt.Errorf("%s; run `%s`, which builds them (cached by commit) and sets them all", strings.Join(problems, "; "), KataMakeCommand)
	}
	return k, nil
}

// kataConfigPath is kata-remote's configuration as kata-deploy lays it out
// under its prefix (/opt/kata there, the node's directory here): the
// remote shim's own copy, with config.d beside it.
func (n *Node) kataConfigPath() string {
	return n.path("opt-kata/share/defaults/kata-containers/runtimes/remote/configuration-remote.toml")
}

// shimRunDirs are the directories kata's shim makes under /run on the
// node (its sandbox state, its shared directory's parent).
var shimRunDirs = []string{"/run/vc", "/run/kata-containers"}

// removeShimTree removes dir, which this run's shims made (it was absent
// when the node started), and says how many files were in it: none after
// a clean run (the shim leaves only empty directories); a killed
// sandbox's state (persist.json, its monitor socket) after an interrupt.
func removeShimTree(dir string) (removed bool, files int, err error) {
	err = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			files++
		}
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return false, 0, nil
	}
	if err != nil {
		return false, files, fmt.Errorf("node: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return false, files, fmt.Errorf("node: %w", err)
	}
	return true, files, nil
}

// caaDir is CAA's directory on this node, /run/peerpod's stand-in (the
// DaemonSet's hostPath): short, because CAA listens on
// <pods-dir>/<64-hex sandbox id>/agent.ttrpc and a unix socket path has
// 107 bytes at most (under the node's temporary directory it had 118:
// "failed to listen on …/agent.ttrpc").
func (n *Node) caaDir() string { return "/run/caa-nh-" + n.id }

// CAASocket is where CAA serves the remote hypervisor API and kata's
// configuration points the shim (/run/peerpod/hypervisor.sock on a node).
func (n *Node) CAASocket() string { return filepath.Join(n.caaDir(), "hypervisor.sock") }

var socketLine = regexp.MustCompile(`(?m)^remote_hypervisor_socket = .*$`)

// writeKataConfig copies the rendered configuration-remote.toml with the
// remote hypervisor socket pointed at this node's CAA, and writes the
// remediation sidecar's create_container_timeout drop-in in config.d,
// byte for byte as the sidecar writes it.
func (n *Node) writeKataConfig(k *Kata) error {
	base, err := os.ReadFile(k.Config)
	if err != nil {
		return fmt.Errorf("node: %s: %w", EnvKataConfig, err)
	}
	if !socketLine.Match(base) {
		return fmt.Errorf("node: %s=%s has no remote_hypervisor_socket line; give the configuration-remote.toml KATA's src/runtime Makefile renders", EnvKataConfig, k.Config)
	}
	base = socketLine.ReplaceAll(base, []byte(fmt.Sprintf("remote_hypervisor_socket = %q", n.CAASocket())))
	cfg := n.kataConfigPath()
	if err := os.MkdirAll(filepath.Join(filepath.Dir(cfg), "config.d"), 0o755); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.mu.Lock()
	n.madeCAADir = true
	// kata's shim makes these on the node and leaves them, empty, after
	// its sandboxes are gone (and with a sandbox's state in them when the
	// shim was killed); Stop removes the ones that were not there before.
	for _, d := range shimRunDirs {
		if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
			n.shimDirs = append(n.shimDirs, d)
		}
	}
	n.mu.Unlock()
	if err := os.Mkdir(n.caaDir(), 0o700); err != nil {
		return fmt.Errorf("node: CAA's directory: %w", err)
	}
	if err := os.WriteFile(cfg, base, 0o644); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if k.NoTimeoutDropIn {
		return nil
	}
	// gcp-t4/internal/remediate/katatimeout.go kataDropIn.
	dropIn := fmt.Sprintf("# Written by gcp-t4-node remediate (caa-gcp-t4).\n# kata-remote's create_container_timeout: the agent's CreateContainer, guest pull\n# included. Set with gcp-t4 install --create-container-timeout; removed on uninstall.\n[runtime]\ncreate_container_timeout = %d\n", kataTimeout)
	return os.WriteFile(filepath.Join(filepath.Dir(cfg), "config.d", "90-gcp-t4-create-container-timeout.toml"), []byte(dropIn), 0o644)
}

// kataRuntime is the containerd runtime table kata-deploy 4.0.0 writes for
// the remote shim (tools/packaging/kata-deploy/binary/src/runtime/
// containerd.rs at cf82bb35), with the shim and configuration under the
// node's directory instead of /opt/kata. No snapshotter: kata-deploy sets
// one only when asked (nydus, for guest pull), and the image here is on
// the node.
func (n *Node) kataRuntime(k *Kata) string {
	return fmt.Sprintf(`    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.%[1]s]
      runtime_type = "io.containerd.%[1]s.v2"
      runtime_path = %[2]q
      privileged_without_host_devices = true
      pod_annotations = ["io.katacontainers.*"]
      container_annotations = ["io.kubernetes.container.terminationMessage*"]
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.%[1]s.options]
        ConfigPath = %[3]q
`, KataHandler, k.Shim, n.kataConfigPath())
}

// PeerPods is what StartPeerPods started: the emulator CAA creates its
// podVMs in, and CAA itself.
type PeerPods struct {
	// GCE is the emulator's endpoint; Project its project.
	GCE, Project string
	// Control is the emulator's test-only control endpoint (gceonly
	// -test-control, on loopback): GCE's own events on an instance.
	Control string
	// Namespace is where gcp-t4 install put CAA.
	Namespace string
}

// installNamespace is gcp-t4 install's namespace (install.Namespace).
const installNamespace = "confidential-containers-system"

var (
	gceLine     = regexp.MustCompile(`GCE emulator: (\S+) \(project (\S+)\)`)
	controlLine = regexp.MustCompile(`GCE emulator test control: (\S+)`)
)

// InstallArgs are the `gcp-t4 install` arguments that put our manifests on
// this node's API server: the demo's install (gcp-t4/internal/demo
// serve.go) with the emulator's endpoint and the stage's options.
func (n *Node) InstallArgs(k *Kata, pp *PeerPods) []string {
	args := []string{"install", "--kubeconfig", n.cp.Kubeconfig, "--project", pp.Project, "--zone", "us-central1-a",
		"--podvm-image", "podvm-t4", "--network", "global/networks/default", "--subnetwork", "default",
		"--set", "GCP_ENDPOINT=" + pp.GCE, "--set", "GCP_ZONES=us-central1-b,us-central1-f",
		"--runtimeclass=on", "--wait=false"}
	if len(k.Cache) > 0 {
		args = append(args, "--set", "GCP_CACHE_IMAGE="+CacheImage, "--set", "GCP_CACHE_VERITY="+CacheVerity)
	}
	if k.Remediation {
		args = append(args, "--gke=on")
	}
	if k.Spot {
		args = append(args, "--set", "GCP_PROVISIONING_MODEL=SPOT")
	}
	return args
}

// StartPeerPods runs the rest of the kata stage against the node: the GCE
// emulator, `gcp-t4 install` (our manifests: RBAC, CRD, RuntimeClass, the
// DaemonSet and its ConfigMap, pointed at the emulator), and CAA as the
// DaemonSet's container would run it, but as a host process: through our
// image's entrypoint.sh, with the ConfigMap's and Secret's variables and
// NODE_NAME, and a token of its ServiceAccount where InClusterConfig reads
// one. The node is labelled as kata-deploy labels it. It returns once CAA
// serves its socket and has advertised its extended resource on the Node.
func (n *Node) StartPeerPods(ctx context.Context, k *Kata) (*PeerPods, error) {
	if _, err := os.Stat("/run/secrets"); err == nil {
		return nil, errors.New("node: /run/secrets exists on this machine; the harness gives CAA its ServiceAccount token there and removes it after, so it will not run where something else keeps one (another harness run, or this machine is a pod)")
	}
	cs, err := kubernetes.NewForConfig(n.cp.Config())
	if err != nil {
		return nil, fmt.Errorf("node: client: %w", err)
	}
	gce, err := n.start("gce-emulator", os.Environ(), k.GCE, "-test-control", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	pp := &PeerPods{Namespace: installNamespace}
	if err := waitFor(ctx, time.Minute, "the GCE emulator's endpoint line", func() (bool, error) {
		if err := gce.exited(); err != nil {
			return false, err
		}
		data, _ := os.ReadFile(gce.log)
		if m := gceLine.FindSubmatch(data); m != nil {
			pp.GCE, pp.Project = string(m[1]), string(m[2])
			if c := controlLine.FindSubmatch(data); c != nil {
				pp.Control = string(c[1])
			}
			return true, nil
		}
		return false, nil
	}); err != nil {
		return nil, err
	}
	n.logger.Info("GCE emulator up", "endpoint", pp.GCE, "project", pp.Project)
	// Each instance CAA creates is booted as a podVM: its forwarder and
	// agent (podvm.go).
	if err := n.startPodVMs(k, pp.GCE, pp.Project); err != nil {
		return nil, err
	}

	args := n.InstallArgs(k, pp)
	out, err := exec.CommandContext(ctx, k.GcpT4, args...).CombinedOutput()
	if err := os.WriteFile(n.path("gcp-t4-install.log"), out, 0o600); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("node: gcp-t4 %s: %w\n%s", strings.Join(args, " "), err, tail(n.path("gcp-t4-install.log"), 3000))
	}
	n.logger.Info("gcp-t4 install applied our manifests", "namespace", pp.Namespace)
	if k.Webhook {
		if err := n.StartWebhook(ctx, k.WebhookBin); err != nil {
			return nil, err
		}
	}

	// kata-deploy labels the nodes it installed on; the RuntimeClass
	// selects them.
	patch := []byte(`{"metadata":{"labels":{"katacontainers.io/kata-runtime":"true"}}}`)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return nil, fmt.Errorf("node: label %s: %w", n.Name, err)
	}

	env, err := n.caaEnv(ctx, cs, pp.Namespace)
	if err != nil {
		return nil, err
	}
	env = append(env, "PATH="+filepath.Dir(k.CAA)+":"+os.Getenv("PATH"))
	// The DaemonSet's command, with the socket and pods directory under the
	// harness's /run/caa-nh-<id> instead of the hostPath /run/peerpod.
	if filepath.Base(k.CAA) != "cloud-api-adaptor" {
		return nil, fmt.Errorf("node: %s=%s: entrypoint.sh runs `cloud-api-adaptor` from PATH; name the binary so", EnvCAA, k.CAA)
	}
	n.mu.Lock()
	n.caaArgs = []string{k.Entrypoint, "-socket", n.CAASocket(), "-pods-dir", filepath.Join(n.caaDir(), "pods")}
	n.caaEnvs = env
	n.mu.Unlock()
	caa, err := n.start("cloud-api-adaptor", env, "/bin/bash", n.caaArgs...)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.caa = caa
	n.mu.Unlock()
	if err := waitFor(ctx, 2*time.Minute, "CAA's socket and its kata.peerpods.io/vm on the Node", func() (bool, error) {
		if err := caa.exited(); err != nil {
			return false, err
		}
		if _, err := os.Stat(n.CAASocket()); err != nil {
			return false, nil
		}
		node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		_, ok := node.Status.Capacity["kata.peerpods.io/vm"]
		return ok, nil
	}); err != nil {
		return nil, fmt.Errorf("%w; CAA's log ends:\n%s", err, n.LogTail("cloud-api-adaptor", 3000))
	}
	n.logger.Info("CAA up", "socket", n.CAASocket())
	return pp, nil
}

// caaEnv is the environment the DaemonSet gives CAA's container:
// peer-pods-secret's and peer-pods-cm's keys (envFrom, the ConfigMap
// last, as listed), NODE_NAME, and what the kubelet gives every pod to
// find the API server; its ServiceAccount's token is written where
// InClusterConfig reads it.
func (n *Node) caaEnv(ctx context.Context, cs kubernetes.Interface, ns string) ([]string, error) {
	env := []string{"HOME=/root", "NODE_NAME=" + n.Name}
	sec, err := cs.CoreV1().Secrets(ns).Get(ctx, "peer-pods-secret", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("node: gcp-t4 install's peer-pods-secret: %w", err)
	}
	for key, v := range sec.Data {
		env = append(env, key+"="+string(v))
	}
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "peer-pods-cm", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("node: gcp-t4 install's peer-pods-cm: %w", err)
	}
	for key, v := range cm.Data {
		env = append(env, key+"="+v)
	}
	u, err := url.Parse(n.cp.URL)
	if err != nil {
		return nil, fmt.Errorf("node: API server URL %q: %w", n.cp.URL, err)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return nil, fmt.Errorf("node: API server URL %q: %w", n.cp.URL, err)
	}
	env = append(env, "KUBERNETES_SERVICE_HOST="+host, "KUBERNETES_SERVICE_PORT="+port)

	expiry := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "cloud-api-adaptor",
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("node: a token for CAA's ServiceAccount %s/cloud-api-adaptor: %w", ns, err)
	}
	ca, err := os.ReadFile(n.cp.CAFile())
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n.mu.Lock()
	n.madeSecrets = true
	n.mu.Unlock()
	if err := os.MkdirAll(secretsDir, 0o700); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	for name, data := range map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": ca, "namespace": []byte(ns)} {
		if err := os.WriteFile(filepath.Join(secretsDir, name), data, 0o600); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	return env, nil
}

// devLog is the syslog socket kata's shim writes to: it refuses to start
// without one ("Unix syslog delivery error", pkg/katautils/logger.go's
// syslog hook at cf82bb35), and a node kata-deploy installs on always has
// journald's.
const devLog = "/dev/log"

// serveSyslog serves /dev/log when the machine has none, writing every
// datagram (the shim's log, for the test to read) to kata-shim.log; Stop
// removes the socket. Where /dev/log exists it is left alone, and the
// shim's lines go to that machine's syslog.
func (n *Node) serveSyslog() error {
	if _, err := os.Lstat(devLog); err == nil {
		n.logger.Info("the machine has a syslog socket; kata's shim logs there", "socket", devLog)
		return nil
	}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: devLog, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("node: kata's shim needs a syslog socket and %s is absent; serving one: %w", devLog, err)
	}
	n.syslog = conn
	f, err := os.OpenFile(n.path("kata-shim.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	go func() {
		defer f.Close()
		buf := make([]byte, 64<<10)
		for {
			m, err := conn.Read(buf)
			if err != nil {
				return // closed by Stop
			}
			line := strings.TrimRight(string(buf[:m]), "\n")
			_, _ = f.WriteString(line + "\n")
		}
	}()
	return nil
}

// waitFor polls f every 250 ms until it reports done, fails, or limit
// passes.
func waitFor(ctx context.Context, limit time.Duration, what string, f func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		ok, err := f()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node: waiting for %s: %w", what, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// LogLines returns the lines of a process's log that contain any of subs,
// for a test to record where the chain went.
func (n *Node) LogLines(name string, subs ...string) []string {
	f, err := os.Open(n.path(name + ".log"))
	if err != nil {
		return []string{err.Error()}
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		for _, s := range subs {
			if strings.Contains(sc.Text(), s) {
				out = append(out, sc.Text())
				break
			}
		}
	}
	return out
}

// RaceReports returns the data race reports a shim built with -race
// wrote (NODE_KATA_RACE=1), each file's text; none for a plain shim.
func (n *Node) RaceReports() []string {
	files, _ := filepath.Glob(n.path("race/shim*"))
	var out []string
	for _, f := range files {
		if data, err := os.ReadFile(f); err == nil && len(data) > 0 {
			out = append(out, string(data))
		}
	}
	return out
}

// KillCAA kills CAA's process outright (SIGKILL to its process group: a
// crash, an OOM kill, a node agent's restart past its grace), as
// happens mid-start when the adaptor dies under a pod being started, and
// returns once it has exited.
func (n *Node) KillCAA() error {
	n.mu.Lock()
	caa := n.caa
	n.mu.Unlock()
	if caa == nil {
		return errors.New("node: CAA is not running")
	}
	if err := syscall.Kill(-caa.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("node: kill CAA: %w", err)
	}
	select {
	case <-caa.done:
	case <-time.After(10 * time.Second):
		return errors.New("node: CAA did not exit within 10s of SIGKILL")
	}
	return nil
}

// caaGrace is the DaemonSet's terminationGracePeriodSeconds
// (install/base/daemonset.yaml): how long kubelet waits after SIGTERM
// before it kills CAA's container.
const caaGrace = 960 * time.Second

// TermCAA stops CAA as kubelet stops its container when the DaemonSet's
// pod is deleted (a rolling update): SIGTERM to the container's process
// (entrypoint.sh execs cloud-api-adaptor, so that is CAA), then SIGKILL
// to its process group if it is still there after grace. It returns how
// long CAA took to exit and whether it had to be killed.
func (n *Node) TermCAA(grace time.Duration) (took time.Duration, killed bool, err error) {
	n.mu.Lock()
	caa := n.caa
	n.mu.Unlock()
	if caa == nil {
		return 0, false, errors.New("node: CAA is not running")
	}
	start := time.Now()
	if err := caa.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, false, fmt.Errorf("node: SIGTERM to CAA: %w", err)
	}
	select {
	case <-caa.done:
		return time.Since(start), false, nil
	case <-time.After(grace):
	}
	if err := syscall.Kill(-caa.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		return time.Since(start), true, fmt.Errorf("node: kill CAA after its grace: %w", err)
	}
	select {
	case <-caa.done:
	case <-time.After(10 * time.Second):
		return time.Since(start), true, errors.New("node: CAA did not exit within 10s of SIGKILL")
	}
	return time.Since(start), true, nil
}

// StartCAAAgain starts CAA again with the flags and environment
// StartPeerPods gave it (as the DaemonSet's restarted container would
// run), its log cloud-api-adaptor-N.log (N from 2), and returns that
// log's name once the new CAA accepts on its socket.
func (n *Node) StartCAAAgain(ctx context.Context) (string, error) {
	n.mu.Lock()
	args, env := n.caaArgs, n.caaEnvs
	n.caaRestarts++
	name := fmt.Sprintf("cloud-api-adaptor-%d", n.caaRestarts+1)
	n.mu.Unlock()
	if args == nil {
		return "", errors.New("node: CAA was never started")
	}
	caa, err := n.start(name, env, "/bin/bash", args...)
	if err != nil {
		return "", err
	}
	n.mu.Lock()
	n.caa = caa
	n.mu.Unlock()
	// The old process's socket file is left; only a listener accepts.
	if err := waitFor(ctx, 2*time.Minute, "the new CAA's socket", func() (bool, error) {
		if err := caa.exited(); err != nil {
			return false, err
		}
		c, err := net.Dial("unix", n.CAASocket())
		if err != nil {
			return false, nil
		}
		c.Close()
		return true, nil
	}); err != nil {
		return name, fmt.Errorf("%w; CAA's log ends:\n%s", err, n.LogTail(name, 3000))
	}
	return name, nil
}

// Interrupt makes GCE do event ("preemption", "host-maintenance",
// "host-error") to a running instance, through the emulator's test-only
// control endpoint (gceonly -test-control).
func (pp *PeerPods) Interrupt(ctx context.Context, zone, instance, event string) error {
	if pp.Control == "" {
		return errors.New("node: the emulator serves no test control endpoint")
	}
	q := url.Values{"zone": {zone}, "instance": {instance}, "event": {event}}
	if err := callOK(ctx, http.MethodPost, pp.Control+"/test-only/interrupt?"+q.Encode()); err != nil {
		return fmt.Errorf("node: %s of %s: %w", event, instance, err)
	}
	return nil
}

// callOK sends an empty request to the emulator (its API or its test
// control) and wants 200; otherwise the status and body are the error.
func callOK(ctx context.Context, method, u string) error {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
