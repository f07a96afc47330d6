package plan_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// clearProviderEnv unsets the provider settings plan reads from the
// environment, so that a test plans with the stand-ins alone.
func clearProviderEnv(t *testing.T) {
	t.Helper()
	for _, v := range []string{"GCP_PROJECT_ID", "GCP_ZONE", "GCP_ZONES", "PODVM_IMAGE_NAME", "GCP_NETWORK", "GCP_PROFILES",
		"GCP_PROFILES_FILE", "GCP_INSTANCE_TEMPLATE", "GCP_ENDPOINT", "GCP_CREDENTIALS", "GCP_CACHE_IMAGE", "GCP_CACHE_VERITY", "GCP_ALLOWED_IMAGES"} {
		t.Setenv(v, "")
	}
}

// modelcarHolder is cmd/modelcar as make build builds it (static,
// linux/amd64), for gcp-t4 cache model's images.
func modelcarHolder(t *testing.T) string {
	t.Helper()
	holder := filepath.Join(t.TempDir(), "modelcar")
	cmd := exec.Command("go", "build", "-trimpath", "-o", holder, "../../cmd/modelcar")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build modelcar: %v\n%s", err, out)
	}
	return holder
}
