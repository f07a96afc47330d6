#!/usr/bin/env bash
# System packages the cache tests need: skopeo, a real registry client that
# reads containers-registries.conf (the format image-rs reads in the
# podVM), to pull through the cache mirror (gcp-t4/internal/cachebuild).
set -euo pipefail
if command -v skopeo >/dev/null 2>&1; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "deps.sh: skopeo is missing; as root run: apt-get update && apt-get install -y skopeo" >&2
	exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq skopeo >/dev/null
