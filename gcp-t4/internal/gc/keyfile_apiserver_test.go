package gc

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/caa-gcp-t4/gcp-t4/internal/providerflags"
)

// TestReaperKeySecretAsDocumented runs docs/reaper.md's `kubectl create
// secret` for the reaper's key as written against a real kube-apiserver:
// the Secret it makes is what install/components/reaper's Deployment
// mounts, at the file REAPER_CREDENTIALS_FILE names, and the reaper reads
// its key from that file.
func TestReaperKeySecretAsDocumented(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl is needed to run docs/reaper.md's command as a user would: %v", err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "reaper.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("`(kubectl -n " + caaNamespace + " create secret generic " + ReaperCredentialsSecret + " [^`]+)`").FindSubmatch(doc)
	if m == nil {
		t.Fatalf("docs/reaper.md has no `kubectl … create secret generic %s` command", ReaperCredentialsSecret)
	}
	a := startKube(t)
	a.namespace(t, caaNamespace)
	dir := t.TempDir()
	key := reaperKey(t)
	if err := os.WriteFile(filepath.Join(dir, "reaper-key.json"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	// As typed in a shell, with KEYDIR as docs/install.md sets it (the
	// keys' directory outside any work tree) and the cluster's kubeconfig.
	cmd := exec.CommandContext(t.Context(), "bash", "-euc", string(m[1]))
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "KEYDIR="+dir, "KUBECONFIG="+a.cp.Kubeconfig, "PATH="+filepath.Dir(kubectl)+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", m[1], err, out)
	}
	sec, err := a.cs.CoreV1().Secrets(caaNamespace).Get(t.Context(), ReaperCredentialsSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	data, err := os.ReadFile(filepath.Join("..", "..", "..", "install", "components", "reaper", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	ps := d.Spec.Template.Spec
	c := ps.Containers[0]
	want := ""
	for _, e := range c.Env {
		if e.Name == ReaperCredentialsEnv {
			want = e.Value
		}
	}
	// Where the kubelet puts the Secret's items: the mount path of the
	// volume, then each item's path.
	got := map[string]string{}
	for _, v := range ps.Volumes {
		if v.Secret == nil || v.Secret.SecretName != ReaperCredentialsSecret {
			continue
		}
		for _, mnt := range c.VolumeMounts {
			if mnt.Name != v.Name {
				continue
			}
			for _, it := range v.Secret.Items {
				got[filepath.Join(mnt.MountPath, it.Path)] = string(sec.Data[it.Key])
			}
		}
	}
	if want == "" || got[want] != string(key) {
		t.Fatalf("the Secret the guide creates (keys %v) does not put the key at %s=%q (the volume gives %v)", keys(sec.Data), ReaperCredentialsEnv, want, keys(got))
	}

	// The reaper reads that file, as the kubelet projects it (0400, the
	// Deployment's defaultMode).
	mounted := filepath.Join(t.TempDir(), filepath.Base(want))
	if err := os.WriteFile(mounted, []byte(got[want]), 0o400); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	pf := providerflags.Register(fs)
	if err := useKeyFile(fs, "", mounted, quiet()); err != nil || pf.Config().Credentials != string(key) {
		t.Errorf("the reaper with the mounted key: %v, credentials %d bytes", err, len(pf.Config().Credentials))
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
