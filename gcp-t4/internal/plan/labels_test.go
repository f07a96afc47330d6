package plan

import (
	"regexp"
	"strings"
	"testing"
)

// TestPlanShowsTheIdentityLabels: plan shows every label the podVM gets,
// the cluster identity included, and names what only the run time fills.
func TestPlanShowsTheIdentityLabels(t *testing.T) {
	clearEnv(t)
	out, errOut, code := runPlan(t, "-f", "testdata/deployment.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"caa-cluster=<GCP_CLUSTER_ID", "caa-node=<the creating node", "managed-by=caa-gcp-t4", "caa-namespace="} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}
	out, errOut, code = runPlan(t, "-f", "testdata/deployment.yaml", "-cluster-id", "3f1c9d2e-6b7a-4e21-9c55-0a1b2c3d4e5f", "-cluster-name", "prod-eu", "-node-name", "gke-prod-gpu-1", "-o", "request")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// protojson varies its whitespace on purpose.
	for _, want := range []string{`"caa-cluster":\s*"3f1c9d2e-6b7a-4e21-9c55-0a1b2c3d4e5f"`, `"caa-cluster-name":\s*"prod-eu"`, `"caa-node":\s*"gke-prod-gpu-1"`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("insert request lacks %s:\n%s", want, out)
		}
	}
}
