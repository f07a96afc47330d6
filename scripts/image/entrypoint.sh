#!/bin/bash
# The caa-gcp-t4 image's /usr/local/bin/entrypoint.sh, the command
# upstream's peerpods Helm chart runs (templates/daemonset.yaml at CAA
# v0.22.0). Upstream's own entrypoint.sh dispatches on CLOUD_PROVIDER by
# exact name, has no gcp-t4 branch, and for a name it does not know prints
# its usage and exits 0, so the pod would restart forever without a word.
# This one starts gcp-t4 itself, hands the providers the image also has
# (gcp) to upstream's script, now entrypoint-upstream.sh beside it, and
# refuses anything else with the fix.
#
# CAA reads every setting from the environment (peer-pods-cm and
# peer-pods-secret through envFrom); the gcp-t4 provider reads
# GCP_CREDENTIALS itself, so nothing is translated here.
set -euo pipefail

provider=${1:-${CLOUD_PROVIDER:-}}
case "$provider" in
gcp-t4)
	if [ "${1:-}" = gcp-t4 ]; then
		shift
	fi
	exec cloud-api-adaptor gcp-t4 "$@"
	;;
gcp)
	exec "$(dirname "$0")/entrypoint-upstream.sh" "$@"
	;;
"")
	echo "entrypoint.sh: CLOUD_PROVIDER is not set: set it to gcp-t4 (peer-pods-cm; the chart's provider value)" >&2
	exit 1
	;;
*)
	echo "entrypoint.sh: CLOUD_PROVIDER=$provider: this image holds the gcp-t4 and gcp providers only; set CLOUD_PROVIDER=gcp-t4 (the chart's provider value)" >&2
	exit 1
	;;
esac
