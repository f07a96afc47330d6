// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"encoding/base64"
	"fmt"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util"
)

// InsertPlan is what CreateInstance would send for one pod, decided without
// calling GCE: the profile the catalog selects, the provisioning models and
// zones in the order they are tried, and the insert body for each. Operator
// tools (`gcp-t4 plan`) use it so that what they show is what the provider
// sends, not a re-implementation of it.
type InsertPlan struct {
	Profile catalog.Profile
	// Selection is every shape that fits, cheapest first; Profile is its
	// choice.
	Selection *catalog.Selection
	// Models are the provisioning models in the order tried (SPOT, then
	// STANDARD with GCP_SPOT_FALLBACK).
	Models []string
	// Requirements are what GCE demands of the chosen profile beyond its
	// shape (image features, disk interface, NIC, provisioning).
	Requirements []string
	// Zones are the configured zones in fallback order, primary first.
	// With GCP_ZONES=auto only the primary is known without the API.
	Zones     []string
	AutoZones bool
	// Name is the podVM's instance name.
	Name string
	// DiskSizeGB is the configured boot disk size; at run time it is
	// raised to the image's size when that is larger.
	DiskSizeGB int64

	cfg Config
	vm  podVM
}

// PlanInsert decides a pod's podVM as CreateInstance does (allow-list,
// catalog selection, provisioning models, zones), without any API call.
// cloudConfig is the cloud-config text CAA would generate; the provider
// sends it base64-encoded. A nil catalog is built from the configuration.
// Template mode is refused: its shape lives in the template, which only
// the API can read.
func (c *Config) PlanInsert(cat *catalog.Catalog, spec provider.InstanceTypeSpec, podName, sandboxID, cloudConfig string) (*InsertPlan, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if cat == nil {
		var err error
		if cat, err = catalog.New(c.ProfilesFile, c.Profiles); err != nil {
			return nil, err
		}
	}
	// The image allow-list first, as CreateInstance runs it, so that a
	// foreign image is refused in template mode too, naming the setting.
	var err error
	if spec.Image, err = c.admitImage(cat, spec.Image); err != nil {
		return nil, err
	}
	if c.InstanceTemplate != "" {
		return nil, fmt.Errorf("GCP_INSTANCE_TEMPLATE is set: the podVM's shape comes from template %s, which only the API can read; unset it to plan with profiles", c.InstanceTemplate)
	}
	if err := c.checkCatalog(cat); err != nil {
		return nil, err
	}
	sel, err := c.selectShape(cat, spec)
	if err != nil {
		return nil, err
	}
	profile := sel.FirstChoice().Profile
	name := util.GenerateInstanceName(podName, sandboxID, maxInstanceName)
	return &InsertPlan{
		Profile:      profile,
		Selection:    sel,
		Models:       sel.Models(),
		Requirements: c.Requirements(profile),
		Zones:        c.Zones(),
		AutoZones:    c.autoZones(),
		Name:         name,
		DiskSizeGB:   int64(c.RootVolumeSize),
		cfg:          *c,
		vm: podVM{
			name:      name,
			podName:   podName,
			sandboxID: sandboxID,
			userData:  base64.StdEncoding.EncodeToString([]byte(cloudConfig)),
			image:     spec.Image,
		},
	}, nil
}

// SetNamespace names the pod's namespace, which CAA passes inside its
// cloud-config and the provider labels the podVM with.
func (p *InsertPlan) SetNamespace(ns string) { p.vm.namespace = ns }

// Request is the exact instances.insert request of the chosen profile for
// one zone and model, requestId included.
func (p *InsertPlan) Request(zone, model string) *computepb.InsertInstanceRequest {
	return p.requestFor(p.Profile, zone, model)
}

// requestFor is the exact instances.insert request of one of the
// selection's profiles for one zone and model.
func (p *InsertPlan) requestFor(prof catalog.Profile, zone, model string) *computepb.InsertInstanceRequest {
	st := p.cfg.profileStep(p.vm, prof, model, p.DiskSizeGB)
	return &computepb.InsertInstanceRequest{
		Project:          p.cfg.ProjectID,
		Zone:             zone,
		InstanceResource: st.build(zone),
		RequestId:        proto.String(requestID(p.cfg.ProjectID, zone, model, st.shapeKey(), p.vm.name, p.vm.sandboxID)),
	}
}

// ImageRef is PODVM_IMAGE_NAME parsed as the provider reads it: an image
// (project, name) or an image family (project, family).
func (c *Config) ImageRef() (project, name, family string, err error) {
	ref, err := c.parseImage(c.ImageName)
	return ref.project, ref.name, ref.family, err
}

// CacheImageRef is GCP_CACHE_IMAGE's parts, as ImageRef's; all empty when
// it is not set.
func (c *Config) CacheImageRef() (project, name, family string, err error) {
	if c.CacheImage == "" {
		return "", "", "", nil
	}
	ref, err := c.parseImageFor("GCP_CACHE_IMAGE", c.CacheImage)
	return ref.project, ref.name, ref.family, err
}

// ClientOptions are the options the provider makes its Google API clients
// with (endpoint, credentials), for tools that call the same project.
func (c *Config) ClientOptions() []option.ClientOption { return c.clientOptions() }

// NetworkURL is GCP_NETWORK as the provider sends it.
func (c *Config) NetworkURL() string { return c.networkURL() }

// Region is the region of a zone name.
func Region(zone string) string { return regionOf(zone) }
