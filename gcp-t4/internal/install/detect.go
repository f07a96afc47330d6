package install

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// GKE node labels and values the installer reads.
const (
	labelGKENodePool  = "cloud.google.com/gke-nodepool"
	labelGKEOS        = "cloud.google.com/gke-os-distribution"
	labelGKEAutopilot = "cloud.google.com/gke-autopilot"
	labelKataRuntime  = "katacontainers.io/kata-runtime"
	labelWorker       = "node.kubernetes.io/worker"
	webhookName       = "mwebhook.peerpods.io"
)

// RuntimeClassName is the RuntimeClass of peer pods: the one kata-deploy's
// chart creates for kata-remote, and components/runtimeclass when asked.
const RuntimeClassName = "kata-remote"

// Pinned versions of the upstream pieces this installer leaves to upstream.
const (
	UpstreamRelease   = "v0.22.0"
	KataDeployVersion = "4.0.0"
)

// Pool is a group of nodes: a GKE node pool, or all nodes of a non-GKE
// cluster.
type Pool struct {
	Name     string
	COS      bool
	Nodes    []string
	Selected []string // nodes carrying the selection label
}

// Environment is what the installer learned from the cluster.
type Environment struct {
	GKE        bool
	GKESignals []string
	Autopilot  bool
	// AutopilotSignal says which object showed Autopilot.
	AutopilotSignal string
	Pools           []Pool
	// WorkerNodes carry node.kubernetes.io/worker (the base's selector).
	WorkerNodes int

	KataDeploy      string // where kata-deploy was seen, "" if not
	Webhook         string // the MutatingWebhookConfiguration, "" if none
	RuntimeClass    bool   // kata-remote exists
	RuntimeClassOur bool   // … and carries our part-of label
	// RuntimeClassHelm: a Helm release (kata-deploy's) manages it now.
	RuntimeClassHelm bool
}

// Detect reads Nodes, the server version, DaemonSets, webhook
// configurations and the kata-remote RuntimeClass.
func Detect(ctx context.Context, cs kubernetes.Interface) (Environment, error) {
	var env Environment
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return env, fmt.Errorf("list nodes (the installer needs cluster-admin): %w", err)
	}
	signals := map[string]bool{}
	pools := map[string]*Pool{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		poolName, gkePool := n.Labels[labelGKENodePool]
		if gkePool {
			signals["node-pool label "+labelGKENodePool] = true
		}
		if strings.HasPrefix(n.Spec.ProviderID, "gce://") {
			signals["gce:// providerID"] = true
		}
		if strings.Contains(n.Status.NodeInfo.KubeletVersion, "-gke.") {
			signals["kubelet version "+n.Status.NodeInfo.KubeletVersion] = true
		}
		if _, ok := n.Labels[labelGKEAutopilot]; ok && env.AutopilotSignal == "" {
			env.AutopilotSignal = fmt.Sprintf("node %s has label %s", n.Name, labelGKEAutopilot)
		}
		if !gkePool {
			poolName = ""
		}
		p := pools[poolName]
		if p == nil {
			p = &Pool{Name: poolName}
			pools[poolName] = p
		}
		p.Nodes = append(p.Nodes, n.Name)
		if isCOS(n) {
			p.COS = true
		}
		if n.Labels[SelectionLabel] == "true" {
			p.Selected = append(p.Selected, n.Name)
		}
		if _, ok := n.Labels[labelWorker]; ok {
			env.WorkerNodes++
		}
		if n.Labels[labelKataRuntime] == "true" && env.KataDeploy == "" {
			env.KataDeploy = fmt.Sprintf("node %s labelled %s=true", n.Name, labelKataRuntime)
		}
	}
	if v, err := cs.Discovery().ServerVersion(); err == nil && strings.Contains(v.GitVersion, "-gke.") {
		signals["server version "+v.GitVersion] = true
	}
	for s := range signals {
		env.GKESignals = append(env.GKESignals, s)
	}
	sort.Strings(env.GKESignals)
	env.GKE = len(env.GKESignals) > 0
	env.Autopilot = env.AutopilotSignal != ""
	for _, p := range pools {
		env.Pools = append(env.Pools, *p)
	}
	sort.Slice(env.Pools, func(i, j int) bool { return env.Pools[i].Name < env.Pools[j].Name })

	if env.KataDeploy == "" {
		dss, err := cs.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return env, fmt.Errorf("list daemonsets: %w", err)
		}
		for _, ds := range dss.Items {
			if ds.Name == "kata-deploy" || ds.Labels["name"] == "kata-deploy" || ds.Labels["app.kubernetes.io/name"] == "kata-deploy" {
				env.KataDeploy = fmt.Sprintf("daemonset %s/%s", ds.Namespace, ds.Name)
				break
			}
		}
	}
	whs, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return env, fmt.Errorf("list mutating webhook configurations: %w", err)
	}
	for _, c := range whs.Items {
		for _, w := range c.Webhooks {
			if w.Name == webhookName {
				env.Webhook = c.Name
			}
		}
	}
	rc, err := cs.NodeV1().RuntimeClasses().Get(ctx, RuntimeClassName, metav1.GetOptions{})
	switch {
	case err == nil:
		env.RuntimeClass = true
		env.RuntimeClassOur = rc.Labels[PartOfLabel] == PartOfValue
		env.RuntimeClassHelm = helmManaged(rc.ManagedFields)
	case !apierrors.IsNotFound(err):
		return env, fmt.Errorf("get runtimeclass %s: %w", RuntimeClassName, err)
	}
	return env, nil
}

func isCOS(n *corev1.Node) bool {
	return n.Labels[labelGKEOS] == "cos" || strings.Contains(n.Status.NodeInfo.OSImage, "Container-Optimized OS")
}

// Mode is auto, on or off for an optional part.
type Mode string

const (
	ModeAuto Mode = "auto"
	ModeOn   Mode = "on"
	ModeOff  Mode = "off"
)

// ParseMode reads a --gke / --runtimeclass value.
func ParseMode(flag, v string) (Mode, error) {
	switch m := Mode(v); m {
	case ModeAuto, ModeOn, ModeOff:
		return m, nil
	}
	return "", fmt.Errorf("--%s %q: want auto, on or off", flag, v)
}

// Decision is what the installer will do in env, and what it tells the user.
type Decision struct {
	GKERemediation bool
	RuntimeClass   bool
	// Notes are printed before applying; Warnings name missing pieces and
	// how to install them.
	Notes    []string
	Warnings []string
}

// Decide turns the environment and the user's modes into components, or
// refuses with the reason and the fix.
func Decide(env Environment, gke, rc Mode) (Decision, error) {
	var d Decision
	labelCmd := fmt.Sprintf("gcloud container node-pools update POOL --cluster=CLUSTER --location=LOCATION --node-labels=%s=true", SelectionLabel)
	if env.Autopilot {
		return d, fmt.Errorf("GKE Autopilot cluster (%s): Autopilot forbids the host network, host paths and capabilities the Cloud API Adaptor needs and any change to the nodes' containerd, so peer pods cannot run there; use a GKE Standard cluster with an Ubuntu node pool: gcloud container node-pools create POOL --cluster=CLUSTER --image-type=UBUNTU_CONTAINERD --node-labels=%s=true", env.AutopilotSignal, SelectionLabel)
	}
	switch {
	case gke == ModeOn:
		d.GKERemediation = true
	case gke == ModeAuto:
		d.GKERemediation = env.GKE
	}
	if env.GKE {
		d.Notes = append(d.Notes, fmt.Sprintf("GKE detected (%s)", strings.Join(env.GKESignals, "; ")))
	}
	if d.GKERemediation {
		var selectedCOS, ubuntu []string
		selected := 0
		for _, p := range env.Pools {
			selected += len(p.Selected)
			if p.COS && len(p.Selected) > 0 {
				selectedCOS = append(selectedCOS, fmt.Sprintf("%s (nodes %s)", poolLabel(p), strings.Join(p.Selected, ", ")))
			}
			if !p.COS {
				ubuntu = append(ubuntu, poolLabel(p))
			}
		}
		cosFix := fmt.Sprintf("run peer pods on an Ubuntu node pool: gcloud container node-pools create POOL --cluster=CLUSTER --image-type=UBUNTU_CONTAINERD --node-labels=%s=true", SelectionLabel)
		if len(selectedCOS) > 0 {
			return d, fmt.Errorf("Container-Optimized OS node pool selected for peer pods: %s carry %s=true but run COS, whose read-only root cannot hold the kata shim under /opt/kata (and GKE rewrites containerd's config at every boot); %s, and remove the label from the COS pool", strings.Join(selectedCOS, "; "), SelectionLabel, cosFix)
		}
		if len(env.Pools) > 0 && len(ubuntu) == 0 {
			return d, fmt.Errorf("every node pool runs Container-Optimized OS, whose read-only root cannot hold the kata shim under /opt/kata; %s", cosFix)
		}
		d.Notes = append(d.Notes, "enabling containerd remediation (components/gke-remediation): the `gcp-t4-node remediate` sidecar keeps kata-remote in the nodes' containerd config, which GKE rewrites at every node bootstrap")
		if selected == 0 {
			which := "an Ubuntu node pool"
			if len(ubuntu) > 0 {
				which += " (" + strings.Join(ubuntu, ", ") + ")"
			}
			d.Warnings = append(d.Warnings, fmt.Sprintf("no node carries %s=true, so the DaemonSet runs nowhere yet; label %s: %s", SelectionLabel, which, labelCmd))
		}
		d.Notes = append(d.Notes, fmt.Sprintf("persist the selection as a node-pool label, not with kubectl label (lost when GKE recreates a node): %s (--node-labels replaces the pool's Kubernetes labels: repeat the ones it has)", labelCmd))
	} else {
		if env.GKE {
			d.Warnings = append(d.Warnings, "GKE without containerd remediation (--gke=off): kata-remote disappears from a node's containerd at its next bootstrap (upgrade, repair, resize)")
		}
		if env.WorkerNodes == 0 {
			d.Warnings = append(d.Warnings, fmt.Sprintf("no node carries %s, the DaemonSet's node selector; label the nodes that run peer pods: kubectl label node NODE %s=", labelWorker, labelWorker))
		}
	}
	switch rc {
	case ModeOn:
		d.RuntimeClass = true
	case ModeAuto:
		// kata-deploy's chart creates it (and its install fails on one it
		// does not own), so leave it to kata-deploy; keep one an earlier
		// --runtimeclass=on created, unless Helm adopted it since.
		d.RuntimeClass = env.RuntimeClassOur && !env.RuntimeClassHelm
	}
	switch {
	case d.RuntimeClass && env.RuntimeClass && !env.RuntimeClassOur:
		d.Warnings = append(d.Warnings, fmt.Sprintf("RuntimeClass %s exists and is not ours (kata-deploy's?); --runtimeclass=on takes over its fields", RuntimeClassName))
	case !d.RuntimeClass && !env.RuntimeClass:
		d.Warnings = append(d.Warnings, fmt.Sprintf("RuntimeClass %s not found: kata-deploy's chart creates it (runtimeClasses.enabled, its default); if kata-deploy runs without it, re-run with --runtimeclass=on (created so that a later kata-deploy Helm install adopts it)", RuntimeClassName))
	}
	if env.KataDeploy == "" {
		d.Warnings = append(d.Warnings, fmt.Sprintf("kata-deploy not found (no kata-deploy DaemonSet, no node labelled %s=true): peer pods need its remote shim on the nodes; install kata-deploy %s, the version CAA %s pins, with only the remote shim: helm install kata-deploy oci://ghcr.io/kata-containers/kata-deploy-charts/kata-deploy --version %s --namespace kube-system -f kata-deploy-values.yaml (the values are in docs/install.md)", labelKataRuntime, KataDeployVersion, UpstreamRelease, KataDeployVersion))
	}
	if env.Webhook == "" {
		d.Warnings = append(d.Warnings, fmt.Sprintf("peer-pods webhook not found (no MutatingWebhookConfiguration with webhook %s): without it a pod requesting nvidia.com/gpu cannot schedule on a CPU node; install CAA %s's chart (needs cert-manager): git clone --depth 1 --branch %s https://github.com/confidential-containers/cloud-api-adaptor && helm install peer-pods-webhook cloud-api-adaptor/src/webhook/chart --namespace peer-pods-webhook-system --create-namespace", webhookName, UpstreamRelease, UpstreamRelease))
	}
	return d, nil
}

func poolLabel(p Pool) string {
	if p.Name == "" {
		return "nodes outside GKE node pools"
	}
	return "node pool " + p.Name
}

// helmManaged reports whether Helm has written the object (its field
// manager is "helm" in Helm 3's kube client), i.e. a release adopted it.
func helmManaged(mf []metav1.ManagedFieldsEntry) bool {
	for _, e := range mf {
		if e.Manager == "helm" {
			return true
		}
	}
	return false
}
