#!/bin/sh
# A Helm post-renderer for upstream's peerpods chart (CAA v0.22.0) with the
# gcp-t4 values (docs/install.md, "Helm"):
#
#   helm install peerpods CHART -f install/helm/gcp-t4.yaml … \
#     --post-renderer install/helm/post-render/post-render.sh
#
# The chart's DaemonSet template (templates/daemonset.yaml at 38d0fcf7)
# hard-codes what no value changes: a nodeSelector GKE nodes do not carry
# (node.kubernetes.io/worker), no tolerations, the default 30 s termination
# grace, no priority class. This lays kustomization.yaml over the chart's
# output: our DaemonSet's scheduling and grace (install/base, the GKE
# remediation component's node selection), the quota system-node-critical
# needs outside kube-system, CAA's Secrets access narrowed to get, and the
# podVM reaper (install/components/reaper) with the chart's image and
# namespace, what the gcp-t4 provider calls that the chart does not grant
# (caa-provider-rbac.yaml: kube-system's UID, the Events on a podVM's pod), the
# cost guard (install/components/cost-guard; COST_GUARD=off leaves it out)
# and the node sidecar (install/components/gke-remediation; REMEDIATION=off
# leaves it out, CREATE_CONTAINER_TIMEOUT sets its kata-remote bound).
# It refuses a release without GCP_CLUSTER_ID, or with another provider,
# TLS_SKIP_VERIFY or custom certificates (which the image's entrypoint also
# refuses at start, for every install path).
#
# Needs kustomize, or kubectl (kubectl kustomize); KUSTOMIZE=path picks one.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM

cat >"$work/chart.yaml"

# The chart writes each providerConfigs value as `  KEY: "VALUE"`
# (templates/configmap.yaml at 38d0fcf7).
if ! grep -Eq '^  GCP_CLUSTER_ID: "[^"]+"$' "$work/chart.yaml"; then
	echo "gcp-t4 post-renderer: providerConfigs.gcp-t4.GCP_CLUSTER_ID is empty: CAA would refuse every peer pod and the reaper would not start." >&2
	echo "  set it to this cluster's ID: --set providerConfigs.gcp-t4.GCP_CLUSTER_ID=\$(kubectl get namespace kube-system -o jsonpath='{.metadata.uid}')" >&2
	exit 1
fi

# The image runs gcp-t4 only (its entrypoint refuses any other provider at
# start); the chart writes `  CLOUD_PROVIDER: "<provider value>"` into
# peer-pods-cm, so a release for another provider is refused here, before
# anything is applied.
if grep -E '^  CLOUD_PROVIDER:' "$work/chart.yaml" | grep -Evq '^  CLOUD_PROVIDER: "gcp-t4"$'; then
	echo "gcp-t4 post-renderer: the release sets CLOUD_PROVIDER to another provider than gcp-t4: the caa-gcp-t4 image runs gcp-t4 only (upstream's gcp provider has none of its allow-lists and caps)." >&2
	echo "  install with --set provider=gcp-t4 (install/helm/gcp-t4.yaml sets it)" >&2
	exit 1
fi

# TLS_SKIP_VERIFY: CAA v0.22.0 reads "1" or "true", in any case, as true
# (BoolWithEnv, src/cloud-providers/util.go at 38d0fcf7); anything but
# empty, 0 or false is refused, as the image's entrypoint does.
if grep -E '^  TLS_SKIP_VERIFY:' "$work/chart.yaml" | grep -Eivq '^  TLS_SKIP_VERIFY: "(false|0)?"$'; then
	echo "gcp-t4 post-renderer: providerConfigs.gcp-t4.TLS_SKIP_VERIFY is set: CAA would accept any certificate from whatever answers on a podVM's address, so another VM in the VPC could impersonate a podVM." >&2
	echo "  unset it (or set \"false\"): CAA verifies the certificate it issued each podVM" >&2
	exit 1
fi

# Custom CAA-to-podVM certificates: upstream CAA v0.22.0 then runs no CA of
# its own and sends the podVM no server certificate, and the gcp-t4 image
# bakes none (docs/install.md, --tls-ca): every peer pod would fail.
if grep -Eq '^  (CACERT_FILE|CERT_FILE|CERT_KEY): "[^"]+"$' "$work/chart.yaml"; then
	echo "gcp-t4 post-renderer: providerConfigs.gcp-t4 sets CACERT_FILE/CERT_FILE/CERT_KEY: custom CAA-to-podVM certificates are not supported (the podVM would get no server certificate and every peer pod would fail)." >&2
	echo "  unset them: CAA then issues each podVM its own certificate" >&2
	exit 1
fi

cp "$here/kustomization.yaml" "$here/daemonset.yaml" "$work/"
components=""
# add_component DIR SWITCH VALUE: lays install/components/DIR over the
# chart's output when VALUE is on (the default), not when it is off.
add_component() {
	case "$3" in
	on)
		mkdir "$work/$1"
		cp "$repo/install/components/$1"/*.yaml "$work/$1/"
		components="$components $1"
		;;
	off) ;;
	*)
		echo "gcp-t4 post-renderer: $2=$3: use on (the default) or off" >&2
		exit 1
		;;
	esac
}
# The cost guard (install/components/cost-guard), on by default as with
# `gcp-t4 install`; COST_GUARD=off leaves it out. Its limits ConfigMap and
# the bindings' paramRef follow the release's namespace (kustomization.yaml's
# replacements).
add_component cost-guard COST_GUARD "${COST_GUARD:-on}"
# The node sidecar (install/components/gke-remediation), on by default as
# with `gcp-t4 install`: it keeps kata-remote in containerd's configuration
# through GKE's rewrites and sets kata-remote's create_container_timeout
# (the in-guest image pull's bound) in kata's config.d. REMEDIATION=off
# leaves it out. It runs the chart's image in the release's namespace
# (kustomization.yaml's replacements).
add_component gke-remediation REMEDIATION "${REMEDIATION:-on}"
# CREATE_CONTAINER_TIMEOUT replaces the sidecar's --create-container-timeout
# (the component's YAML carries install's default), as gcp-t4 install's flag
# of that name does: a Go duration of whole seconds, or 0 to leave
# kata-remote's configuration alone.
if [ -n "${CREATE_CONTAINER_TIMEOUT:-}" ]; then
	# Digits and h, m, s alone, checked on the whole value before the
	# pattern: grep matches line by line, so a value of several lines with
	# one good line passed it once, and the rest reached sed's script (its
	# e command runs a shell command). The value is not echoed back: it may
	# hold control characters.
	case $CREATE_CONTAINER_TIMEOUT in
	*[!0-9hms]*) bad_timeout=1 ;;
	*) bad_timeout=0 ;;
	esac
	if [ "$bad_timeout" = 1 ] || ! printf '%s\n' "$CREATE_CONTAINER_TIMEOUT" | grep -Eq '^(0|([0-9]+[hms])+)$'; then
		echo "gcp-t4 post-renderer: CREATE_CONTAINER_TIMEOUT: give a duration in whole seconds (digits with h, m, s), e.g. 1200s or 30m, or 0" >&2
		exit 1
	fi
	if [ ! -d "$work/gke-remediation" ]; then
		echo "gcp-t4 post-renderer: CREATE_CONTAINER_TIMEOUT with REMEDIATION=off: the node sidecar sets it; drop one" >&2
		exit 1
	fi
	sed -i "s/--create-container-timeout=[0-9hms]*/--create-container-timeout=$CREATE_CONTAINER_TIMEOUT/" "$work/gke-remediation/daemonset.yaml"
fi
if [ -n "$components" ]; then
	printf 'components:\n' >>"$work/kustomization.yaml"
	for c in $components; do
		printf '  - %s\n' "$c" >>"$work/kustomization.yaml"
	done
fi
cp "$repo/install/base/resourcequota.yaml" "$work/resourcequota.yaml"
cp "$repo/install/helm/caa-provider-rbac.yaml" "$work/caa-provider-rbac.yaml"
for f in peerpod-crd rbac deployment networkpolicy; do
	cp "$repo/install/components/reaper/$f.yaml" "$work/reaper-$f.yaml"
done

if [ -n "${KUSTOMIZE:-}" ]; then
	exec "$KUSTOMIZE" build "$work"
elif command -v kustomize >/dev/null 2>&1; then
	kustomize build "$work"
else
	kubectl kustomize "$work"
fi
