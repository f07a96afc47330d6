package install

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// Names shared by the manifests and the installer.
const (
	Namespace     = "confidential-containers-system"
	DaemonSetName = "cloud-api-adaptor-daemonset"
	ConfigMapName = "peer-pods-cm"
	SecretName    = "peer-pods-secret"
	// ImageName is what the overlay sets the container image to; the
	// user's --image replaces it.
	ImageName = "caa-gcp-t4"
	// SelectionLabel picks the GKE nodes that run peer pods (and so get
	// the remediation sidecar). Set it as a node-pool label.
	SelectionLabel = "caa-gcp-t4/peer-pods"
	// PartOfLabel marks every object the manifests create.
	PartOfLabel = "app.kubernetes.io/part-of"
	PartOfValue = "caa-gcp-t4"

	overlayDir      = "overlays/gcp-t4"
	componentGKE    = "components/gke-remediation"
	componentRC     = "components/runtimeclass"
	credentialsFile = "GCP_CREDENTIALS"
	// Workload Identity Federation: the credential configuration (no
	// secret in it) and the projected ServiceAccount token it reads.
	wifConfigMap  = "gcp-wif"
	wifConfigFile = "credential-configuration.json"
	wifDir        = "/var/run/gcp-wif"
	WIFTokenPath  = wifDir + "/token"
	// userDir is where the generated top-level kustomization lives,
	// beside the embedded tree, as a user's own overlay would.
	userDir = "gcp-t4-install"
)

// Settings are what a user chooses; the zero value renders the overlay as
// committed.
type Settings struct {
	// Image for CAA and the sidecar: name[:tag][@digest]. Empty keeps the
	// overlay's.
	Image string
	// Config merges into peer-pods-cm (keys from the base and overlay).
	Config map[string]string
	// Credentials is a service account key (JSON); nil means Workload
	// Identity (Application Default Credentials).
	Credentials []byte
	// WIFCredentialConfig is a Workload Identity Federation credential
	// configuration (`gcloud iam workload-identity-pools create-cred-config
	// … --credential-source-file=/var/run/gcp-wif/token`): CAA gets a
	// projected ServiceAccount token for its audience and no key at all.
	WIFCredentialConfig []byte
	// GKERemediation adds components/gke-remediation.
	GKERemediation bool
	// RuntimeClass adds components/runtimeclass.
	RuntimeClass bool
}

// ConfigKeys are the peer-pods-cm keys the manifests define, read from the
// embedded base and overlay so the list has one source.
func ConfigKeys() ([]string, error) {
	var keys []string
	for _, dir := range []string{"base", overlayDir, componentReaper} {
		k, err := readKustomization(path.Join(manifestsRoot, dir, "kustomization.yaml"))
		if err != nil {
			return nil, err
		}
		for _, g := range k.ConfigMapGenerator {
			if g.Name != ConfigMapName {
				continue
			}
			for _, lit := range g.LiteralSources {
				key, _, _ := strings.Cut(lit, "=")
				if !slices.Contains(keys, key) {
					keys = append(keys, key)
				}
			}
		}
	}
	sort.Strings(keys)
	return keys, nil
}

func readKustomization(p string) (*types.Kustomization, error) {
	data, err := manifests.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("embedded manifests: %w", err)
	}
	var k types.Kustomization
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("embedded %s: %w", p, err)
	}
	return &k, nil
}

// configKeyRE is what a ConfigMap key (and an environment variable CAA
// reads) may look like.
var configKeyRE = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// Validate checks the settings before anything is rendered, naming the
// field at fault and the fix.
func (s Settings) Validate() error {
	keys, err := ConfigKeys()
	if err != nil {
		return err
	}
	for k, v := range s.Config {
		if !configKeyRE.MatchString(k) || !slices.Contains(keys, k) {
			return fmt.Errorf("setting %q: not a peer-pods-cm key; use one of %s (docs/provider.md)", k, strings.Join(keys, ", "))
		}
		if k == "CLOUD_PROVIDER" && v != "gcp-t4" {
			return fmt.Errorf("setting CLOUD_PROVIDER=%q: this installer deploys the gcp-t4 provider only; drop the setting", v)
		}
		if k == "GCP_CREDENTIALS" {
			return fmt.Errorf("setting GCP_CREDENTIALS: credentials go in the Secret, not the ConfigMap; use --credentials-file")
		}
		if strings.ContainsAny(v, "\n\r") {
			return fmt.Errorf("setting %s: the value has a line break; give it on one line", k)
		}
	}
	if s.Image != "" {
		if _, err := parseImage(s.Image); err != nil {
			return err
		}
	}
	if s.WIFCredentialConfig != nil {
		if s.Credentials != nil {
			return fmt.Errorf("credentials: give a key file or a Workload Identity Federation credential configuration, not both")
		}
		if _, err := wifAudience(s.WIFCredentialConfig); err != nil {
			return err
		}
	}
	if s.Credentials != nil {
		var key struct {
			Type        string `json:"type"`
			ClientEmail string `json:"client_email"`
		}
		if err := json.Unmarshal(s.Credentials, &key); err != nil {
			return fmt.Errorf("credentials file: not JSON (%v); pass a service account key file from `gcloud iam service-accounts keys create`, or none to use Workload Identity", err)
		}
		if key.Type == "" {
			return fmt.Errorf("credentials file: no \"type\" field; pass a service account key file (type service_account), or none to use Workload Identity")
		}
	}
	return nil
}

// wifAudience checks a credential configuration and returns the audience
// the projected token must carry.
func wifAudience(data []byte) (string, error) {
	var c struct {
		Type             string `json:"type"`
		Audience         string `json:"audience"`
		CredentialSource struct {
			File string `json:"file"`
		} `json:"credential_source"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return "", fmt.Errorf("Workload Identity Federation credential configuration: not JSON (%v); create it with gcloud iam workload-identity-pools create-cred-config", err)
	}
	if c.Type != "external_account" {
		return "", fmt.Errorf("Workload Identity Federation credential configuration: type %q, want external_account (a key file goes to --credentials-file)", c.Type)
	}
	if !strings.HasPrefix(c.Audience, "//iam.googleapis.com/") {
		return "", fmt.Errorf("Workload Identity Federation credential configuration: audience %q, want //iam.googleapis.com/projects/NUMBER/locations/global/workloadIdentityPools/POOL/providers/PROVIDER", c.Audience)
	}
	if c.CredentialSource.File != WIFTokenPath {
		return "", fmt.Errorf("Workload Identity Federation credential configuration: credential_source.file %q, want %s where the pod's projected token is; recreate it with --credential-source-file=%s", c.CredentialSource.File, WIFTokenPath, WIFTokenPath)
	}
	return c.Audience, nil
}

// wifPatch mounts the credential configuration and a ServiceAccount token
// for its audience into the CAA container and points ADC at it. GKE's
// metadata server cannot tell host-network pods apart, so CAA reads its
// identity from a file instead.
func wifPatch(audience string) (string, error) {
	aud, err := json.Marshal(audience)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: %s
spec:
  template:
    spec:
      containers:
        - name: cloud-api-adaptor-con
          env:
            - name: GOOGLE_APPLICATION_CREDENTIALS
              value: %s/%s
          volumeMounts:
            - name: gcp-wif
              mountPath: %s
              readOnly: true
      volumes:
        - name: gcp-wif
          projected:
            sources:
              - serviceAccountToken:
                  path: token
                  audience: %s
                  expirationSeconds: 3600
              - configMap:
                  name: %s
                  items:
                    - key: %s
                      path: %s
`, DaemonSetName, wifDir, wifConfigFile, wifDir, aud, wifConfigMap, wifConfigFile, wifConfigFile), nil
}

// imageRE is a loose reference check: registry[:port]/path[:tag][@digest].
var imageRE = regexp.MustCompile(`^[a-z0-9]+([._\-/:][a-zA-Z0-9]+)*(:[\w][\w.\-]{0,127})?(@sha256:[a-f0-9]{64})?$`)

func parseImage(ref string) (types.Image, error) {
	if !imageRE.MatchString(ref) {
		return types.Image{}, fmt.Errorf("--image %q: not an image reference; want name[:tag][@sha256:digest], e.g. ghcr.io/you/caa-gcp-t4:v1", ref)
	}
	img := types.Image{Name: ImageName}
	name := ref
	if i := strings.Index(name, "@"); i >= 0 {
		img.Digest = name[i+1:]
		name = name[:i]
	}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		img.NewTag = name[i+1:]
		name = name[:i]
	}
	img.NewName = name
	if img.NewTag == "" && img.Digest == "" {
		img.NewTag = "latest"
	}
	return img, nil
}

// kustomization is the top-level kustomization for s: the overlay, the
// chosen components, the image and the user's settings, exactly what a
// user's own overlay in docs/install.md holds.
func (s Settings) kustomization() ([]byte, error) {
	k := types.Kustomization{
		TypeMeta:  types.TypeMeta{APIVersion: types.KustomizationVersion, Kind: types.KustomizationKind},
		Resources: []string{"../" + overlayDir},
	}
	if s.GKERemediation {
		k.Components = append(k.Components, "../"+componentGKE)
	}
	if s.RuntimeClass {
		k.Components = append(k.Components, "../"+componentRC)
	}
	if s.Image != "" {
		img, err := parseImage(s.Image)
		if err != nil {
			return nil, err
		}
		k.Images = []types.Image{img}
	}
	if len(s.Config) > 0 {
		keys := make([]string, 0, len(s.Config))
		for key := range s.Config {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		var lits []string
		for _, key := range keys {
			lits = append(lits, key+"="+s.Config[key])
		}
		k.ConfigMapGenerator = []types.ConfigMapArgs{{GeneratorArgs: types.GeneratorArgs{
			Name: ConfigMapName, Behavior: "merge",
			KvPairSources: types.KvPairSources{LiteralSources: lits},
		}}}
	}
	if s.Credentials != nil {
		k.SecretGenerator = []types.SecretArgs{{GeneratorArgs: types.GeneratorArgs{
			Name: SecretName, Behavior: "merge",
			KvPairSources: types.KvPairSources{FileSources: []string{credentialsFile}},
		}}}
	}
	if s.WIFCredentialConfig != nil {
		aud, err := wifAudience(s.WIFCredentialConfig)
		if err != nil {
			return nil, err
		}
		patch, err := wifPatch(aud)
		if err != nil {
			return nil, err
		}
		k.ConfigMapGenerator = append(k.ConfigMapGenerator, types.ConfigMapArgs{GeneratorArgs: types.GeneratorArgs{
			Name: wifConfigMap, Namespace: Namespace,
			KvPairSources: types.KvPairSources{FileSources: []string{wifConfigFile}},
		}})
		k.Patches = append(k.Patches, types.Patch{Patch: patch}, types.Patch{Patch: reaperWIFPatch(aud)})
	}
	out, err := yaml.Marshal(k)
	if err != nil {
		return nil, fmt.Errorf("top-level kustomization: %w", err)
	}
	return out, nil
}

// files is the whole tree to render: the embedded manifests and the
// generated top-level directory, keyed by slash path.
func (s Settings) files() (map[string][]byte, error) {
	out := map[string][]byte{}
	err := fs.WalkDir(manifests, manifestsRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := manifests.ReadFile(p)
		if err != nil {
			return err
		}
		out[strings.TrimPrefix(p, manifestsRoot+"/")] = data
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("embedded manifests: %w", err)
	}
	k, err := s.kustomization()
	if err != nil {
		return nil, err
	}
	out[path.Join(userDir, "kustomization.yaml")] = k
	if s.Credentials != nil {
		out[path.Join(userDir, credentialsFile)] = s.Credentials
	}
	if s.WIFCredentialConfig != nil {
		out[path.Join(userDir, wifConfigFile)] = s.WIFCredentialConfig
	}
	return out, nil
}

// WriteTree writes the tree Render renders into dir (which must exist) and
// returns the directory to build, for `kustomize build` or `kubectl
// apply -k`.
func (s Settings) WriteTree(dir string) (string, error) {
	if err := s.Validate(); err != nil {
		return "", err
	}
	files, err := s.files()
	if err != nil {
		return "", err
	}
	for p, data := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return "", err
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(p, credentialsFile) {
			mode = 0o600
		}
		if err := os.WriteFile(full, data, mode); err != nil {
			return "", err
		}
	}
	return filepath.Join(dir, userDir), nil
}

// Render builds the manifests in process with kustomize's API, the engine
// `kubectl apply -k` embeds, on an in-memory copy of the tree.
func Render(s Settings) (resmap.ResMap, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	files, err := s.files()
	if err != nil {
		return nil, err
	}
	mem := filesys.MakeFsInMemory()
	for p, data := range files {
		if err := mem.WriteFile("/"+p, data); err != nil {
			return nil, fmt.Errorf("in-memory tree: %w", err)
		}
	}
	return renderDir(mem, "/"+userDir)
}

func renderDir(fsys filesys.FileSystem, dir string) (resmap.ResMap, error) {
	opts := krusty.MakeDefaultOptions()
	// As `kustomize build` and `kubectl apply -k` without --reorder: the
	// kustomization's sortOptions, else the legacy order (namespaces first).
	opts.Reorder = krusty.ReorderOptionUnspecified
	k := krusty.MakeKustomizer(opts)
	m, err := k.Run(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", dir, err)
	}
	return m, nil
}

// RenderYAML is Render as the multi-document YAML `kustomize build` prints.
func RenderYAML(s Settings) ([]byte, error) {
	m, err := Render(s)
	if err != nil {
		return nil, err
	}
	out, err := m.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	return out, nil
}
