#!/usr/bin/env bash
# Builds nvidia-ctk and nvidia-cdi-hook from NVIDIA's Go module at a pinned
# version into a version-keyed cache and prints the directory holding them.
# cgo stays on: nvidia-ctk reaches NVML through go-nvml's dlopen wrapper.
# Built against the host's glibc, which must not be newer than the image's
# (Debian 12 on both sides in the supported set-up).
set -euo pipefail
NVCT_VERSION=${NVCT_VERSION:-v1.19.1}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/caa-gcp-t4/nvidia-ctk-$NVCT_VERSION
if [ -x "$cache/bin/nvidia-ctk" ] && [ -x "$cache/bin/nvidia-cdi-hook" ]; then
	echo "$cache/bin"
	exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for cmd in nvidia-ctk nvidia-cdi-hook; do
	GOBIN="$tmp/bin" GOFLAGS=-trimpath CGO_ENABLED=1 GOWORK=off nice go install \
		-ldflags "-s -w -buildid=" \
		"github.com/NVIDIA/nvidia-container-toolkit/cmd/$cmd@$NVCT_VERSION" >&2
done
"$tmp/bin/nvidia-ctk" --version >&2
rm -rf "${cache:?}/bin"
mv "$tmp/bin" "$cache/bin"
echo "$cache/bin"
