package install

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// workload is a rendered pod template with its owner's name.
type workload struct {
	name string
	tpl  corev1.PodTemplateSpec
}

// podTemplates returns every Deployment's and DaemonSet's pod template.
func podTemplates(t *testing.T, m resmap.ResMap) []workload {
	t.Helper()
	var out []workload
	for _, r := range m.Resources() {
		if k := r.GetKind(); k != "Deployment" && k != "DaemonSet" {
			continue
		}
		obj, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		var w struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &w); err != nil {
			t.Fatalf("%s %s: %v", r.GetKind(), r.GetName(), err)
		}
		out = append(out, workload{r.GetName(), w.Spec.Template})
	}
	return out
}

func namedPort(tpl corev1.PodTemplateSpec, name string) bool {
	for _, c := range tpl.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}

// TestMetricsPortsReachOnlyCollectors: every pod on the pod network that
// serves a metrics port is selected by a NetworkPolicy admitting only
// GKE Managed Prometheus' namespace and namespaces labelled for scraping,
// on that named port; the CAA DaemonSet runs on the host network (no
// policy applies to it), and v0.22.0's CAA serves no metrics.
func TestMetricsPortsReachOnlyCollectors(t *testing.T) {
	m := mustRender(t, Settings{GKERemediation: true, Config: withRequired()})
	var policies []networkingv1.NetworkPolicy
	for _, r := range m.Resources() {
		if r.GetKind() == "NetworkPolicy" {
			obj, err := r.Map()
			if err != nil {
				t.Fatal(err)
			}
			var np networkingv1.NetworkPolicy
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &np); err != nil {
				t.Fatal(err)
			}
			policies = append(policies, np)
		}
	}
	covered := 0
	for _, w := range podTemplates(t, m) {
		if w.tpl.Spec.HostNetwork || !namedPort(w.tpl, "metrics") {
			continue
		}
		var match *networkingv1.NetworkPolicy
		for i := range policies {
			sel, err := metav1.LabelSelectorAsSelector(&policies[i].Spec.PodSelector)
			if err != nil {
				t.Fatal(err)
			}
			if !sel.Empty() && sel.Matches(labels.Set(w.tpl.Labels)) {
				match = &policies[i]
			}
		}
		if match == nil {
			t.Errorf("%s serves metrics on the pod network and no NetworkPolicy selects it", w.name)
			continue
		}
		covered++
		if len(match.Spec.PolicyTypes) != 1 || match.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress || len(match.Spec.Ingress) != 1 {
			t.Errorf("%s: policy %s: want one ingress rule, ingress only: %+v", w.name, match.Name, match.Spec)
			continue
		}
		rule := match.Spec.Ingress[0]
		if len(rule.Ports) != 1 || rule.Ports[0].Port == nil || rule.Ports[0].Port.String() != "metrics" {
			t.Errorf("%s: policy %s opens %+v, want the named port metrics only", w.name, match.Name, rule.Ports)
		}
		var sources []string
		for _, p := range rule.From {
			if p.PodSelector != nil || p.IPBlock != nil || p.NamespaceSelector == nil || len(p.NamespaceSelector.MatchLabels) != 1 {
				t.Errorf("%s: policy %s: source %+v is not one namespace label", w.name, match.Name, p)
				continue
			}
			for k, v := range p.NamespaceSelector.MatchLabels {
				sources = append(sources, k+"="+v)
			}
		}
		if got := strings.Join(sources, ","); got != "kubernetes.io/metadata.name=gmp-system,caa-gcp-t4/metrics=scrape" {
			t.Errorf("%s: policy %s admits %s", w.name, match.Name, got)
		}
	}
	if covered != 2 {
		t.Errorf("%d workloads with a metrics port on the pod network, want 2 (remediate, reaper)", covered)
	}
}

// TestMonitoringExampleScrapesEveryMetricsPort: examples/monitoring's
// PodMonitorings (GKE Managed Prometheus) select each workload with a
// metrics port, by a label it carries and a port it names.
func TestMonitoringExampleScrapesEveryMetricsPort(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join(repoInstall, "examples", "monitoring"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	ex, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	type podMonitoring struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Spec     struct {
			Selector  metav1.LabelSelector `json:"selector"`
			Endpoints []struct {
				Port string `json:"port"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	var pms []podMonitoring
	for _, r := range ex.Resources() {
		if r.GetKind() != "PodMonitoring" || r.GetApiVersion() != "monitoring.googleapis.com/v1" {
			t.Errorf("%s %s: the example holds PodMonitorings only", r.GetApiVersion(), r.GetKind())
			continue
		}
		obj, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		var pm podMonitoring
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &pm); err != nil {
			t.Fatal(err)
		}
		pms = append(pms, pm)
	}
	m := mustRender(t, Settings{GKERemediation: true, Config: withRequired()})
	for _, w := range podTemplates(t, m) {
		if !namedPort(w.tpl, "metrics") {
			continue
		}
		found := false
		for _, pm := range pms {
			sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
			if err != nil {
				t.Fatal(err)
			}
			if pm.Metadata.Namespace != Namespace || sel.Empty() || !sel.Matches(labels.Set(w.tpl.Labels)) {
				continue
			}
			for _, e := range pm.Spec.Endpoints {
				found = found || namedPort(w.tpl, e.Port)
			}
		}
		if !found {
			t.Errorf("%s: no PodMonitoring in %s selects it on a port it names", w.name, Namespace)
		}
	}
}
