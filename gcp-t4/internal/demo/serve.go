package demo

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/caa-gcp-t4/gcp-t4/internal/adaptor"
	"github.com/caa-gcp-t4/gcp-t4/internal/cli"
	"github.com/caa-gcp-t4/gcp-t4/internal/install"
	"github.com/caa-gcp-t4/gcp-t4/internal/peerpod"
	"github.com/caa-gcp-t4/gcp-t4/internal/providerflags"
	"github.com/caa-gcp-t4/gcp-t4/internal/shimclient"
	"github.com/caa-gcp-t4/test/controlplane"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/consoleline"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
)

// emulatorUsage is `gcp-t4 emulator -h`, in the layout every command prints.
var emulatorUsage = cli.Usage{
	Synopsis: []string{"gcp-t4 emulator"},
	About: []string{
		"Serves the embedded GCE emulator on 127.0.0.1 (a free port) until Ctrl-C or SIGTERM, seeded as the demo's project is (demo-project: T4 zones us-central1-a, -b and -f, GPU quota, Cloud NAT, the default network's firewall, the podVM image podvm-t4) and holding the demo's two single-T4 podVMs, created through the adaptor as CAA creates them.",
		"Where the test control plane is built (make controlplane, which prints CONTROLPLANE_KUBE_APISERVER and CONTROLPLANE_ETCD to export), it also runs a kube-apiserver and etcd on loopback holding the demo's pods, their PeerPods and the start-up Events the provider records, with a kubeconfig in a temporary directory; without them it says which binary is missing and serves GCE only.",
		"It then prints the preflight, status, gc, install --dry-run and uninstall commands to run against it, as they are to be typed, and on Ctrl-C stops the servers and removes its temporary files. Nothing leaves the machine: no cloud account, no network beyond loopback.",
	},
}

// ReadyLine starts the line the emulator prints once every command it
// printed can be run; a test waits for it.
const ReadyLine = "Ready:"

// emulatorNode is the node the demo's pods run on.
const emulatorNode = "demo-node-0"

// MainEmulator is `gcp-t4 emulator`. Exit 0 after Ctrl-C or SIGTERM, 1
// when it cannot start, 2 on bad usage.
func MainEmulator(ctx context.Context, args []string, stdout, stderr io.Writer, _ *slog.Logger) int {
	fs := cli.NewFlagSet("gcp-t4 emulator", emulatorUsage)
	if code, ok := cli.Parse(fs, args, stdout, stderr); !ok {
		return code
	}
	if code, ok := cli.NoArgs(fs, stderr); !ok {
		return code
	}
	// The adaptor's and the provider's warnings go to stderr in text
	// form, apart from the commands on stdout.
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn, ReplaceAttr: dropTime}))
	if err := Serve(ctx, controlplane.BinariesFromEnv, stdout, logger); err != nil {
		fmt.Fprintf(stderr, "gcp-t4 emulator: %v\n", err)
		return 1
	}
	return 0
}

// Serve runs the emulator until ctx ends. binaries says where the
// control plane's binaries are (controlplane.BinariesFromEnv); its error
// leaves the API server out.
func Serve(ctx context.Context, binaries func() (controlplane.Binaries, error), out io.Writer, logger *slog.Logger) (err error) {
	fake := gcefake.New()
	defer fake.Close()
	if err := SeedProject(fake); err != nil {
		return err
	}
	// A short directory: unix socket paths are limited to 107 bytes.
	dir, err := os.MkdirTemp("", "gcp-t4-emulator")
	if err != nil {
		return fmt.Errorf("creating the emulator's directory: %w", err)
	}
	defer os.RemoveAll(dir)

	fmt.Fprintf(out, "GCE emulator: %s (project %s)\n", fake.URL(), fake.Project())
	var kube *apiServer
	switch bins, berr := binaries(); {
	case berr != nil:
		fmt.Fprintf(out, "API server: not started (%v)\n  GCE only: preflight's project checks run; gc, status, install and uninstall need it.\n", berr)
	default:
		fmt.Fprintln(out, "API server: starting kube-apiserver and etcd on loopback...")
		if kube, err = startAPIServer(ctx, bins, filepath.Join(dir, "cluster")); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, kube.cp.Stop()) }()
		fmt.Fprintf(out, "API server: %s, kubeconfig %s\n", kube.cp.URL, kube.cp.Kubeconfig)
		if err := kube.install(ctx, fake.URL(), fake.Project()); err != nil {
			return err
		}
		fmt.Fprintln(out, "CAA: installed by gcp-t4 install, pointed at the emulator (GCP_ENDPOINT in peer-pods-cm); its DaemonSet never runs, no kubelet does here")
	}

	clusterID := demoClusterID
	if kube != nil {
		clusterID = kube.uid
	}
	prov, err := emulatorProvider(ctx, fake, clusterID, kube, logger)
	if err != nil {
		return err
	}
	svc := adaptor.NewService(prov, filepath.Join(dir, "pods"), "emulator", logger)
	var mem *cluster
	if kube != nil {
		svc.WithRecorder(adaptor.PeerPods{Pods: kube.cs, PeerPods: peerpod.Client{Dynamic: kube.dyn, CloudProvider: gcpt4.ProviderName}})
	} else {
		mem = newCluster()
		svc.WithRecorder(mem)
	}
	socket := filepath.Join(dir, "hypervisor.sock")
	srv, err := adaptor.Listen(socket, svc)
	if err != nil {
		_ = prov.Teardown()
		return err
	}
	shim := shimclient.New(socket, 0)
	pods := demoPods()
	var live []pod // the sandboxes CreateVM made, to stop at the end
	defer func() {
		// The pods go away: their podVMs are deleted as CAA deletes
		// them, so no live sandbox is left at the adaptor's stop.
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), gcpt4.LongestCall)
		defer cancel()
		for _, p := range live {
			if sErr := shim.StopVM(stopCtx, p.sandboxID); sErr != nil {
				err = errors.Join(err, fmt.Errorf("stopping pod %s's podVM: %w", p.sandbox.Name, sErr))
			}
		}
		err = errors.Join(err, srv.Stop(stopCtx), prov.Teardown())
	}()

	for _, p := range pods {
		if kube != nil {
			if err := kube.addPod(ctx, p.sandbox.Namespace, p.sandbox.Name); err != nil {
				return err
			}
		} else {
			mem.addPod(p.sandbox.Namespace, p.sandbox.Name)
		}
		if _, err := shim.CreateVM(ctx, p.sandboxID, "/var/run/netns/cni-"+p.sandboxID[:8], p.sandbox); err != nil {
			return fmt.Errorf("pod %s: %w", p.sandbox.Name, err)
		}
		live = append(live, p)
		if err := shim.StartVM(ctx, p.sandboxID, 0); err != nil {
			return fmt.Errorf("pod %s: %w", p.sandbox.Name, err)
		}
		if kube != nil {
			// The kubelet's part, which no kubelet here plays: the
			// sandbox is ready, the pod runs; the provider then records
			// its podVM reachable.
			if err := kube.podRunning(ctx, p.sandbox.Namespace, p.sandbox.Name); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(out, "podVMs: %d created through the adaptor as CAA creates them (%s)\n", len(fake.Instances()), instanceNames(fake))
	if kube != nil {
		if err := kube.awaitReachable(ctx, pods); err != nil {
			return err
		}
		fmt.Fprintf(out, "Cluster: pods %s Running on node %s, their PeerPods, and the start-up Events the provider recorded (requested, created, booted, reachable)\n", podNames(pods), emulatorNode)
	}

	fmt.Fprintln(out, "\nRun these against it, from another terminal, as printed:")
	for _, c := range emulatorCommands(fake.URL(), fake.Project(), kube) {
		fmt.Fprintf(out, "\n  # %s\n  %s\n", c.why, c.line)
	}
	fmt.Fprintf(out, "\n%s serving until Ctrl-C or SIGTERM; then the servers stop and %s is removed.\n", ReadyLine, dir)
	<-ctx.Done()
	fmt.Fprintln(out, "Stopping: deleting the podVMs, stopping the adaptor, the API server and the emulator.")
	return nil
}

// emulatorCommand is one command the emulator prints, and why to run it.
type emulatorCommand struct{ why, line string }

// emulatorCommands are the commands to try, each with the flags and env
// it needs to reach the emulator and not a real project or cluster.
func emulatorCommands(endpoint, project string, kube *apiServer) []emulatorCommand {
	// preflight's settings as the adaptor has them (adaptorFlags).
	settings := fmt.Sprintf("-gcp-endpoint %s -gcp-project-id %s -zone us-central1-a -zones us-central1-b,us-central1-f -image-name podvm-t4 -network global/networks/default -subnetwork default", endpoint, project)
	cmds := []emulatorCommand{{
		// -kubeconfig= keeps a KUBECONFIG in the environment (a real
		// cluster) out of it: no CAA is installed here to check.
		why:  "the project's checks (quota, zones, NAT, firewall, image, permissions), no cluster",
		line: "gcp-t4 preflight " + settings + " -kubeconfig=",
	}}
	if kube == nil {
		return cmds
	}
	k := kube.cp.Kubeconfig
	// After an install, these read CAA's settings (GCP_ENDPOINT, the
	// project, the cluster ID) from its peer-pods-cm, as on a real cluster.
	return append(cmds,
		emulatorCommand{"each demo pod's podVM start-up, from the provider's Events, and whether GCE still runs it",
			"gcp-t4 status -kubeconfig " + k + " -A"},
		emulatorCommand{"the podVMs whose sandbox is gone: none, each pod still owns its podVM",
			"gcp-t4 gc -kubeconfig " + k},
		emulatorCommand{"what an upgrade would change, checked by the API server, changing nothing",
			"gcp-t4 install --kubeconfig " + k + " --dry-run"},
		emulatorCommand{"refused: the demo's pods and podVMs are live (delete the pods first, or --force)",
			"gcp-t4 uninstall --kubeconfig " + k + " --dry-run"},
	)
}

// CacheDemoImage is the cache disk image SeedProject adds.
const CacheDemoImage = "caa-gcp-t4-cache-demo"

// SeedProject is the demo's project ready for CAA, as preflight checks
// it: GCE's defaults (T4 zones, quota, the default network and its
// firewall rules, the podVM image) plus a Cloud NAT for the private
// podVMs, Private Google Access and the tunnel's MTU. gceonly (the node
// harness's emulator) serves the same project.
func SeedProject(fake *gcefake.Server) error {
	if err := fake.SetReadyForCAA(); err != nil {
		return fmt.Errorf("seeding the emulator's Cloud NAT: %w", err)
	}
	// A cache disk image (gcp-t4 cache build -disk's, imported): the node
	// harness's cached-pull scenario installs with it as GCP_CACHE_IMAGE
	// (test/node, Kata.Cache). The demo's own install names none.
	fake.AddImage(fake.Project(), &computepb.Image{Name: proto.String(CacheDemoImage), DiskSizeGb: proto.Int64(1),
		Description: proto.String("a gcp-t4 cache disk (the node harness's)")})
	// What the podVM image prints once gpu-init has looked for the VM's
	// GPUs (the provider's boot watch reads it: the booted phase): the
	// GPUs the instance has, or none.
	fake.SetBootConsole(func(_ string, inst *computepb.Instance) string {
		if n := gcefake.InstanceGPUs(inst); n > 0 {
			return consoleline.GPUPrefix + fmt.Sprintf(`{"state":"ready","gpus":%d,"driver":"550.163.01","elapsed_ms":1800}`, n) + "\n"
		}
		return consoleline.GPUPrefix + `{"state":"no-gpu","gpus":0,"elapsed_ms":300}` + "\n"
	})
	return nil
}

// emulatorProvider is CAA's provider on the emulator: with the API
// server, started as CAA starts it (the cluster ID checked, start-up
// Events recorded on the pods); without, the plain provider.
func emulatorProvider(ctx context.Context, fake *gcefake.Server, clusterID string, kube *apiServer, logger *slog.Logger) (*gcpt4.Provider, error) {
	var m gcpt4.Manager
	fs := flag.NewFlagSet("cloud-api-adaptor", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	m.ParseCmd(fs)
	args := adaptorFlags(fake.URL(), "", "")[4:] // the provider's flags only
	for i := range args {
		if args[i] == "-cluster-id" {
			args[i+1] = clusterID
		}
		if args[i] == "-node-name" {
			args[i+1] = emulatorNode
		}
	}
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("the emulator's provider settings: %w", err)
	}
	if kube == nil {
		return gcpt4.NewProvider(ctx, *m.GetConfig(), providerflags.ProviderLogger(logger))
	}
	cfg := kube.cp.Config()
	return m.Start(ctx, func() (gcpt4.ClusterAPI, error) {
		// CAA runs in the namespace install gave it, where its Event
		// signing key is made.
		return gcpt4.ClusterAPI{URL: kube.cp.URL, Token: cfg.BearerToken, CAPEM: cfg.CAData, Namespace: install.Namespace}, nil
	})
}

// apiServer is the test control plane holding the demo's cluster.
type apiServer struct {
	cp  *controlplane.ControlPlane
	cs  kubernetes.Interface
	dyn dynamic.Interface
	uid string
}

// startAPIServer starts kube-apiserver and etcd and seeds what the demo's
// pods need besides CAA: the kata-remote RuntimeClass (kata-deploy's),
// the default ServiceAccount admission looks up, the node.
func startAPIServer(ctx context.Context, bins controlplane.Binaries, dir string) (*apiServer, error) {
	cp, err := controlplane.Start(ctx, bins, controlplane.Options{Dir: dir})
	if err != nil {
		return nil, fmt.Errorf("starting the API server: %w", err)
	}
	k := &apiServer{cp: cp}
	if err := k.seed(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("seeding the API server: %w", err), cp.Stop())
	}
	return k, nil
}

func (k *apiServer) seed(ctx context.Context) error {
	var err error
	if k.cs, err = kubernetes.NewForConfig(k.cp.Config()); err != nil {
		return err
	}
	if k.dyn, err = dynamic.NewForConfig(k.cp.Config()); err != nil {
		return err
	}
	ks, err := k.cs.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		return err
	}
	k.uid = string(ks.UID)
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "kata-remote"}, Handler: "kata-remote"}
	if _, err := k.cs.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating RuntimeClass kata-remote: %w", err)
	}
	// No controller-manager makes the default ServiceAccount.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := k.cs.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ServiceAccount default/default: %w", err)
	}
	// The node the pods run on, as kata-deploy labels it; install finds
	// kata-deploy and the workers by these labels.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: emulatorNode, Labels: map[string]string{
		"node.kubernetes.io/worker": "", "katacontainers.io/kata-runtime": "true"}}}
	if _, err := k.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating node %s: %w", emulatorNode, err)
	}
	return nil
}

// install runs `gcp-t4 install` for real, as a user would on a new
// cluster, pointing CAA at the emulator (GCP_ENDPOINT in peer-pods-cm), so
// that gc, status, install and uninstall find CAA's settings where they
// find them after a real install. It does not wait for the rollout: no
// kubelet runs the DaemonSet here. Its output is returned for an error.
func (k *apiServer) install(ctx context.Context, endpoint, project string) error {
	var out, errb bytes.Buffer
	args := []string{"--kubeconfig", k.cp.Kubeconfig, "--project", project, "--zone", "us-central1-a", "--podvm-image", "podvm-t4",
		"--network", "global/networks/default", "--subnetwork", "default",
		"--set", "GCP_ENDPOINT=" + endpoint, "--set", "GCP_ZONES=us-central1-b,us-central1-f", "--wait=false"}
	if code := install.Main(ctx, args, &out, &errb, nil); code != 0 {
		return fmt.Errorf("gcp-t4 install %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
	}
	// The PeerPod CRD (install's) serves once established.
	return poll(ctx, 30*time.Second, "the PeerPod CRD to be served", func() (bool, error) {
		_, err := k.dyn.Resource(peerpod.GVR).Namespace("default").List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
}

// addPod creates a demo pod as the kubelet would see it scheduled: a
// kata-remote peer pod on the demo's node.
func (k *apiServer) addPod(ctx context.Context, ns, name string) error {
	rc := "kata-remote"
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "mistral"}},
		Spec: corev1.PodSpec{NodeName: emulatorNode, RuntimeClassName: &rc, RestartPolicy: corev1.RestartPolicyAlways,
			Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai:latest"}}}}
	if _, err := k.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating pod %s/%s: %w", ns, name, err)
	}
	return nil
}

func (k *apiServer) podRunning(ctx context.Context, ns, name string) error {
	p, err := k.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: "PodReadyToStartContainers", Status: corev1.ConditionTrue, LastTransitionTime: now})
	if _, err := k.cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("pod %s/%s running: %w", ns, name, err)
	}
	return nil
}

// awaitReachable waits until the provider recorded every pod's podVM
// reachable, so that status shows whole start-ups.
func (k *apiServer) awaitReachable(ctx context.Context, pods []pod) error {
	for _, p := range pods {
		ns, name := p.sandbox.Namespace, p.sandbox.Name
		err := poll(ctx, 2*time.Minute, "pod "+ns+"/"+name+"'s "+podevent.ReasonReachable+" Event", func() (bool, error) {
			list, err := k.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{LabelSelector: podevent.PhaseLabel, FieldSelector: "involvedObject.name=" + name})
			if err != nil {
				return false, err
			}
			for _, e := range list.Items {
				if e.Reason == podevent.ReasonReachable {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// poll asks done until it says yes, ctx ends or limit passes.
func poll(ctx context.Context, limit time.Duration, what string, done func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := done()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}

func instanceNames(fake *gcefake.Server) string {
	var names []string
	for _, vm := range fake.Instances() {
		names = append(names, vm.GetName())
	}
	return strings.Join(names, ", ")
}

func podNames(pods []pod) string {
	var names []string
	for _, p := range pods {
		names = append(names, p.sandbox.Namespace+"/"+p.sandbox.Name)
	}
	return strings.Join(names, ", ")
}
