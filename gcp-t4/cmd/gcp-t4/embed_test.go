package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// renderArgs is `gcp-t4 install --render` with the flags it requires; no
// cluster is contacted.
var renderArgs = []string{"install", "--render", "--gke=off", "--project=demo-project", "--zone=us-central1-a",
	"--podvm-image=podvm-t4", "--network=global/networks/default", "--set=GCP_CLUSTER_ID=5e2f3c1a-0000-4000-8000-000000000001"}

// TestBinaryRendersTheInstallDirectory: the gcp-t4 binary embeds the
// repository's install/ directory as it is when built, with no step in
// between (the tree used to be copied by `go generate`, and an edit
// without it shipped the old YAML). The build sees an edited base file, a
// component directory that did not exist, and the overlay naming it (go
// build -overlay: the files as if edited on disk, the tree untouched), and
// `install --render` prints both; this test binary, built from the tree as
// committed, prints neither.
func TestBinaryRendersTheInstallDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gcp-t4 binary; skipped with -short")
	}
	install, err := filepath.Abs(filepath.Join("..", "..", "..", "install"))
	if err != nil {
		t.Fatal(err)
	}
	const label, probe = "caa-gcp-t4.test/edited-in-install-dir", "probe-from-a-new-component"
	edits := map[string]string{}
	edit := func(rel string, change func(string) string) {
		t.Helper()
		old, err := os.ReadFile(filepath.Join(install, rel))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		next := change(string(old))
		if next == string(old) {
			t.Fatalf("install/%s: the edit changed nothing; the test must follow the file", rel)
		}
		edits[rel] = next
	}
	edit("base/namespace.yaml", func(s string) string {
		return strings.Replace(s, "  labels:\n", "  labels:\n    "+label+": \"yes\"\n", 1)
	})
	edit("overlays/gcp-t4/kustomization.yaml", func(s string) string {
		return strings.Replace(s, "  - ../../components/reaper\n", "  - ../../components/reaper\n  - ../../components/zz-test-probe\n", 1)
	})
	edit("components/zz-test-probe/kustomization.yaml", func(string) string {
		return "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources:\n  - configmap.yaml\n"
	})
	edit("components/zz-test-probe/configmap.yaml", func(string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + probe + "\n  namespace: confidential-containers-system\n"
	})

	dir := t.TempDir()
	overlay := map[string]map[string]string{"Replace": {}}
	for rel, content := range edits {
		backing := filepath.Join(dir, strings.ReplaceAll(rel, "/", "_"))
		if err := os.WriteFile(backing, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		overlay["Replace"][filepath.Join(install, filepath.FromSlash(rel))] = backing
	}
	overlayJSON, err := json.Marshal(overlay)
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlayJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "gcp-t4")
	build := exec.CommandContext(t.Context(), "go", "build", "-overlay", overlayFile, "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -overlay: %v\n%s", err, out)
	}

	t.Setenv("KUBECONFIG", filepath.Join(dir, "absent"))
	run := exec.CommandContext(t.Context(), bin, renderArgs...)
	var stderr bytes.Buffer
	run.Stderr = &stderr
	edited, err := run.Output()
	if err != nil {
		t.Fatalf("gcp-t4 %s: %v\n%s", strings.Join(renderArgs, " "), err, stderr.String())
	}
	var out, errb bytes.Buffer
	if code := program().Run(renderArgs, &out, &errb); code != 0 {
		t.Fatalf("in process: exit %d: %s", code, errb.String())
	}
	for _, want := range []string{label + `: "yes"`, "name: " + probe} {
		if !strings.Contains(string(edited), want) {
			t.Errorf("the binary built with install/ edited does not render %q: it does not embed install/ as built", want)
		}
		if strings.Contains(out.String(), want) {
			t.Errorf("the committed tree already renders %q; the edit shows nothing", want)
		}
	}
}
