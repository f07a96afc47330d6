#!/usr/bin/env bash
# System packages the node harness (test/node) runs besides what it builds
# from the module proxy: runc, the OCI runtime containerd's runc shim calls,
# iptables, which kubelet's and the CNI bridge plugin's rules need; and
# dbus-daemon, which carries the systemd stand-in the remediation sidecar
# restarts containerd through.
# Installs only what is missing, says what it installs, and prints nothing
# on stdout, so running it again is free.
set -euo pipefail
missing=()
for p in runc:runc iptables:iptables dbus-daemon:dbus-daemon; do
	command -v "${p%%:*}" >/dev/null 2>&1 || missing+=("${p#*:}")
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "deps.sh: ${missing[*]} missing; as root run: apt-get update && apt-get install -y ${missing[*]}" >&2
	exit 1
fi
echo "deps.sh: installing ${missing[*]} (apt-get)" >&2
apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
