#!/bin/bash
# The caa-gcp-t4 image's /usr/local/bin/entrypoint.sh: the command upstream's
# peerpods Helm chart runs (templates/daemonset.yaml at CAA v0.22.0) and the
# command of install/base's DaemonSet, so both install paths start CAA here.
# Upstream's own entrypoint.sh dispatches on CLOUD_PROVIDER by exact name,
# has no gcp-t4 branch, and for a name it does not know prints its usage and
# exits 0, so the pod would restart forever without a word.
#
# This is also where the settings that would lift the tenant guard are
# refused, whichever way the manifests were rendered (gcp-t4 install, the
# Helm post-renderer, kubectl apply -k, a user's own overlay): CAA reads every
# setting from the environment (peer-pods-cm and peer-pods-secret through
# envFrom) or from flags after the provider's name, and this script sees both
# before CAA starts. The gcp-t4 provider reads GCP_CREDENTIALS itself, so
# nothing is translated here.
set -euo pipefail

refuse() {
	echo "entrypoint.sh: $*" >&2
	exit 1
}

# Values are quoted as the shell would read them back, so a value with a line
# break cannot forge a second log line.
quote() { printf '%q' "$1"; }

# Only gcp-t4. The binary is built with -tags gcp_t4 alone (Dockerfile), so
# upstream's gcp provider, which has none of gcp-t4's allow-lists and caps
# and gives every podVM an external IP at v0.22.0, is not in the image.
env_provider=${CLOUD_PROVIDER:-}
arg_provider=${1:-}
case "$arg_provider" in
-*) arg_provider= ;; # flags only: the provider comes from CLOUD_PROVIDER
esac
fix="set CLOUD_PROVIDER=gcp-t4 (peer-pods-cm; the chart's provider value)"
for p in "$env_provider" "$arg_provider"; do
	case "$p" in
	"" | gcp-t4) ;;
	gcp)
		refuse "CLOUD_PROVIDER=gcp: upstream's gcp provider is not in this image (it would create podVMs without gcp-t4's image and shape allow-lists and caps, with an external IP); $fix"
		;;
	*)
		refuse "CLOUD_PROVIDER=$(quote "$p"): this image holds the gcp-t4 provider only; $fix"
		;;
	esac
done
if [ -z "$env_provider" ] && [ -z "$arg_provider" ]; then
	refuse "CLOUD_PROVIDER is not set: $fix"
fi
if [ -n "$arg_provider" ]; then
	shift
fi

# CAA-to-podVM TLS as CAA issues it, nothing else. Upstream CAA v0.22.0
# (cmd/cloud-api-adaptor/main.go at 38d0fcf7) reads TLS_SKIP_VERIFY
# (-tls-skip-verify; "1" or "true" in any case is true), CACERT_FILE,
# CERT_FILE and CERT_KEY (-ca-cert-file, -cert-file, -cert-key), and the
# flag -disable-tls; a flag given after the provider's name wins over the
# variable. Skip-verify would let any VM of the VPC that answers on a
# podVM's address receive the pod; custom certificates make CAA send the
# podVM no server certificate, which the gcp-t4 podVM image does not bake
# (docs/install.md); -disable-tls drops TLS altogether.
skip=${TLS_SKIP_VERIFY:-}
case "${skip,,}" in
"" | false | 0) ;;
*)
	refuse "TLS_SKIP_VERIFY=$(quote "$skip"): CAA would accept any certificate from whatever answers on a podVM's address, so another VM in the VPC could impersonate a podVM; unset it in peer-pods-cm (or set false)"
	;;
esac
for key in CACERT_FILE CERT_FILE CERT_KEY; do
	if [ -n "${!key:-}" ]; then
		refuse "$key=$(quote "${!key}"): custom CAA-to-podVM certificates are not supported (the podVM would get no server certificate and every peer pod would fail); unset CACERT_FILE, CERT_FILE and CERT_KEY in peer-pods-cm: CAA then issues each podVM its own certificate"
	fi
done
for arg in "$@"; do
	case "$arg" in
	-*) ;;
	*) continue ;;
	esac
	name=${arg#-}
	name=${name#-}
	name=${name%%=*}
	case "$name" in
	tls-skip-verify | disable-tls | ca-cert-file | cert-file | cert-key)
		refuse "flag $(quote "$arg"): CAA-to-podVM TLS is not negotiable in this image (skip-verify, no TLS or custom certificates would let another VM impersonate a podVM, or fail every peer pod); remove the flag from the container's args"
		;;
	esac
done

exec cloud-api-adaptor gcp-t4 "$@"
