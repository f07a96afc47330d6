// Package demo runs the provider's main job against the embedded GCE
// emulator: what CAA does for two single-T4 pods, end to end, with no cloud
// account.
package demo

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit"
)

// pod is one peer pod as CAA sees it after the webhook moved its resource
// requests into annotations.
type pod struct {
	name      string
	sandboxID string
	spec      provider.InstanceTypeSpec
}

// Run provisions, shows and deletes the demo podVMs. args are extra
// provider flags (e.g. -provisioning-model SPOT).
func Run(ctx context.Context, args []string, out io.Writer, logger *slog.Logger) error {
	fake := gcefake.New()
	defer fake.Close()
	// A realistic insert takes time; the provider must long-poll for it.
	fake.SetOperationLatency(150 * time.Millisecond)

	prov, err := newProvider(fake.URL(), args)
	if err != nil {
		return err
	}
	defer prov.Teardown()
	if err := prov.ConfigVerifier(); err != nil {
		return fmt.Errorf("config verifier: %w", err)
	}

	// Two ranks of a tensor-parallel model, one T4 each: what the webhook
	// turns `nvidia.com/gpu: 1` plus 3 CPUs and 12 GiB into.
	pods := []pod{
		{name: "mistral-tp-0", sandboxID: "5f1c0a6e9b2d4c7fa1e3b5d7c9f0e2a4b6c8d0e1f3a5b7c9d1e3f5a7b9c1d3e5", spec: provider.InstanceTypeSpec{GPUs: 1, VCPUs: 3, Memory: 12288}},
		{name: "mistral-tp-1", sandboxID: "a9e7c5b3d1f0e2c4a6b8d0f1e3c5a7b9d1f3e5c7a9b1d3f5e7c9a1b3d5f7e9c1", spec: provider.InstanceTypeSpec{GPUs: 1, VCPUs: 3, Memory: 12288}},
	}
	start := time.Now()
	fmt.Fprintf(out, "Provisioning %d single-T4 podVMs through provider %q on the embedded GCE emulator (project demo-project)...\n\n", len(pods), gcpt4.ProviderName)
	var ids []string
	defer func() {
		// Whatever failed above, leave no VM behind.
		for _, id := range ids {
			_ = prov.DeleteInstance(context.WithoutCancel(ctx), id)
		}
	}()
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tINSTANCE\tMACHINE TYPE\tACCELERATOR\tZONE\tINTERNAL IP\tEXTERNAL IP")
	for _, p := range pods {
		cfg := &cloudinit.CloudConfig{WriteFiles: []cloudinit.WriteFile{{
			Path:    "/run/peerpod/apf.json",
			Content: fmt.Sprintf(`{"pod-network":{"podip":"10.4.0.%d/24"},"pod-name":%q,"pod-namespace":"default"}`, 10+len(ids), p.name),
		}}}
		inst, err := prov.CreateInstance(ctx, p.name, p.sandboxID, cfg, p.spec)
		if inst != nil && inst.ID != "" {
			ids = append(ids, inst.ID)
		}
		if err != nil {
			return fmt.Errorf("creating the podVM of %s: %w", p.name, err)
		}
		row, err := describe(fake, inst)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.name, inst.Name, row)
	}
	tw.Flush()
	fmt.Fprintf(out, "\n%d podVMs running after %s; GCE API calls: %d inserts, %d operation waits, %d gets.\n",
		len(ids), time.Since(start).Round(time.Millisecond), fake.CountCalls("instances.insert"), fake.CountCalls("zoneOperations.wait"), fake.CountCalls("instances.get"))

	fmt.Fprintln(out, "\nDeleting the podVMs, as CAA does when the pods go away...")
	for len(ids) > 0 {
		if err := prov.DeleteInstance(ctx, ids[0]); err != nil {
			return err
		}
		ids = ids[1:]
	}
	left := fake.Instances()
	fmt.Fprintf(out, "Instances left in demo-project: %d\n", len(left))
	if len(left) != 0 {
		return fmt.Errorf("%d instances leaked", len(left))
	}
	return nil
}

// newProvider builds the provider exactly as CAA does: look it up in the
// provider table, register its flags, parse, construct.
func newProvider(endpoint string, args []string) (provider.Provider, error) {
	cloud := provider.Get(gcpt4.ProviderName)
	if cloud == nil {
		return nil, fmt.Errorf("provider %q is not registered", gcpt4.ProviderName)
	}
	fs := flag.NewFlagSet("cloud-api-adaptor "+gcpt4.ProviderName, flag.ContinueOnError)
	cloud.ParseCmd(fs)
	base := []string{
		"-gcp-endpoint", endpoint,
		"-gcp-project-id", "demo-project",
		"-zone", "us-central1-a",
		"-zones", "us-central1-b,us-central1-f",
		"-image-name", "podvm-t4",
		"-network", "global/networks/default",
		"-subnetwork", "default",
	}
	if err := fs.Parse(append(base, args...)); err != nil {
		return nil, err
	}
	return cloud.NewProvider()
}

// describe reads the created VM back from the emulator, as a user would
// read it from the console, for the table row.
func describe(fake *gcefake.Server, inst *provider.Instance) (string, error) {
	for _, vm := range fake.Instances() {
		if vm.GetName() != inst.Name {
			continue
		}
		accel := "none"
		for _, a := range vm.GetGuestAccelerators() {
			accel = fmt.Sprintf("%d x %s", a.GetAcceleratorCount(), last(a.GetAcceleratorType()))
		}
		external := "none"
		var ips []string
		for _, nic := range vm.GetNetworkInterfaces() {
			for _, ac := range nic.GetAccessConfigs() {
				ips = append(ips, ac.GetNatIP())
			}
		}
		if len(ips) > 0 {
			return "", fmt.Errorf("podVM %s has an external IP %s", inst.Name, strings.Join(ips, ","))
		}
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s", last(vm.GetMachineType()), accel, last(vm.GetZone()), inst.IPs[0], external), nil
	}
	return "", fmt.Errorf("podVM %s not found in the emulator", inst.Name)
}

func last(url string) string { return url[strings.LastIndex(url, "/")+1:] }
