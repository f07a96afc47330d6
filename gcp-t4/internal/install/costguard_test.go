package install

import (
	"bytes"
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
)

// TestDefaultRenderHasTheCostGuard: with no --cost-guard flag the render
// carries both policies, their bindings and the limits with the H100's
// weight; --cost-guard-max-gpus-per-pod sizes the limit; off leaves all
// of it out.
func TestDefaultRenderHasTheCostGuard(t *testing.T) {
	guard := func(args ...string) map[string]string {
		t.Helper()
		o, err := parseInstall(append(append([]string{"--render", "--set", ClusterIDKey + "=5e2f3c1a-0000-4000-8000-000000000001"}, requiredFlags...), args...), &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		objs, err := renderObjects(o, &stderr)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, obj := range objs {
			switch {
			case strings.HasPrefix(obj.GetKind(), "ValidatingAdmissionPolicy"):
				got[obj.GetKind()+"/"+obj.GetName()] = "present"
			case obj.GetKind() == "ConfigMap" && obj.GetName() == CostGuardPolicy:
				d, _, _ := unstructured.NestedStringMap(obj.Object, "data")
				for k, v := range d {
					got[k] = v
				}
			}
		}
		return got
	}
	def := guard()
	for k, v := range map[string]string{
		"ValidatingAdmissionPolicy/" + CostGuardPolicy: "present", "ValidatingAdmissionPolicyBinding/" + CostGuardPolicy: "present",
		"ValidatingAdmissionPolicy/" + CostGuardAnnotationsPolicy: "present", "ValidatingAdmissionPolicyBinding/" + CostGuardAnnotationsPolicy: "present",
		guardMaxKey: "1", "shape.h100-cc.gpus": "18", "shape.t4-4.gpus": "4",
	} {
		if def[k] != v {
			t.Errorf("default render: %s = %q, want %q", k, def[k], v)
		}
	}
	if got := guard("--cost-guard-max-gpus-per-pod=4")[guardMaxKey]; got != "4" {
		t.Errorf("--cost-guard-max-gpus-per-pod=4 rendered %s %q", guardMaxKey, got)
	}
	if off := guard("--cost-guard=off"); len(off) != 0 {
		t.Errorf("--cost-guard=off rendered %v", off)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--cost-guard=off", "--cost-guard-max-gpus-per-pod=2"}, "with --cost-guard=off"},
		{[]string{"--cost-guard-max-gpus-per-pod=two"}, `--cost-guard-max-gpus-per-pod "two": want a whole number`},
		{[]string{"--cost-guard-max-gpus-per-pod=-1"}, "want a whole number"},
	} {
		var stdout, stderr bytes.Buffer
		if code := Main(context.Background(), append(append([]string{"--render"}, requiredFlags...), c.args...), &stdout, &stderr, nil); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}
}

// TestCostGuardAuto: auto is on for a new install, keeps what an upgrade
// finds, and on an API server without ValidatingAdmissionPolicy installs
// without the guard and warns (on is refused there).
func TestCostGuardAuto(t *testing.T) {
	ctx := context.Background()
	withVAP := func(objs ...*admissionv1.ValidatingAdmissionPolicy) *fake.Clientset {
		cs := fake.NewClientset()
		for _, o := range objs {
			if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		cs.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
			GroupVersion: "admissionregistration.k8s.io/v1",
			APIResources: []metav1.APIResource{{Name: "validatingadmissionpolicies", Kind: "ValidatingAdmissionPolicy"}},
		}}
		return cs
	}
	ours := &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: CostGuardPolicy, Labels: map[string]string{PartOfLabel: PartOfValue}}}
	for _, c := range []struct {
		name string
		cs   *fake.Clientset
		mode Mode
		live Live
		on   bool
		want string
	}{
		{"new install", withVAP(), ModeAuto, Live{}, true, "default for a new install"},
		{"upgrade with the guard", withVAP(ours), ModeAuto, Live{Found: true, Inventory: true}, true, ""},
		{"upgrade without it", withVAP(), ModeAuto, Live{Found: true, Inventory: true}, false, "kept off (--cost-guard=on adds"},
		{"off", withVAP(ours), ModeOff, Live{}, false, ""},
		{"no VAP, auto", fake.NewClientset(), ModeAuto, Live{}, false, "serves no ValidatingAdmissionPolicy (GA in Kubernetes 1.30)"},
	} {
		d, err := costGuardWanted(ctx, c.cs, c.mode, c.live)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if d.on != c.on || !strings.Contains(d.note+d.warning, c.want) {
			t.Errorf("%s: on=%v note %q warning %q; want on=%v and %q", c.name, d.on, d.note, d.warning, c.on, c.want)
		}
	}
	if _, err := costGuardWanted(ctx, fake.NewClientset(), ModeOn, Live{}); err == nil || !strings.Contains(err.Error(), "--cost-guard=on: the API server serves no") {
		t.Errorf("--cost-guard=on without ValidatingAdmissionPolicy: %v, want refused", err)
	}
}

// TestUpgradeKeepsTheGuardLimit: an installed maxGPUsPerPod other than the
// shipped one is kept (an admin's kubectl edit); the flag replaces it.
func TestUpgradeKeepsTheGuardLimit(t *testing.T) {
	s, notes, err := Merge(Live{Found: true, GuardMaxGPUsPerPod: "2"}, Request{})
	if err != nil {
		t.Fatal(err)
	}
	if s.GuardMaxGPUsPerPod != "2" || !strings.Contains(strings.Join(notes, "\n"), "maxGPUsPerPod 2 kept") {
		t.Errorf("kept %q, notes %q", s.GuardMaxGPUsPerPod, notes)
	}
	if s, _, _ = Merge(Live{Found: true, GuardMaxGPUsPerPod: "2"}, Request{GuardMaxGPUsPerPod: "4"}); s.GuardMaxGPUsPerPod != "4" {
		t.Errorf("the flag gave %q, want 4", s.GuardMaxGPUsPerPod)
	}
	if s, _, _ = Merge(Live{Found: true, GuardMaxGPUsPerPod: "1"}, Request{}); s.GuardMaxGPUsPerPod != "" {
		t.Errorf("the shipped value is followed, not pinned: got %q", s.GuardMaxGPUsPerPod)
	}
}
