// Package demo runs the provider's main job against the embedded GCE
// emulator the way production drives it: a kata shim client calls CreateVM,
// StartVM and StopVM over ttrpc on a unix socket, the adaptor maps the pod
// annotations to the provider, and the provider creates two single-T4
// podVMs, end to end, with no cloud account. The adaptor then stops with
// one sandbox live and leaves its VM, as upstream CAA does, and the reaper
// collects it once its pod is gone.
package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/caa-gcp-t4/gcp-t4/internal/adaptor"
	"github.com/caa-gcp-t4/gcp-t4/internal/gc"
	"github.com/caa-gcp-t4/gcp-t4/internal/providerflags"
	"github.com/caa-gcp-t4/gcp-t4/internal/shimclient"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// pod is one peer pod as the kata shim sees it after the webhook moved its
// resource requests into annotations.
type pod struct {
	sandboxID string
	sandbox   shimclient.Sandbox
}

// demoPods are the demo's two pods: two ranks of a tensor-parallel model,
// one T4 each, what the webhook turns `nvidia.com/gpu: 1` plus 3 CPUs and
// 12 GiB into.
func demoPods() []pod {
	return []pod{
		{sandboxID: "5f1c0a6e9b2d4c7fa1e3b5d7c9f0e2a4b6c8d0e1f3a5b7c9d1e3f5a7b9c1d3e5", sandbox: shimclient.Sandbox{Name: "mistral-tp-0", Namespace: "default", VCPUs: 3, MemoryMiB: 12288, GPUs: 1}},
		{sandboxID: "a9e7c5b3d1f0e2c4a6b8d0f1e3c5a7b9d1f3e5c7a9b1d3f5e7c9a1b3d5f7e9c1", sandbox: shimclient.Sandbox{Name: "mistral-tp-1", Namespace: "default", VCPUs: 3, MemoryMiB: 12288, GPUs: 1}},
	}
}

// Run provisions, shows and deletes the demo podVMs. args are extra
// provider flags (e.g. -provisioning-model SPOT). out gets the demo's
// narration and tables; logs gets what the adaptor, the provider and the
// reaper logged (warnings and errors, in text form), after the demo's
// output, never inside it. The adaptor's warning that it leaves a live
// sandbox's VM is part of the story the demo tells; printed when it
// happens, a JSON record landed between two lines of the narration.
func Run(ctx context.Context, args []string, out, logs io.Writer) error {
	var held bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&held, &slog.HandlerOptions{Level: slog.LevelWarn, ReplaceAttr: dropTime}))
	summary, err := run(ctx, args, out, logger)
	if held.Len() > 0 {
		// The leak scenario's warning reads as a failure without its
		// story: say it is what the scenario is meant to produce.
		fmt.Fprintln(logs, "\nLogged during the demo by the adaptor, the provider and the reaper (warnings and errors, as CAA's log would have them).")
		fmt.Fprintln(logs, "The adaptor's warning about live sandboxes is the leak scenario's expected outcome: it stopped with mistral-tp-1 live and left its podVM, which the reaper collected above.")
		for _, line := range strings.Split(strings.TrimSuffix(held.String(), "\n"), "\n") {
			fmt.Fprintf(logs, "  %s\n", line)
		}
	}
	if err == nil {
		fmt.Fprintf(out, "\n%s\n", summary)
	}
	return err
}

// dropTime leaves the time out of the held log lines: they are printed
// after the fact, and the narration says when each step happened.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

func run(ctx context.Context, args []string, out io.Writer, logger *slog.Logger) (summary string, err error) {
	fake := gcefake.New()
	defer fake.Close()
	// A realistic insert takes time; the provider must long-poll for it.
	fake.SetOperationLatency(150 * time.Millisecond)

	// A short directory: unix socket paths are limited to 107 bytes.
	dir, err := os.MkdirTemp("", "gcp-t4-demo")
	if err != nil {
		return "", fmt.Errorf("creating the demo's socket directory: %w", err)
	}
	defer os.RemoveAll(dir)
	socket := filepath.Join(dir, "hypervisor.sock")

	srv, err := adaptor.Start(append(adaptorFlags(fake.URL(), socket, filepath.Join(dir, "pods")), args...), "demo", io.Discard, logger)
	if err != nil {
		return "", err
	}
	defer func() {
		// Whatever failed below, stop the adaptor (a no-op once stopped).
		err = errors.Join(err, srv.Stop(context.WithoutCancel(ctx)))
	}()
	// The cluster the pods live in, in memory: pods and the PeerPods the
	// adaptor records, as a kube-apiserver would hold them.
	cluster := newCluster()
	srv.Service().WithRecorder(cluster)
	shim := shimclient.New(socket, 0)

	pods := demoPods()
	start := time.Now()
	fmt.Fprintf(out, "Provisioning %d single-T4 podVMs as the kata shim does: CreateVM and StartVM over ttrpc to the adaptor's unix socket, provider %q, embedded GCE emulator (project demo-project)...\n\n", len(pods), gcpt4.ProviderName)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tINSTANCE\tMACHINE TYPE\tACCELERATOR\tZONE\tINTERNAL IP\tEXTERNAL IP")
	for _, p := range pods {
		cluster.addPod(p.sandbox.Namespace, p.sandbox.Name)
		if _, err := shim.CreateVM(ctx, p.sandboxID, "/var/run/netns/cni-"+p.sandboxID[:8], p.sandbox); err != nil {
			return "", fmt.Errorf("pod %s: %w", p.sandbox.Name, err)
		}
		if err := shim.StartVM(ctx, p.sandboxID, 0); err != nil {
			return "", fmt.Errorf("pod %s: %w", p.sandbox.Name, err)
		}
		row, err := describe(fake, p.sandboxID)
		if err != nil {
			return "", fmt.Errorf("pod %s: %w", p.sandbox.Name, err)
		}
		fmt.Fprintf(tw, "%s\t%s\n", p.sandbox.Name, row)
	}
	tw.Flush()
	created := len(fake.Instances())
	fmt.Fprintf(out, "\n%d podVMs running after %s; GCE API calls: %d inserts, %d operation waits, %d gets.\n",
		created, time.Since(start).Round(time.Millisecond), fake.CountCalls("instances.insert"), fake.CountCalls("zoneOperations.wait"), fake.CountCalls("instances.get"))

	fmt.Fprintf(out, "PeerPods recorded (as CAA records them): %s\n", strings.Join(cluster.peerPodNames(), ", "))

	fmt.Fprintf(out, "\nStopVM for %s, as the kata shim does when its pod goes away...\n", pods[0].sandbox.Name)
	if err := shim.StopVM(ctx, pods[0].sandboxID); err != nil {
		return "", fmt.Errorf("pod %s: %w", pods[0].sandbox.Name, err)
	}
	// The pod is gone once its sandbox is stopped: left in the cluster,
	// the reaper would find a pod whose podVM GCE no longer runs and warn
	// of a podVM lost under it.
	cluster.deletePod(pods[0].sandbox.Namespace, pods[0].sandbox.Name)
	fmt.Fprintf(out, "The adaptor gets SIGTERM with %s still live...\n", pods[1].sandbox.Name)
	if err := srv.Stop(ctx); err != nil {
		return "", err
	}
	fmt.Fprintf(out, "Adaptor stopped; it left %d podVM running, as upstream CAA does: %s\n", len(srv.Left()), strings.Join(srv.Left(), ", "))
	fmt.Fprintf(out, "Pod %s is deleted while no adaptor runs: nobody gets its StopVM, and Kubernetes deletes its PeerPod, which its finalizer holds.\n", pods[1].sandbox.Name)
	cluster.deletePod(pods[1].sandbox.Namespace, pods[1].sandbox.Name)

	pol := gc.DefaultPolicy()
	fmt.Fprintf(out, "\nThe reaper's pass %s later, once the VM is past REAPER_GRACE (gcp-t4 gc -delete, as the caa-gcp-t4-reaper Deployment runs it):\n", pol.Grace)
	reaper, err := gcpt4.NewProvider(ctx, reaperConfig(fake), providerflags.ProviderLogger(logger), fake.ClientOptions()...)
	if err != nil {
		return "", err
	}
	defer reaper.Teardown()
	// The reaper deletes only past the grace period, even with its pod and
	// PeerPod gone (docs/reaper.md, "The evidence"): its clock runs ahead.
	later := func() time.Time { return time.Now().Add(pol.Grace + time.Second) }
	c := &gc.Collector{VMs: reaper, Cluster: cluster, Policy: pol, Delete: true, Now: later, Log: logger}
	pass, err := c.Run(ctx)
	if err != nil {
		return "", err
	}
	if err := gc.Print(out, "table", pass); err != nil {
		return "", err
	}
	fmt.Fprintf(out, "Reaped %d podVM; PeerPod finalizers released: %d.\n", pass.Count(gc.Deleted), len(pass.Released))
	left := fake.Instances()
	fmt.Fprintf(out, "Instances left in demo-project: %d\n", len(left))
	if len(left) != 0 {
		return "", fmt.Errorf("%d instances leaked", len(left))
	}
	if pass.Count(gc.Deleted) != 1 {
		return "", fmt.Errorf("the reaper deleted %d podVMs, want the 1 the adaptor left", pass.Count(gc.Deleted))
	}
	return fmt.Sprintf("demo: %d podVMs created with 1 T4 each, private IPs only; %s's deleted by its StopVM; leak scenario: the adaptor stopped with %s live and left its podVM (the warning logged), its pod was deleted meanwhile, and the reaper deleted that podVM; %d instances left.",
		created, pods[0].sandbox.Name, pods[1].sandbox.Name, len(left)), nil
}

// demoClusterID stands for the kube-system namespace UID that `gcp-t4
// install` puts in GCP_CLUSTER_ID.
const demoClusterID = "5d3e8a10-7c2b-4f6e-9a41-0b2c3d4e5f60"

// reaperConfig is the reaper Deployment's provider configuration: the same
// peer-pods-cm as the adaptor's.
func reaperConfig(fake *gcefake.Server) gcpt4.Config {
	return gcpt4.Config{ProjectID: "demo-project", Zone: "us-central1-a", FallbackZones: nil, ImageName: "podvm-t4",
		Network: "global/networks/default", Subnetwork: "default", DiskType: "pd-balanced", RootVolumeSize: 50,
		ProvisioningModel: setting.ProvisioningStandard, ClusterID: demoClusterID, Endpoint: fake.URL()}
}

// adaptorFlags are `gcp-t4 adaptor` flags for the emulator: the socket and
// pods directory, then the provider's flags as a deployment sets them.
func adaptorFlags(endpoint, socket, podsDir string) []string {
	return []string{
		"-socket", socket,
		"-pods-dir", podsDir,
		"-gcp-endpoint", endpoint,
		"-gcp-project-id", "demo-project",
		"-zone", "us-central1-a",
		"-zones", "us-central1-b,us-central1-f",
		"-image-name", "podvm-t4",
		"-network", "global/networks/default",
		"-subnetwork", "default",
		"-cluster-id", demoClusterID,
		"-node-name", "demo-node-0",
	}
}

// describe reads the sandbox's VM back from the emulator, as a user would
// read it from the console, for the table row. The shim learns nothing
// about the VM, so the VM is found by the sandbox ID the provider records.
func describe(fake *gcefake.Server, sandboxID string) (string, error) {
	for _, vm := range fake.Instances() {
		if !hasSandbox(vm, sandboxID) {
			continue
		}
		accel := "none"
		for _, a := range vm.GetGuestAccelerators() {
			accel = fmt.Sprintf("%d x %s", a.GetAcceleratorCount(), last(a.GetAcceleratorType()))
		}
		var internal string
		var external []string
		for _, nic := range vm.GetNetworkInterfaces() {
			if internal == "" {
				internal = nic.GetNetworkIP()
			}
			for _, ac := range nic.GetAccessConfigs() {
				external = append(external, ac.GetNatIP())
			}
		}
		if len(external) > 0 {
			return "", fmt.Errorf("podVM %s has an external IP %s", vm.GetName(), strings.Join(external, ","))
		}
		if internal == "" {
			return "", fmt.Errorf("podVM %s has no internal IP", vm.GetName())
		}
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", vm.GetName(), last(vm.GetMachineType()), accel, last(vm.GetZone()), internal, "none"), nil
	}
	return "", fmt.Errorf("no podVM with sandbox %s in the emulator", sandboxID)
}

func hasSandbox(vm *computepb.Instance, sandboxID string) bool {
	for _, it := range vm.GetMetadata().GetItems() {
		if it.GetKey() == gcpt4.SandboxMetadata && it.GetValue() == sandboxID {
			return true
		}
	}
	return false
}

func last(url string) string { return url[strings.LastIndex(url, "/")+1:] }
