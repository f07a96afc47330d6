package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"

	"github.com/caa-gcp-t4/gcp-t4/internal/prices"
)

// PlaceholderCloudConfig stands in for the cloud-config CAA generates per
// pod (agent TLS material, pod network, initdata): plan has no pod to
// generate it for, so the insert's user-data carries this instead.
const PlaceholderCloudConfig = "#cloud-config\n# placeholder: CAA writes this pod's /run/peerpod files here at create time\n"

// Planner plans podVMs with the provider's configuration and catalog.
type Planner struct {
	Config       gcpt4.Config
	Catalog      *catalog.Catalog
	Prices       *prices.Table
	RuntimeClass string
}

// Entry is the podVM one pod group gets.
type Entry struct {
	Workload     string            `json:"workload"`
	Group        string            `json:"group"`
	Replicas     int64             `json:"replicas"`
	Pod          string            `json:"pod"`
	Annotations  map[string]string `json:"annotations"`
	VCPUs        int64             `json:"vcpus"`
	MemoryMiB    int64             `json:"memoryMiB"`
	GPUs         int64             `json:"gpus"`
	InstanceType string            `json:"instanceType,omitempty"`

	Profile            string   `json:"profile"`
	MachineType        string   `json:"machineType"`
	Accelerator        string   `json:"accelerator,omitempty"`
	AcceleratorCount   int64    `json:"acceleratorCount"`
	Zones              []string `json:"zones"`
	ZonesDiscovered    bool     `json:"zonesDiscoveredAtRunTime,omitempty"`
	ProvisioningModels []string `json:"provisioningModels"`
	ExternalIP         string   `json:"externalIP"`
	Instance           string   `json:"instanceName"`

	PerVM prices.Estimate `json:"costPerVM"`
	Total float64         `json:"costPerHourAllReplicas"`

	// Alternative is the next-cheapest shape that fits (none when the pod
	// names its shape), with its price under the same model.
	Alternative *Alternative `json:"alternative,omitempty"`
	// Requirements are what GCE demands of the shape beyond itself
	// (image features, disk interface, NIC, provisioning).
	Requirements []string `json:"requirements,omitempty"`
	// Offerings are what a create walks, in order.
	Offerings []catalog.Offering `json:"offerings"`

	Warnings []string `json:"warnings,omitempty"`
	// Labels are the podVM's labels (cluster identity, node, pod).
	Labels map[string]string `json:"labels"`

	// Insert is the exact request for the first zone and model.
	Insert *computepb.InsertInstanceRequest `json:"-"`
}

// Alternative is a shape the provider did not choose.
type Alternative struct {
	Profile          string          `json:"profile"`
	MachineType      string          `json:"machineType"`
	Accelerator      string          `json:"accelerator,omitempty"`
	AcceleratorCount int64           `json:"acceleratorCount"`
	PerVM            prices.Estimate `json:"costPerVM"`
}

// Plan plans every group of a workload.
func (p *Planner) Plan(w Workload) ([]Entry, error) {
	var out []Entry
	for _, g := range w.Groups {
		e, err := p.planGroup(w, g)
		if err != nil {
			return nil, fmt.Errorf("%s %s, %s: %w", w.Kind, w.Name, g.Name, err)
		}
		out = append(out, e)
	}
	return out, nil
}

func (p *Planner) planGroup(w Workload, g Group) (Entry, error) {
	rc := p.RuntimeClass
	if rc == "" {
		rc = DefaultRuntimeClass
	}
	req, err := Request(g, rc)
	if err != nil {
		return Entry{}, err
	}
	pod := podName(w, g)
	ip, err := p.Config.PlanInsert(p.Catalog, req.Spec, pod, sandboxID(w, g), PlaceholderCloudConfig)
	if err != nil {
		return Entry{}, err
	}
	ip.SetNamespace(w.Namespace)
	prof := ip.Profile
	e := Entry{
		Workload:           w.Kind + "/" + w.Name,
		Group:              g.Name,
		Replicas:           g.Replicas,
		Pod:                pod,
		Annotations:        req.Annotations,
		VCPUs:              req.Spec.VCPUs,
		MemoryMiB:          req.Spec.Memory,
		GPUs:               req.Spec.GPUs,
		InstanceType:       req.Spec.InstanceType,
		Profile:            prof.Name,
		MachineType:        prof.MachineType,
		Accelerator:        prof.GPUModel(),
		AcceleratorCount:   prof.GPUs(),
		Zones:              ip.Zones,
		ZonesDiscovered:    ip.AutoZones,
		ProvisioningModels: ip.Models,
		ExternalIP:         "none",
		Instance:           ip.Name,
		Requirements:       ip.Requirements,
		Offerings:          ip.Selection.Offerings(ip.Zones),
		Warnings:           req.Warnings,
		Insert:             ip.Request(ip.Zones[0], ip.Models[0]),
	}
	e.Labels = displayLabels(e.Insert.GetInstanceResource().GetLabels())
	if p.Prices != nil {
		// Bundled GPUs are in the machine type's price; attached ones are
		// priced per card.
		spot := ip.Models[0] == setting.ProvisioningSpot
		e.PerVM = p.Prices.Hourly(prof.MachineType, prof.Accelerator, int64(prof.AcceleratorCount), spot)
		e.Total = e.PerVM.Total * float64(g.Replicas)
		if alt, ok := ip.Selection.Alternative(); ok {
			a := alt.Profile
			e.Alternative = &Alternative{Profile: a.Name, MachineType: a.MachineType, Accelerator: a.GPUModel(), AcceleratorCount: a.GPUs(),
				PerVM: p.Prices.Hourly(a.MachineType, a.Accelerator, int64(a.AcceleratorCount), spot)}
		}
	}
	return e, nil
}

// podName is a representative pod name: controllers add random suffixes,
// which only change the instance name and requestId.
func podName(w Workload, g Group) string {
	switch {
	case w.Kind == "Pod":
		return w.Name
	case g.Name == "pod":
		return w.Name + "-0"
	}
	return w.Name + "-" + sanitize(g.Name) + "-0"
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	return string(b)
}

// sandboxID is a stable stand-in for the kata sandbox ID (64 hex), so plan
// output is reproducible.
func sandboxID(w Workload, g Group) string {
	sum := sha256.Sum256([]byte("gcp-t4 plan\x00" + w.Namespace + "\x00" + w.Kind + "\x00" + w.Name + "\x00" + g.Name))
	return hex.EncodeToString(sum[:])
}

// displayLabels are the podVM's labels as plan shows them: what only the
// run time knows (the cluster's ID from GCP_CLUSTER_ID, the creating node)
// is named instead of left out.
func displayLabels(l map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range l {
		out[k] = v
	}
	if out[gcpt4.ClusterLabel] == "" {
		out[gcpt4.ClusterLabel] = "<GCP_CLUSTER_ID: the kube-system namespace's UID, set by gcp-t4 install>"
	}
	if out[gcpt4.NodeLabel] == "" {
		out[gcpt4.NodeLabel] = "<the creating node (NODE_NAME)>"
	}
	return out
}
