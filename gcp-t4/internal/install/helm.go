package install

import (
	"bytes"
	"fmt"
	"slices"
)

// Helm: upstream's peerpods chart (src/cloud-api-adaptor/install/charts/peerpods
// at CAA v0.22.0) with `provider: gcp-t4` runs our image's entrypoint.sh,
// writes peer-pods-cm from providerConfigs.<provider> (plus CLOUD_PROVIDER
// and the tlsProfile keys) and peer-pods-secret from
// providerSecrets.<provider>, and mounts certs-for-tls at /etc/certificates
// when providerConfigs sets CACERT_FILE. HelmValues writes the values file
// the chart's providers/<name>.yaml files are the model of, from the key
// table, so it cannot drift from what CAA and the provider read.

// helmRequired are set (empty) in the values file: the provider refuses
// to start (or, GCP_CLUSTER_ID, to create) without them
// (GCP_INSTANCE_TEMPLATE replaces PODVM_IMAGE_NAME and GCP_NETWORK).
var helmRequired = []string{"GCP_PROJECT_ID", "GCP_ZONE", "PODVM_IMAGE_NAME", "GCP_NETWORK", "GCP_CLUSTER_ID"}

// helmSet are set to a value other than the default.
var helmSet = map[string]string{"CLOUD_CONFIG_VERIFY": "true"}

// HelmValues is install/helm/gcp-t4.yaml.
func HelmValues() []byte {
	var b bytes.Buffer
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# Values for upstream's peerpods Helm chart (cloud-api-adaptor %s,\n", UpstreamRelease)
	w("# src/cloud-api-adaptor/install/charts/peerpods) with the gcp-t4 provider, laid\n")
	w("# out as the chart's providers/<provider>.yaml. Generated from the keys CAA %s\n", UpstreamRelease)
	w("# and gcp-t4 read: go test ./gcp-t4/internal/install -run TestHelmValues -update\n")
	w("# Use: docs/install.md, \"Helm\". Keys are those of `gcp-t4 install --set`\n")
	w("# (docs/provider.md); a commented key shows its default.\n\n")
	w("provider: %s\n\n", "gcp-t4")
	w("# The image `make image` built and you pushed (CAA %s with gcp-t4 linked in).\n", UpstreamRelease)
	w("image:\n  name: ghcr.io/your-org/caa-gcp-t4\n  tag: \"v1\"\n\n")
	w("# Upstream's peerpod-ctrl image is built without gcp-t4 and cannot delete a\n")
	w("# gcp-t4 podVM; leave it off (the post-renderer adds the reaper instead).\n")
	w("resourceCtrl:\n  enabled: false\n\n")
	w("# docs/install.md installs kata-deploy and the peer-pods webhook first, each with\n")
	w("# its own release; the chart's subcharts would then fail on their namespace and\n")
	w("# RuntimeClass, which another release owns (Chart.yaml at %s).\n", UpstreamRelease)
	w("webhook:\n  enabled: false\nkata-deploy:\n  enabled: false\n\n")
	w("# The chart's DaemonSet template hard-codes its node selector, grace and\n")
	w("# priority; install with --post-renderer install/helm/post-render/post-render.sh,\n")
	w("# which sets ours and adds the reaper. GCP_CLUSTER_ID below is required (the\n")
	w("# post-renderer refuses it empty): this cluster's kube-system namespace UID.\n\n")
	w("# The chart's create mode writes each secret value inside double quotes, which\n")
	w("# the JSON of a key breaks. Create peer-pods-secret yourself (or none, with\n")
	w("# Application Default Credentials) and reference it: docs/install.md, \"Helm\".\n")
	w("secrets:\n  mode: reference\n  existingSecretName: %s\n\n", SecretName)
	w("providerConfigs:\n  gcp-t4:\n")
	for _, k := range ConfigKeys() {
		if k.Env == "CLOUD_PROVIDER" {
			continue // the chart writes it from `provider`
		}
		usage := k.Usage
		if k.Provider {
			usage = "gcp-t4: " + usage
		}
		w("    # %s\n", usage)
		switch {
		case slices.Contains(helmRequired, k.Env):
			w("    # (required)\n    %s: \"\"\n\n", k.Env)
		case helmSet[k.Env] != "":
			w("    # (default: %q)\n    %s: %q\n\n", k.Default, k.Env, helmSet[k.Env])
		case installerKeys[k.Env] != "":
			// Custom CAA-to-podVM certificates are refused (tls.go): with
			// them upstream CAA sends the podVM no server certificate, and
			// the gcp-t4 image bakes none, so every peer pod would fail.
			// The post-renderer refuses a release that sets them.
			w("    # (not supported: leave unset; CAA then issues each podVM its own certificate, docs/install.md)\n    # %s: \"\"\n\n", k.Env)
		default:
			w("    # (default: %q)\n    # %s: %q\n\n", k.Default, k.Env, k.Default)
		}
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}
