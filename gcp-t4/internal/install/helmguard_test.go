package install

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// helmChartOutput is what upstream's peerpods chart renders for
// peer-pods-cm and CAA's DaemonSet in namespace ns, in the form its
// templates write (configmap.yaml and daemonset.yaml at CAA v0.22.0,
// 38d0fcf7).
func helmChartOutput(ns string) string {
	return `---
apiVersion: v1
kind: ConfigMap
metadata:
  name: peer-pods-cm
  namespace: ` + ns + `
data:
  CLOUD_PROVIDER: "gcp-t4"
  GCP_CLUSTER_ID: "9d0e8c4a-1b2f-4c3d-8e5f-6a7b8c9d0e1f"
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: cloud-api-adaptor-daemonset
  namespace: ` + ns + `
spec:
  selector:
    matchLabels:
      app: cloud-api-adaptor
  template:
    metadata:
      labels:
        app: cloud-api-adaptor
    spec:
      containers:
      - command:
        - /usr/local/bin/entrypoint.sh
        image: ghcr.io/example/caa-gcp-t4:v1
        name: cloud-api-adaptor-con
`
}

// The Helm path installs the cost guard as `gcp-t4 install` does, on by
// default, with its limits read from the release's namespace; COST_GUARD=off
// leaves it out. Rendered by the post-renderer with the real kustomize CLI.
func TestHelmPostRendererAddsTheCostGuard(t *testing.T) {
	bin := kustomizeCLI(t)
	script := filepath.Join("..", "..", "..", "install", "helm", "post-render", "post-render.sh")
	render := func(env ...string) (map[string]map[string]any, string, error) {
		cmd := exec.Command("sh", script)
		cmd.Env = append([]string{"PATH=/usr/bin:/bin", "KUSTOMIZE=" + bin}, env...)
		cmd.Stdin = strings.NewReader(helmChartOutput("peerpods"))
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		objs := map[string]map[string]any{}
		for _, doc := range strings.Split(out.String(), "\n---\n") {
			var o map[string]any
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil || o == nil {
				continue
			}
			md, _ := o["metadata"].(map[string]any)
			objs[o["kind"].(string)+"/"+md["name"].(string)] = o
		}
		return objs, errb.String(), err
	}
	objs, errs, err := render()
	if err != nil {
		t.Fatalf("post-render: %v\n%s", err, errs)
	}
	for _, k := range []string{"ValidatingAdmissionPolicy/gcp-t4-cost-guard", "ValidatingAdmissionPolicy/gcp-t4-cost-guard-annotations",
		"ValidatingAdmissionPolicyBinding/gcp-t4-cost-guard", "ValidatingAdmissionPolicyBinding/gcp-t4-cost-guard-annotations", "ConfigMap/gcp-t4-cost-guard"} {
		if objs[k] == nil {
			t.Errorf("the Helm path's render lacks %s", k)
		}
	}
	if cm := objs["ConfigMap/gcp-t4-cost-guard"]; cm != nil {
		if ns := cm["metadata"].(map[string]any)["namespace"]; ns != "peerpods" {
			t.Errorf("the limits ConfigMap is in %v, want the release's namespace peerpods", ns)
		}
	}
	if b := objs["ValidatingAdmissionPolicyBinding/gcp-t4-cost-guard"]; b != nil {
		ref := b["spec"].(map[string]any)["paramRef"].(map[string]any)
		if ref["namespace"] != "peerpods" {
			t.Errorf("the binding reads its limits from %v, want the release's namespace peerpods", ref["namespace"])
		}
	}
	objs, errs, err = render("COST_GUARD=off")
	if err != nil {
		t.Fatalf("post-render with COST_GUARD=off: %v\n%s", err, errs)
	}
	for k := range objs {
		if strings.Contains(k, "cost-guard") {
			t.Errorf("COST_GUARD=off still renders %s", k)
		}
	}
	if _, errs, err = render("COST_GUARD=maybe"); err == nil || !strings.Contains(errs, "COST_GUARD=maybe") {
		t.Errorf("COST_GUARD=maybe: %v %s, want a refusal naming it", err, errs)
	}
}
