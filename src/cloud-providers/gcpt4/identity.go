// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit"
)

// Labels that say which cluster, node and namespace a podVM belongs to.
// Two clusters may share a project: every clean-up path compares
// ClusterLabel with its own cluster's ID and leaves every other VM alone.
const (
	// ClusterLabel is the cluster's ID: the kube-system namespace's UID,
	// which is fixed for the cluster's life and unique across clusters.
	ClusterLabel = "caa-cluster"
	// ClusterNameLabel is an optional human-readable cluster name; it is
	// shown, never trusted: two clusters may share a name.
	ClusterNameLabel = "caa-cluster-name"
	// NodeLabel is the node whose CAA created the VM (label form).
	NodeLabel = "caa-node"
	// NamespaceLabel is the pod's namespace (label form): the instance
	// name carries only the pod name, which two namespaces may share.
	NamespaceLabel = "caa-namespace"
	// NodeMetadata is the node's full name, which a label may truncate.
	NodeMetadata = "caa-node-name"
	// NamespaceMetadata is the pod's full namespace.
	NamespaceMetadata = "caa-namespace"
)

// reservedLabels are set by the provider; GCP_LABELS may not override them.
var reservedLabels = []string{ManagedByLabel, SandboxLabel, PodLabel, ProfileLabel, ClusterLabel, ClusterNameLabel, NodeLabel, NamespaceLabel}

// validateIdentity checks the cluster identity settings. An empty
// GCP_CLUSTER_ID passes here (peerpod-ctrl and the read-only tools need
// none); CreateInstance refuses without it.
func (c *Config) validateIdentity() error {
	if c.ClusterID != "" && !labelValueRE.MatchString(c.ClusterID) {
		return fmt.Errorf("GCP_CLUSTER_ID: %q is not a GCE label value; use the kube-system namespace's UID", c.ClusterID)
	}
	if !labelValueRE.MatchString(c.ClusterName) {
		return fmt.Errorf("GCP_CLUSTER_NAME: %q is not a GCE label value (lowercase letters, digits, '_' and '-', at most 63 characters)", c.ClusterName)
	}
	return nil
}

// errNoClusterID is CreateInstance's refusal without a cluster identity: a
// VM without one is never collected automatically.
func errNoClusterID() error {
	return errors.New("GCP_CLUSTER_ID (-cluster-id) is not set; set it to the kube-system namespace's UID, as gcp-t4 install does")
}

// identityLabels are the labels every podVM this configuration creates
// carries besides the per-pod ones, for display (gcp-t4 plan).
func (c *Config) identityLabels() map[string]string {
	out := map[string]string{ManagedByLabel: ManagedByValue}
	if c.ClusterID != "" {
		out[ClusterLabel] = c.ClusterID
	}
	if c.ClusterName != "" {
		out[ClusterNameLabel] = c.ClusterName
	}
	if c.NodeName != "" {
		out[NodeLabel] = labelValue(c.NodeName)
	}
	return out
}

// apfConfigPath is where CAA writes the agent-protocol-forwarder's
// configuration into the cloud-config it hands the provider, with the
// pod's namespace in it: forwarder.DefaultConfigPath and forwarder.Config's
// "pod-namespace" field, written by cloudService.CreateVM
// (src/cloud-api-adaptor/pkg/forwarder/forwarder.go and
// pkg/adaptor/cloud/cloud.go, CAA v0.22.0, 38d0fcf7).
const apfConfigPath = "/run/peerpod/apf.json"

// podNamespace reads the pod's namespace from CAA's cloud-config, the only
// place CreateInstance learns it; "" when the generator is not CAA's.
func podNamespace(cc cloudinit.CloudConfigGenerator) string {
	cfg, ok := cc.(*cloudinit.CloudConfig)
	if !ok || cfg == nil {
		return ""
	}
	for _, f := range cfg.WriteFiles {
		if f.Path != apfConfigPath {
			continue
		}
		var apf struct {
			PodNamespace string `json:"pod-namespace"`
		}
		if json.Unmarshal([]byte(f.Content), &apf) == nil {
			return apf.PodNamespace
		}
	}
	return ""
}
