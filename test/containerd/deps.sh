#!/usr/bin/env bash
# System packages the `gcp-t4-node remediate` tests need besides containerd:
# dbus-daemon, the real message bus the systemd restarter is tested over.
set -euo pipefail
if command -v dbus-daemon >/dev/null 2>&1; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "deps.sh: dbus-daemon is missing; as root run: apt-get update && apt-get install -y dbus-daemon" >&2
	exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dbus-daemon >/dev/null
