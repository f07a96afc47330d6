#!/usr/bin/env bash
# Static checks of the podVM sources: shellcheck on every script, and
# systemd-analyze verify on the units of the skeleton tree (against a scratch
# root holding stand-ins for the binaries the units name, so it runs without
# building the image).
set -euo pipefail
cd "$(dirname "$0")/../.."
podvm/scripts/setup-host.sh
scripts=(podvm/scripts/*.sh test/podvm/*.sh)
shellcheck -x "${scripts[@]}"
shellcheck -s sh podvm/mkosi.postinst podvm/mkosi.finalize podvm/mkosi.extra/usr/lib/caa-gcp-t4/slot-report

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
cp -a podvm/mkosi.extra/. "$root/"
for b in bin/mkdir usr/bin/gpu-init usr/local/bin/kata-agent usr/local/bin/agent-protocol-forwarder usr/local/bin/process-user-data; do
	mkdir -p "$root/$(dirname "$b")"
	printf '#!/bin/sh\n' >"$root/$b"
	chmod +x "$root/$b"
done
units=()
for u in podvm/mkosi.extra/usr/lib/systemd/system/*.service; do
	units+=("$root/usr/lib/systemd/system/$(basename "$u")")
done
# Units the image's packages provide (nvidia-persistenced, networkd) are not
# in the scratch root; "not found" for them is expected, anything else fails.
out=$(SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --man=no --recursive-errors=no --root="$root" "${units[@]}" 2>&1 || true)
bad=$(grep -v -E "Unit (nvidia-persistenced|systemd-[a-z-]+|network[a-z-]*|basic|sysinit|multi-user)\.[a-z]+ not found|^$" <<<"$out" || true)
if [ -n "$bad" ]; then
	echo "$out" >&2
	echo "systemd-analyze verify found problems in the podVM units" >&2
	exit 1
fi
echo "podvm lint: shellcheck and systemd-analyze verify ok (${#scripts[@]} scripts, ${#units[@]} units)"
