package install

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/caa-gcp-t4/gcp-t4/internal/caaconfig"
	kustomizetree "github.com/caa-gcp-t4/install"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/credential"
	"github.com/distribution/reference"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/pkg/util"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// Names shared by the manifests and the installer.
const (
	Namespace     = "confidential-containers-system"
	DaemonSetName = caaconfig.DaemonSet
	ConfigMapName = caaconfig.ConfigMap
	SecretName    = "peer-pods-secret"
	// ImageName is what the overlay sets the container image to; the
	// user's --image replaces it.
	ImageName = "caa-gcp-t4"
	// SelectionLabel picks the GKE nodes that run peer pods (and so get
	// the remediation sidecar). Set it as a node-pool label.
	SelectionLabel = "caa-gcp-t4/peer-pods"
	// RemediationDaemonSet is the `gcp-t4-node remediate` DaemonSet of
	// components/gke-remediation.
	RemediationDaemonSet = "gcp-t4-remediate"
	// PartOfLabel marks every object the manifests create.
	PartOfLabel = "app.kubernetes.io/part-of"
	PartOfValue = "caa-gcp-t4"

	overlayDir      = "overlays/gcp-t4"
	componentGKE    = "components/gke-remediation"
	componentRC     = "components/runtimeclass"
	componentTLS    = "components/agent-tls"
	componentGuard  = "components/cost-guard"
	credentialsFile = "GCP_CREDENTIALS"
	// componentKey mounts a service account key as a file and points
	// GOOGLE_APPLICATION_CREDENTIALS at it, keeping it out of CAA's
	// environment; added only with a key.
	componentKey = "components/service-account-key"
	// keyPath is where componentKey mounts peer-pods-secret's
	// GCP_CREDENTIALS in CAA's container.
	keyPath = "/var/run/gcp-key/key.json"
	// Custom CAA-to-podVM TLS: the Secret, its keys and where the
	// component mounts it; the names upstream's peerpods chart uses
	// (templates/_helpers.tpl, values.yaml secrets.tlsCerts at v0.22.0).
	tlsSecret  = "certs-for-tls"
	tlsDir     = "/etc/certificates"
	tlsCAKey   = "ca.crt"
	tlsCertKey = "client.crt"
	tlsKeyKey  = "client.key"
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
	// Config merges into peer-pods-cm (keys from ConfigKeys).
	Config map[string]string
	// Credentials is a service account key (JSON); nil means Workload
	// Identity (Application Default Credentials). It goes to
	// peer-pods-secret and reaches CAA as the file keyPath
	// (components/service-account-key), not as an environment variable.
	Credentials []byte
	// WIFCredentialConfig is a Workload Identity Federation credential
	// configuration (`gcloud iam workload-identity-pools create-cred-config
	// … --credential-source-file=/var/run/gcp-wif/token`): CAA gets a
	// projected ServiceAccount token for its audience and no key at all.
	WIFCredentialConfig []byte
	// TLS are custom certificates for CAA-to-podVM TLS
	// (components/agent-tls); nil lets CAA generate its own in memory.
	TLS *TLSFiles
	// GKERemediation adds components/gke-remediation.
	GKERemediation bool
	// RuntimeClass adds components/runtimeclass.
	RuntimeClass bool
	// CostGuard adds components/cost-guard: per-pod GPU limits per
	// namespace, checked by the API server (docs/provider.md).
	CostGuard bool
	// GuardMaxGPUsPerPod replaces the component's maxGPUsPerPod (every
	// namespace's limit per peer pod); "" keeps it.
	GuardMaxGPUsPerPod string
	// CreateContainerTimeout replaces the remediation sidecar's
	// --create-container-timeout (kata-remote's create_container_timeout,
	// createcontainer.go); "" keeps the component's, the startup
	// catalogue's value.
	CreateContainerTimeout string
	// Namespace moves everything from Namespace to another namespace,
	// ServiceAccount subjects of the bindings included; "" keeps it.
	Namespace string
	// carried are live peer-pods-cm keys neither CAA nor gcp-t4 reads,
	// kept by an upgrade until --unset.
	carried []string
}

// component is one optional directory under install/components, declared
// in one place: when a user's Settings switch it on, the patches it takes
// from them, and how everyComponent switches it on.
type component struct {
	dir string
	on  func(Settings) bool
	// patches are the component's edits from the Settings (nil: none).
	patches func(Settings) ([]types.Patch, error)
	// switchOn turns it on in an uninstall's render; nil for a component
	// that adds no kind of object of its own.
	switchOn func(*Settings)
}

// components are the optional components, in the order the top-level
// kustomization lists them. A new one is a directory under
// install/components, a row here, the Settings field its on reads, and
// the flag in cmd.go where a person chooses it.
var components = []component{
	{dir: componentGKE, on: func(s Settings) bool { return s.GKERemediation }, patches: remediationPatches,
		switchOn: func(s *Settings) { s.GKERemediation = true }},
	{dir: componentRC, on: func(s Settings) bool { return s.RuntimeClass },
		switchOn: func(s *Settings) { s.RuntimeClass = true }},
	{dir: componentTLS, on: func(s Settings) bool { return s.TLS != nil }},
	{dir: componentGuard, on: func(s Settings) bool { return s.CostGuard }, patches: costGuardPatches,
		switchOn: func(s *Settings) { s.CostGuard = true }},
	{dir: componentKey, on: func(s Settings) bool { return s.Credentials != nil }},
}

// everyComponent is Settings with every component that adds kinds of its
// own switched on, in namespace ns: what Cluster.Labelled renders to know
// every kind of object an install may have created, for an uninstall
// without an inventory.
func everyComponent(ns string) Settings {
	s := Settings{Namespace: ns}
	for _, c := range components {
		if c.switchOn != nil {
			c.switchOn(&s)
		}
	}
	return s
}

// remediationPatches set the sidecar's --create-container-timeout.
func remediationPatches(s Settings) ([]types.Patch, error) {
	if s.CreateContainerTimeout == "" {
		return nil, nil
	}
	if err := CheckCreateContainerTimeout(s.CreateContainerTimeout); err != nil {
		return nil, err
	}
	patch, err := createContainerPatch(s.CreateContainerTimeout)
	if err != nil {
		return nil, err
	}
	return []types.Patch{{Patch: patch, Target: &types.Selector{
		ResId: resid.ResId{Gvk: resid.Gvk{Group: "apps", Version: "v1", Kind: "DaemonSet"}, Name: RemediationDaemonSet},
	}}}, nil
}

// costGuardPatches set every namespace's per-pod GPU limit: a patch, as a
// user's own overlay would write it; only the one key, so keys the admin
// added stay theirs.
func costGuardPatches(s Settings) ([]types.Patch, error) {
	if s.GuardMaxGPUsPerPod == "" {
		return nil, nil
	}
	if err := checkGuardMax(s.GuardMaxGPUsPerPod); err != nil {
		return nil, err
	}
	patch := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s\ndata:\n  %s: %q\n", CostGuardPolicy, Namespace, guardMaxKey, s.GuardMaxGPUsPerPod)
	return []types.Patch{{Patch: patch}}, nil
}

// TLSFiles are the PEM files of the certs-for-tls Secret.
type TLSFiles struct {
	CA, Cert, Key []byte
}

// manifestKeys are the peer-pods-cm keys the manifests themselves set,
// read from the embedded base, overlay and components.
func manifestKeys() ([]string, error) {
	var keys []string
	for _, dir := range []string{"base", overlayDir, componentTLS, componentReaper} {
		k, err := readKustomization(path.Join(dir, "kustomization.yaml"))
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
	data, err := fs.ReadFile(kustomizetree.Tree(), p)
	if err != nil {
		return nil, fmt.Errorf("embedded manifests: %w", err)
	}
	var k types.Kustomization
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("embedded %s: %w", p, err)
	}
	return &k, nil
}

// installerKeys are peer-pods-cm keys the installer derives itself.
var installerKeys = map[string]string{
	"CACERT_FILE": "--tls-ca", "CERT_FILE": "--tls-cert", "CERT_KEY": "--tls-key",
}

// Validate checks the settings before anything is rendered, naming the
// field at fault and the fix. The complete peer-pods-cm is checked with
// the provider's own rules by ValidateConfig.
func (s Settings) Validate() error {
	for k, v := range s.Config {
		if k == credentialsFile {
			return fmt.Errorf("setting GCP_CREDENTIALS: credentials go in the Secret, not the ConfigMap; use --credentials-file")
		}
		if flag, ok := installerKeys[k]; ok {
			return fmt.Errorf("setting %s: install sets it from %s (the certs-for-tls Secret mounted at %s); give the certificate files instead", k, flag, tlsDir)
		}
		if !isKey(k) && !slices.Contains(s.carried, k) {
			return unknownKey(fmt.Sprintf("setting %q", k), k)
		}
		if k == "CLOUD_PROVIDER" && v != gcpt4.ProviderName {
			return fmt.Errorf("setting CLOUD_PROVIDER=%q: this installer deploys the gcp-t4 provider only; drop the setting", v)
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
	if s.Namespace != "" {
		if errs := validation.IsDNS1123Label(s.Namespace); len(errs) > 0 {
			return fmt.Errorf("--namespace %q: %s", s.Namespace, strings.Join(errs, "; "))
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
		info, err := credential.Check("--credentials-file", s.Credentials)
		if err != nil {
			return err
		}
		if info.Type != credential.ServiceAccount {
			return fmt.Errorf("--credentials-file: a %s configuration goes to --wif-credential-config, which also mounts the token it reads", info.Type)
		}
	}
	if s.TLS != nil {
		if err := s.TLS.check(); err != nil {
			return err
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
		return "", fmt.Errorf("--wif-credential-config: not JSON (%v); create it with gcloud iam workload-identity-pools create-cred-config", err)
	}
	if c.Type != "external_account" {
		return "", fmt.Errorf("--wif-credential-config: type %q, want external_account (a key file goes to --credentials-file)", c.Type)
	}
	if !strings.HasPrefix(c.Audience, "//iam.googleapis.com/") {
		return "", fmt.Errorf("--wif-credential-config: audience %q, want //iam.googleapis.com/projects/NUMBER/locations/global/workloadIdentityPools/POOL/providers/PROVIDER", c.Audience)
	}
	if c.CredentialSource.File != WIFTokenPath {
		return "", fmt.Errorf("--wif-credential-config: credential_source.file %q, want %s where the pod's projected token is; recreate it with --credential-source-file=%s", c.CredentialSource.File, WIFTokenPath, WIFTokenPath)
	}
	if _, err := credential.Check("Workload Identity Federation credential configuration", data); err != nil {
		return "", err
	}
	return c.Audience, nil
}

// check parses the certificate files as crypto/tls will in CAA: the
// client certificate and key must pair, the CA must hold a certificate.
func (t *TLSFiles) check() error {
	if len(t.CA) == 0 || len(t.Cert) == 0 || len(t.Key) == 0 {
		return fmt.Errorf("--tls-ca, --tls-cert, --tls-key: give all three (CAA uses custom certificates only with the CA, certificate and key together)")
	}
	if _, err := tls.X509KeyPair(t.Cert, t.Key); err != nil {
		return fmt.Errorf("--tls-cert, --tls-key: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(t.CA) {
		return fmt.Errorf("--tls-ca: no PEM certificate in the file")
	}
	return nil
}

// tlsSubject describes the client certificate for the settings diff.
func (t *TLSFiles) describe() string {
	if t == nil {
		return "generated by CAA (none mounted)"
	}
	block, _ := pem.Decode(t.Cert)
	if block == nil {
		return "custom certificates"
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "custom certificates"
	}
	sum := sha256.Sum256(c.Raw)
	return fmt.Sprintf("custom client certificate %q (sha256 %x…, expires %s)", c.Subject.CommonName, sum[:6], c.NotAfter.Format("2006-01-02"))
}

// wifPatch mounts the credential configuration and a ServiceAccount token
// for its audience into one workload's container and points ADC at it.
// CAA (the DaemonSet): GKE's metadata server cannot tell host-network pods
// apart, so CAA reads its identity from a file. The reaper (the
// Deployment) gets its own configuration (reaperwif.go: no impersonation
// of CAA's account) with a token of its own ServiceAccount: GCE sees a
// principal of its own, granted only the reaper's role (docs/reaper.md).
func wifPatch(kind, name, container, audience, file string) (string, error) {
	aud, err := json.Marshal(audience)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(`apiVersion: apps/v1
kind: %s
metadata:
  name: %s
  namespace: %s
spec:
  template:
    spec:
      containers:
        - name: %s
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
`, kind, name, Namespace, container, wifDir, file, wifDir, aud, wifConfigMap, file, file), nil
}

// parseImage checks ref against the grammar the node's containerd pulls
// images with (CRI PullImage parses with distribution/reference's
// ParseDockerRef: containerd v2.4.2 internal/cri/server/images/image_pull.go),
// and splits it as `kustomize edit set image` does (kustomize/api
// pkg/util.SplitImageName), so the overlay's images entry is the one a
// user's own kustomization would hold.
func parseImage(ref string) (types.Image, error) {
	if _, err := reference.ParseDockerRef(ref); err != nil {
		return types.Image{}, fmt.Errorf("--image %q: %w; want name[:tag][@sha256:digest], e.g. ghcr.io/you/caa-gcp-t4:v1", ref, err)
	}
	name, tag, digest := util.SplitImageName(ref)
	if digest == "" && (tag == "" || tag == "latest") {
		// A moving tag lets a registry push change what every node runs
		// at its next restart, unseen by install's diff.
		return types.Image{}, fmt.Errorf("--image %q: pin it by version or digest (name:TAG or name@sha256:DIGEST; make image tags caa-gcp-t4:$(git describe)), not by a moving tag such as latest", ref)
	}
	img := types.Image{Name: ImageName, NewName: name, NewTag: tag, Digest: digest}
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
	for _, c := range components {
		if !c.on(s) {
			continue
		}
		k.Components = append(k.Components, "../"+c.dir)
		if c.patches != nil {
			ps, err := c.patches(s)
			if err != nil {
				return nil, err
			}
			k.Patches = append(k.Patches, ps...)
		}
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
		k.SecretGenerator = append(k.SecretGenerator, types.SecretArgs{GeneratorArgs: types.GeneratorArgs{
			Name: SecretName, Behavior: "merge",
			KvPairSources: types.KvPairSources{FileSources: []string{credentialsFile}},
		}})
	}
	if s.TLS != nil {
		k.SecretGenerator = append(k.SecretGenerator, types.SecretArgs{GeneratorArgs: types.GeneratorArgs{
			Name: tlsSecret, Namespace: Namespace,
			KvPairSources: types.KvPairSources{FileSources: []string{tlsCAKey, tlsCertKey, tlsKeyKey}},
			Options:       &types.GeneratorOptions{DisableNameSuffixHash: true},
		}, Type: "Opaque"})
	}
	if s.WIFCredentialConfig != nil {
		aud, err := wifAudience(s.WIFCredentialConfig)
		if err != nil {
			return nil, err
		}
		patch, err := wifPatch("DaemonSet", DaemonSetName, "cloud-api-adaptor-con", aud, wifConfigFile)
		if err != nil {
			return nil, err
		}
		reaperPatch, err := wifPatch("Deployment", ReaperName, "reaper", aud, reaperWIFConfigFile)
		if err != nil {
			return nil, err
		}
		k.ConfigMapGenerator = append(k.ConfigMapGenerator, types.ConfigMapArgs{GeneratorArgs: types.GeneratorArgs{
			Name: wifConfigMap, Namespace: Namespace,
			KvPairSources: types.KvPairSources{FileSources: []string{wifConfigFile, reaperWIFConfigFile}},
			Options:       &types.GeneratorOptions{DisableNameSuffixHash: true},
		}})
		k.Patches = append(k.Patches, types.Patch{Patch: patch}, types.Patch{Patch: reaperPatch})
	}
	out, err := yaml.Marshal(k)
	if err != nil {
		return nil, fmt.Errorf("top-level kustomization: %w", err)
	}
	return out, nil
}

// files is the whole tree to render: the embedded manifests (the
// repository's install/ directory itself, embedded by its own module) and
// the generated top-level directory, keyed by slash path.
func (s Settings) files() (map[string][]byte, error) {
	out := map[string][]byte{}
	tree := kustomizetree.Tree()
	err := fs.WalkDir(tree, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(tree, p)
		if err != nil {
			return err
		}
		out[p] = data
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
		reaper, err := reaperWIFConfig(s.WIFCredentialConfig)
		if err != nil {
			return nil, err
		}
		out[path.Join(userDir, reaperWIFConfigFile)] = reaper
	}
	if s.TLS != nil {
		out[path.Join(userDir, tlsCAKey)] = s.TLS.CA
		out[path.Join(userDir, tlsCertKey)] = s.TLS.Cert
		out[path.Join(userDir, tlsKeyKey)] = s.TLS.Key
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
		if strings.HasSuffix(p, credentialsFile) || strings.HasSuffix(p, tlsKeyKey) {
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
