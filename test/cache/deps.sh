#!/usr/bin/env bash
# System packages the cache tests need: skopeo, a real registry client that
# reads containers-registries.conf (the format image-rs reads in the
# podVM), to pull through the cache mirror (gcp-t4/internal/cachebuild and
# the podVM boot test), and docker-registry (the CNCF distribution
# registry) that the boot test's cache disk is built from; veritysetup
# (cryptsetup-bin), which writes the disk's dm-verity hash tree.
set -euo pipefail
missing=()
command -v skopeo >/dev/null 2>&1 || missing+=(skopeo)
command -v docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
command -v veritysetup >/dev/null 2>&1 || missing+=(cryptsetup-bin)
if [ "${#missing[@]}" -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "deps.sh: ${missing[*]} missing; as root run: apt-get update && apt-get install -y ${missing[*]}" >&2
	exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
for c in skopeo docker-registry veritysetup; do
	command -v "$c" >/dev/null 2>&1 || { echo "deps.sh: $c still missing after apt-get install ${missing[*]}" >&2; exit 1; }
done
