// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"bytes"
	"context"
	"log"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// The tenant guard holds on every path: template mode as profile mode, the
// plan as the create. Each case goes through the real Google client to the
// emulator and counts inserts, so a refusal that comes after a VM was made
// fails too.

// sentImages are the boot images of every insert the provider sent.
func sentImages(t *testing.T, fake *gcefake.Server) []string {
	t.Helper()
	var out []string
	for _, c := range fake.Calls() {
		if c.Kind != "instances.insert" {
			continue
		}
		var inst computepb.Instance
		if err := protojson.Unmarshal(c.Body, &inst); err != nil {
			t.Fatalf("insert body: %v", err)
		}
		for _, d := range inst.GetDisks() {
			if d.GetBoot() {
				out = append(out, d.GetInitializeParams().GetSourceImage())
			}
		}
	}
	return out
}

// refusedWithoutInsert asserts that a create of spec is refused, naming
// every want, before any insert.
func refusedWithoutInsert(t *testing.T, p *Provider, fake *gcefake.Server, spec provider.InstanceTypeSpec, want ...string) {
	t.Helper()
	fake.ResetCalls()
	_, err := p.CreateInstance(context.Background(), "tenant", sandbox, cloudConfig("tenant"), spec)
	if err == nil {
		t.Fatalf("%+v: created, want a refusal naming %v", spec, want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%+v: error %q lacks %q", spec, err, w)
		}
	}
	if n := fake.CountCalls("instances.insert"); n != 0 {
		t.Errorf("%+v: %d insert(s) before the refusal", spec, n)
	}
}

// Item 1 of the review: with GCP_INSTANCE_TEMPLATE set, a pod's image
// annotation went into the template's boot disk unchecked.
func TestTemplateModeHoldsTheImageAllowList(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) { c.InstanceTemplate = "t4-private" })
	addTemplate(fake, "", t4TemplateProps())
	foreign := oneT4
	foreign.Image = "projects/attacker-proj/global/images/evil"
	refusedWithoutInsert(t, p, fake, foreign, annotImage, "GCP_ALLOWED_IMAGES", "projects/attacker-proj/global/images/evil")

	// The plan runs the same check, and says so before it says that a
	// template's shape needs the API.
	cfg := p.cfg
	if _, err := cfg.PlanInsert(nil, foreign, "tenant", sandbox, ""); err == nil || !strings.Contains(err.Error(), "GCP_ALLOWED_IMAGES") {
		t.Errorf("plan in template mode with a foreign image: %v, want a refusal naming GCP_ALLOWED_IMAGES", err)
	}

	// No image annotation: the template's own image, untouched.
	if _, err := p.CreateInstance(context.Background(), "plain", sandbox, cloudConfig("plain"), oneT4); err != nil {
		t.Fatalf("template create without an image annotation: %v", err)
	}
	if got := sentImages(t, fake); len(got) != 0 {
		t.Errorf("without an annotation the body overrode the template's disks with %v", got)
	}
}

// An allowed image is compared and sent in one canonical form, so a host
// or a prefix the comparison drops never reaches GCE; only Compute
// Engine's own hosts are taken.
func TestImageIsSentAsCompared(t *testing.T) {
	for _, mode := range []string{"profile", "template"} {
		t.Run(mode, func(t *testing.T) {
			p, fake := newTestProvider(t, func(c *Config) {
				c.AllowedImages = commaList{"podvm-t4-v2"}
				if mode == "template" {
					c.InstanceTemplate = "t4-private"
				}
			})
			addTemplate(fake, "", t4TemplateProps())
			fake.AddImage("demo-project", &computepb.Image{Name: proto.String("podvm-t4-v2"), DiskSizeGb: proto.Int64(20)})
			for _, evil := range []string{
				"https://evil.example.com/compute/v1/projects/demo-project/global/images/podvm-t4-v2",
				"http://compute.googleapis.com/compute/v1/projects/demo-project/global/images/podvm-t4-v2",
				"https://compute.googleapis.com.evil.example.com/compute/v1/projects/demo-project/global/images/podvm-t4-v2",
				" podvm-t4-v2",
				"projects/demo-project/global/images/podvm-t4-v2?alt=json",
			} {
				spec := oneT4
				spec.Image = evil
				refusedWithoutInsert(t, p, fake, spec, annotImage)
			}
			fake.ResetCalls()
			spec := oneT4
			spec.Image = "https://compute.googleapis.com/compute/v1/projects/demo-project/global/images/podvm-t4-v2"
			if _, err := p.CreateInstance(context.Background(), "ok", sandbox, cloudConfig("ok"), spec); err != nil {
				t.Fatalf("allowed image by its full URL: %v", err)
			}
			if got := sentImages(t, fake); len(got) != 1 || got[0] != "projects/demo-project/global/images/podvm-t4-v2" {
				t.Errorf("sent boot images %q, want the canonical projects/demo-project/global/images/podvm-t4-v2", got)
			}
		})
	}
}

// A template with a T4 gave a GPU to a pod that declared none, and the
// cost guard (which counts declared GPUs) counted 0 for it; the per-pod
// limits the admin set bind the template too.
func TestTemplateGPUsAreDeclaredAndCapped(t *testing.T) {
	p, fake := newTestProvider(t, func(c *Config) { c.InstanceTemplate = "t4-private" })
	two := t4TemplateProps()
	two.GuestAccelerators[0].AcceleratorCount = proto.Int32(2)
	two.MachineType = proto.String("n1-standard-8")
	addTemplate(fake, "", two)
	refusedWithoutInsert(t, p, fake, provider.InstanceTypeSpec{VCPUs: 1, Memory: 1024}, "GCP_INSTANCE_TEMPLATE t4-private gives 2 GPU(s) but the pod requests 0", "nvidia.com/gpu: 2")
	refusedWithoutInsert(t, p, fake, oneT4, "gives 2 GPU(s) but the pod requests 1")
	fake.ResetCalls()
	if _, err := p.CreateInstance(context.Background(), "two", sandbox, cloudConfig("two"), provider.InstanceTypeSpec{GPUs: 2}); err != nil {
		t.Fatalf("a pod declaring the template's 2 GPUs: %v", err)
	}

	capped, fake2 := newTestProvider(t, func(c *Config) { c.InstanceTemplate = "t4-private"; c.MaxGPUsPerPod = 1 })
	addTemplate(fake2, "", two)
	refusedWithoutInsert(t, capped, fake2, provider.InstanceTypeSpec{GPUs: 2}, "GCP_MAX_GPUS_PER_POD", "at most 1")
}

// Item 3: the limits derived from the allowed shapes bound only what fit
// chose; a pod naming h100-cc (26 vCPUs, above t4-4's 16) got it in any
// namespace once it had an image, and listing an N1 type lifted the GPU
// limit to four.
func TestDefaultCapsBindNamedShapes(t *testing.T) {
	h100 := provider.InstanceTypeSpec{InstanceType: "h100-cc", GPUs: 1}
	p, fake := newTestProvider(t, func(c *Config) { c.ProfileImages = provider.KeyValueFlag{"h100-cc": "podvm-tdx"} })
	addTDXImage(fake, "podvm-tdx", "UEFI_COMPATIBLE", "TDX_CAPABLE", "GVNIC")
	refusedWithoutInsert(t, p, fake, h100, "shape h100-cc", "26 vCPU(s)", "GCP_MAX_VCPUS_PER_POD is unset", "list the shape in GCP_INSTANCE_TYPES")
	cfg := p.cfg
	if _, err := cfg.PlanInsert(nil, h100, "tenant", sandbox, ""); err == nil || !strings.Contains(err.Error(), "GCP_MAX_VCPUS_PER_POD") {
		t.Errorf("plan of h100-cc under the default limits: %v, want a refusal naming GCP_MAX_VCPUS_PER_POD", err)
	}

	// Listed by name, it is the admin's decision.
	listed, fake2 := newTestProvider(t, func(c *Config) {
		c.ProfileImages = provider.KeyValueFlag{"h100-cc": "podvm-tdx"}
		c.InstanceTypes = commaList{"h100-cc"}
		c.ProvisioningModel = setting.ProvisioningSpot
	})
	addTDXImage(fake2, "podvm-tdx", "UEFI_COMPATIBLE", "TDX_CAPABLE", "GVNIC")
	if _, err := listed.CreateInstance(context.Background(), "cc", sandbox, cloudConfig("cc"), h100); err != nil {
		t.Fatalf("h100-cc listed in GCP_INSTANCE_TYPES: %v", err)
	}

	// A listed N1 type counts as one T4, not four.
	n1, fake3 := newTestProvider(t, func(c *Config) { c.InstanceTypes = commaList{"t4-1", "n1-standard-4"} })
	refusedWithoutInsert(t, n1, fake3, provider.InstanceTypeSpec{InstanceType: "n1-standard-4", GPUs: 4}, "4 GPU(s)", "at most 1 per pod", "GCP_MAX_GPUS_PER_POD")
	fake3.ResetCalls()
	if _, err := n1.CreateInstance(context.Background(), "one", sandbox, cloudConfig("one"), provider.InstanceTypeSpec{InstanceType: "n1-standard-4", GPUs: 1}); err != nil {
		t.Fatalf("n1-standard-4 with one T4: %v", err)
	}
}

// Item 8: an image annotation with a newline produced a forged second line
// in CAA's log. It is refused, and the error (which CAA logs as it is)
// holds the value quoted, on one line.
func TestImageAnnotationCannotForgeALogLine(t *testing.T) {
	var buf bytes.Buffer
	p, fake := newTestProvider(t, func(c *Config) { c.AllowedImages = commaList{"podvm-t4-v2"} })
	p.log = log.New(&buf, "", 0)
	for _, img := range []string{
		"projects/demo-project/global/images/podvm-t4-v2\n2026/01/01 00:00:00 [adaptor/cloud/gcp-t4] podVM x deleted",
		"projects/demo-project/global/images/evil\r\nforged",
		"podvm\x1b[2Kforged",
	} {
		spec := oneT4
		spec.Image = img
		fake.ResetCalls()
		_, err := p.CreateInstance(context.Background(), "tenant", sandbox, cloudConfig("tenant"), spec)
		if err == nil {
			t.Fatalf("image %q was accepted", img)
		}
		if strings.ContainsAny(err.Error(), "\r\n\x1b") {
			t.Errorf("the refusal carries the raw value: %q", err)
		}
		if n := fake.CountCalls("instances.insert"); n != 0 {
			t.Errorf("image %q: %d inserts", img, n)
		}
	}
	if strings.ContainsAny(buf.String(), "\r\x1b") || strings.Contains(buf.String(), "forged") {
		t.Errorf("the provider's log carries the raw value:\n%s", buf.String())
	}
}
