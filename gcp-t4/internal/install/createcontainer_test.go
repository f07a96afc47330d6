package install

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/startup"
	appsv1 "k8s.io/api/apps/v1"
)

// The component's YAML and the startup catalogue hold the same value: the
// catalogue is where it lives, the YAML is what kubectl apply -k installs.
func TestCreateContainerTimeoutYAMLMatchesCatalogue(t *testing.T) {
	c, err := startup.Load()
	if err != nil {
		t.Fatal(err)
	}
	_, _, v, err := createContainerArgIndex()
	if err != nil {
		t.Fatal(err)
	}
	d, err := time.ParseDuration(v)
	if err != nil || d != c.InstallCreateContainerTimeout() || d <= 0 {
		t.Fatalf("install/components/gke-remediation/daemonset.yaml has --create-container-timeout=%s; the startup catalogue (kata-create-container, install) says %s: make them equal", v, c.InstallCreateContainerTimeout())
	}
	def, err := DefaultCreateContainerTimeout()
	if err != nil || def != v {
		t.Fatalf("DefaultCreateContainerTimeout = %q (%v), want %q as the YAML writes it", def, err, v)
	}
}

func sidecarArgs(t *testing.T, s Settings) []string {
	t.Helper()
	m := mustRender(t, s)
	ds := decode[appsv1.DaemonSet](t, m, "DaemonSet", RemediationDaemonSet)
	return container(ds, "remediate").Args
}

func TestInstallSetsCreateContainerTimeout(t *testing.T) {
	def, err := DefaultCreateContainerTimeout()
	if err != nil {
		t.Fatal(err)
	}
	if args := sidecarArgs(t, Settings{GKERemediation: true}); !slices.Contains(args, "--create-container-timeout="+def) {
		t.Fatalf("default args %q lack the catalogue's value", args)
	}
	for _, v := range []string{"1800s", "0"} {
		args := sidecarArgs(t, Settings{GKERemediation: true, CreateContainerTimeout: v})
		n := 0
		for _, a := range args {
			if strings.HasPrefix(a, createContainerArg) {
				n++
			}
		}
		if !slices.Contains(args, "--create-container-timeout="+v) || n != 1 {
			t.Errorf("--create-container-timeout=%s: args %q, want it once", v, args)
		}
	}
	if _, err := RenderYAML(Settings{GKERemediation: true, CreateContainerTimeout: "1.5s"}); err == nil {
		t.Error("1.5s accepted")
	}
	for _, bad := range [][]string{{"--create-container-timeout=20"}, {"--create-container-timeout=10m", "--gke=off"}} {
		if _, err := parseInstall(append([]string{"--project=p", "--zone=us-central1-a"}, bad...), io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// An upgrade keeps a value the admin set, and follows the default otherwise.
func TestMergeKeepsCreateContainerTimeout(t *testing.T) {
	def, _ := DefaultCreateContainerTimeout()
	s, notes, err := Merge(Live{Found: true, Namespace: Namespace, CreateContainerTimeout: "3600s"}, Request{})
	if err != nil || s.CreateContainerTimeout != "3600s" || !strings.Contains(strings.Join(notes, "\n"), "3600s kept") {
		t.Fatalf("kept %q, notes %q, err %v", s.CreateContainerTimeout, notes, err)
	}
	if s, _, _ := Merge(Live{Found: true, Namespace: Namespace, CreateContainerTimeout: def}, Request{}); s.CreateContainerTimeout != "" {
		t.Fatalf("the default was pinned: %q", s.CreateContainerTimeout)
	}
	if s, _, _ := Merge(Live{Found: true, Namespace: Namespace, CreateContainerTimeout: "3600s"}, Request{CreateContainerTimeout: "600s"}); s.CreateContainerTimeout != "600s" {
		t.Fatalf("the flag lost: %q", s.CreateContainerTimeout)
	}
}

// docs/install.md names the value install sets and the kata-deploy Helm
// drop-in that carries the same setting, with the catalogue's value.
func TestInstallDocsCreateContainerTimeout(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := startup.Load()
	if err != nil {
		t.Fatal(err)
	}
	secs := int64(c.InstallCreateContainerTimeout() / time.Second)
	for _, want := range []string{
		fmt.Sprintf("--create-container-timeout=%ds", secs),
		fmt.Sprintf("else `%ds`", secs),
		fmt.Sprintf("      [runtime]\n      create_container_timeout = %d\n", secs),
		"shims.remote.dropIn",
		"/opt/kata/share/defaults/kata-containers/runtimes/remote/config.d",
		"90-gcp-t4-create-container-timeout.toml",
	} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/install.md lacks %q", want)
		}
	}
}
