package install

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/credential"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ConfigHashAnnotation on the DaemonSet's pod template is a digest of
// everything the pods read from peer-pods-cm and the Secrets: the names are
// fixed, so a change must change the template for the DaemonSet to roll.
const ConfigHashAnnotation = "caa-gcp-t4/config-hash"

// Request is what the user asked for on the command line; Merge lays it
// over what is installed.
type Request struct {
	Image string
	Set   map[string]string
	Unset []string
	// Credentials: a key file, a WIF configuration, or UseADC to drop both.
	Credentials, WIF []byte
	UseADC           bool
	TLS              *TLSFiles
	NoTLS            bool
	Namespace        string
	// GuardMaxGPUsPerPod is --cost-guard-max-gpus-per-pod; "" keeps the
	// installed value, else the component's.
	GuardMaxGPUsPerPod string
	// CreateContainerTimeout is --create-container-timeout; "" keeps the
	// installed value, else the component's (the startup catalogue's).
	CreateContainerTimeout string
}

// Merge builds the settings for an upgrade: the live image, every live
// peer-pods-cm key that differs from the manifests' default (a value equal
// to the default follows the default), the live credential mode and
// certificates, then the request on top. Removing a value takes an
// explicit --unset (or --use-adc, --no-tls-certs). Notes say what was
// kept that the request did not mention.
func Merge(live Live, req Request) (Settings, []string, error) {
	var notes []string
	s := Settings{Image: req.Image, Namespace: req.Namespace}
	if s.Namespace == "" && live.Namespace != Namespace {
		s.Namespace = live.Namespace
	}
	if s.Image == "" && live.Image != "" && live.Image != ImageName+":latest" {
		s.Image = live.Image
	}
	defaults, err := defaultConfig()
	if err != nil {
		return s, nil, err
	}
	cfg := map[string]string{}
	for k, v := range live.Config {
		if _, derived := installerKeys[k]; derived || k == "CLOUD_PROVIDER" {
			continue
		}
		if d, ok := defaults[k]; ok && d == v {
			continue
		}
		if !isKey(k) {
			notes = append(notes, fmt.Sprintf("peer-pods-cm key %s is kept although neither CAA %s nor gcp-t4 reads it; drop it with --unset %s", k, UpstreamRelease, k))
			s.carried = append(s.carried, k)
		}
		cfg[k] = v
	}
	for _, k := range req.Unset {
		if _, ok := cfg[k]; !ok && !isKey(k) {
			return s, nil, fmt.Errorf("--unset %s: not a peer-pods-cm key, and not set", k)
		}
		delete(cfg, k)
	}
	for k, v := range req.Set {
		if !isKey(k) {
			if _, derived := installerKeys[k]; !derived && k != credentialsFile {
				return s, nil, unknownKey("--set "+k, k)
			}
		}
		cfg[k] = v
	}
	for _, k := range req.Unset {
		if _, ok := req.Set[k]; ok {
			return s, nil, fmt.Errorf("--unset %s and --set %s=…: give one", k, k)
		}
	}
	if len(cfg) > 0 {
		s.Config = cfg
	}
	s.GuardMaxGPUsPerPod = req.GuardMaxGPUsPerPod
	s.CreateContainerTimeout = req.CreateContainerTimeout
	if s.CreateContainerTimeout == "" && live.CreateContainerTimeout != "" {
		def, err := DefaultCreateContainerTimeout()
		if err != nil {
			return s, nil, err
		}
		if live.CreateContainerTimeout != def {
			s.CreateContainerTimeout = live.CreateContainerTimeout
			notes = append(notes, fmt.Sprintf("remediation sidecar: --create-container-timeout=%s kept (--create-container-timeout changes it)", live.CreateContainerTimeout))
		}
	}
	if s.GuardMaxGPUsPerPod == "" && live.GuardMaxGPUsPerPod != "" {
		// The admin may have edited the ConfigMap itself; re-applying the
		// shipped value would conflict with (or, forced, undo) that edit.
		guard, err := guardDefaults()
		if err != nil {
			return s, nil, err
		}
		if live.GuardMaxGPUsPerPod != guard[guardMaxKey] {
			s.GuardMaxGPUsPerPod = live.GuardMaxGPUsPerPod
			notes = append(notes, fmt.Sprintf("cost guard: %s %s kept (--cost-guard-max-gpus-per-pod changes it)", guardMaxKey, live.GuardMaxGPUsPerPod))
		}
	}

	modes := 0
	for _, on := range []bool{req.Credentials != nil, req.WIF != nil, req.UseADC} {
		if on {
			modes++
		}
	}
	if modes > 1 {
		return s, nil, fmt.Errorf("--credentials-file, --wif-credential-config, --use-adc: give one")
	}
	switch {
	case req.Credentials != nil:
		s.Credentials = req.Credentials
	case req.WIF != nil:
		s.WIFCredentialConfig = req.WIF
	case req.UseADC:
	case live.Credentials != nil:
		s.Credentials = live.Credentials
		notes = append(notes, "keeping the service account key already installed (--use-adc or --wif-credential-config replaces it)")
	case live.WIF != nil:
		s.WIFCredentialConfig = live.WIF
		notes = append(notes, "keeping the Workload Identity Federation configuration already installed")
	}
	switch {
	case req.TLS != nil && req.NoTLS:
		return s, nil, fmt.Errorf("--tls-ca/--tls-cert/--tls-key and --no-tls-certs: give one")
	case req.TLS != nil:
		s.TLS = req.TLS
	case req.NoTLS:
	case live.TLS != nil:
		return s, nil, fmt.Errorf("custom CAA-to-podVM certificates are installed (Secret %s): %w; pass --no-tls-certs to remove them", tlsSecret, errCustomTLS)
	}
	return s, notes, nil
}

// defaultConfig is peer-pods-cm as the manifests alone render it.
func defaultConfig() (map[string]string, error) {
	objs, err := Build(Settings{})
	if err != nil {
		return nil, err
	}
	return configOf(objs), nil
}

func configOf(objs []*unstructured.Unstructured) map[string]string {
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" && o.GetName() == ConfigMapName {
			d, _, _ := unstructured.NestedStringMap(o.Object, "data")
			return d
		}
	}
	return nil
}

// Build renders the settings and finishes the objects as install applies
// them: moved to the chosen namespace, and the DaemonSet's pod template
// carrying the digest of its configuration.
func Build(s Settings) ([]*unstructured.Unstructured, error) {
	m, err := Render(s)
	if err != nil {
		return nil, err
	}
	objs, err := Objects(m)
	if err != nil {
		return nil, err
	}
	if s.Namespace != "" && s.Namespace != Namespace {
		if err := relocate(objs, s.Namespace); err != nil {
			return nil, err
		}
	}
	return objs, stampConfigHash(objs)
}

// relocate moves every object of Namespace to ns, the Namespace object
// itself and ServiceAccount subjects of (Cluster)RoleBindings included.
// Kustomize's namespace transformer is not used: it moves objects that must
// stay elsewhere (Events RBAC in "default") and, by default, only
// rewrites subjects named "default" (api/filters/namespace at
// kustomize/api v0.21.2), which silently breaks CAA's bindings.
func relocate(objs []*unstructured.Unstructured, ns string) error {
	for _, o := range objs {
		if o.GetKind() == "Namespace" && o.GetName() == Namespace {
			o.SetName(ns)
		}
		if o.GetNamespace() == Namespace {
			o.SetNamespace(ns)
		}
		switch o.GetKind() {
		case "RoleBinding", "ClusterRoleBinding":
			subjects, _, err := unstructured.NestedSlice(o.Object, "subjects")
			if err != nil {
				return fmt.Errorf("%s %s: subjects: %w", o.GetKind(), o.GetName(), err)
			}
			for _, sub := range subjects {
				m, ok := sub.(map[string]any)
				if ok && m["kind"] == "ServiceAccount" && m["namespace"] == Namespace {
					m["namespace"] = ns
				}
			}
			if err := unstructured.SetNestedSlice(o.Object, subjects, "subjects"); err != nil {
				return err
			}
		case "ValidatingAdmissionPolicyBinding":
			// The cost guard's limits live in the install namespace.
			if p, _, _ := unstructured.NestedString(o.Object, "spec", "paramRef", "namespace"); p == Namespace {
				if err := unstructured.SetNestedField(o.Object, ns, "spec", "paramRef", "namespace"); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// stampConfigHash sets ConfigHashAnnotation on the CAA DaemonSet and the
// reaper's Deployment: a digest over the data of every ConfigMap and
// Secret rendered beside them. The reaper reads peer-pods-cm
// (REAPER_GRACE, REAPER_INTERVAL, the provider's keys) and the key as CAA
// does; without the digest a change would roll CAA and leave the reaper
// on the old values until something restarted it.
func stampConfigHash(objs []*unstructured.Unstructured) error {
	h := sha256.New()
	var stamped []*unstructured.Unstructured
	var parts []string
	for _, o := range objs {
		switch {
		case (o.GetKind() == "DaemonSet" && o.GetName() == DaemonSetName) || (o.GetKind() == "Deployment" && o.GetName() == ReaperName):
			stamped = append(stamped, o)
		case (o.GetKind() == "ConfigMap" && o.GetName() != InventoryName && o.GetName() != CostGuardPolicy) || o.GetKind() == "Secret":
			for _, field := range []string{"data", "stringData"} {
				d, _, _ := unstructured.NestedMap(o.Object, field)
				keys := make([]string, 0, len(d))
				for k := range d {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				for _, k := range keys {
					parts = append(parts, fmt.Sprintf("%s/%s/%s/%s=%v", o.GetKind(), o.GetName(), field, k, d[k]))
				}
			}
		}
	}
	sort.Strings(parts)
	for _, p := range parts {
		_, _ = io.WriteString(h, p+"\n")
	}
	sum := hex.EncodeToString(h.Sum(nil))[:16]
	for _, o := range stamped {
		if err := unstructured.SetNestedField(o.Object, sum, "spec", "template", "metadata", "annotations", ConfigHashAnnotation); err != nil {
			return err
		}
	}
	return nil
}

// settingLine is one line of the settings view.
type settingLine struct{ name, value string }

// viewOf is what the diff compares: never key material, only what the
// credentials are.
func viewOf(image, ns string, cfg map[string]string, creds, wif []byte, tlsFiles *TLSFiles) []settingLine {
	if ns == "" {
		ns = Namespace
	}
	v := []settingLine{{"namespace", ns}, {"image", image}, {"credentials", describeCredentials(creds, wif)}, {"CAA-to-podVM TLS", tlsFiles.describe()}}
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v = append(v, settingLine{k, cfg[k]})
	}
	return v
}

func describeCredentials(creds, wif []byte) string {
	switch {
	case creds != nil:
		info, err := credential.Check("GCP_CREDENTIALS", creds)
		if err != nil {
			return "GCP_CREDENTIALS that do not parse"
		}
		return info.String()
	case wif != nil:
		info, err := credential.Check("credential configuration", wif)
		if err != nil {
			return "a Workload Identity Federation configuration that does not parse"
		}
		return info.String()
	}
	return "Application Default Credentials of the pod (on GKE: the node's service account)"
}

// liveView is the view of what is installed; nil when nothing is.
func liveView(l Live) []settingLine {
	if !l.Found {
		return nil
	}
	return viewOf(l.Image, l.Namespace, l.Config, l.Credentials, l.WIF, l.TLS)
}

// newView is the view of what install is about to apply.
func newView(s Settings, objs []*unstructured.Unstructured) []settingLine {
	image := ""
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" || o.GetName() != DaemonSetName {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range cs {
			if m, ok := c.(map[string]any); ok && m["name"] == "cloud-api-adaptor-con" {
				image, _ = m["image"].(string)
			}
		}
	}
	return viewOf(image, s.Namespace, configOf(objs), s.Credentials, s.WIFCredentialConfig, s.TLS)
}

// PrintDiff writes the settings diff: every change, addition and removal,
// and how many settings stay as they are.
func PrintDiff(w io.Writer, before, after []settingLine) {
	old := map[string]string{}
	for _, s := range before {
		old[s.name] = s.value
	}
	seen := map[string]bool{}
	same := 0
	var lines []string
	for _, s := range after {
		seen[s.name] = true
		prev, had := old[s.name]
		switch {
		case before == nil:
			if s.value != "" {
				lines = append(lines, fmt.Sprintf("  + %s: %s", s.name, quoteIfKey(s)))
			}
		case !had:
			if s.value != "" {
				lines = append(lines, fmt.Sprintf("  + %s: %s", s.name, quoteIfKey(s)))
			}
		case prev != s.value:
			lines = append(lines, fmt.Sprintf("  ~ %s: %s → %s", s.name, quoteIfKey(settingLine{s.name, prev}), quoteIfKey(s)))
		default:
			same++
		}
	}
	for _, s := range before {
		if !seen[s.name] {
			lines = append(lines, fmt.Sprintf("  - %s: %s", s.name, quoteIfKey(s)))
		}
	}
	switch {
	case before == nil:
		fmt.Fprintln(w, "settings (new install):")
	case len(lines) == 0:
		fmt.Fprintln(w, "settings: no change")
	default:
		fmt.Fprintln(w, "settings:")
	}
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	if before != nil && same > 0 && len(lines) > 0 {
		fmt.Fprintf(w, "  (%d other settings unchanged)\n", same)
	}
}

// quoteIfKey quotes peer-pods-cm values (so "" shows) but not the
// descriptive lines.
func quoteIfKey(s settingLine) string {
	if s.name == strings.ToUpper(s.name) {
		return fmt.Sprintf("%q", s.value)
	}
	return s.value
}
