#!/usr/bin/env bash
# Builds nvidia-ctk and nvidia-cdi-hook from NVIDIA's Go module at a pinned
# version into a cache keyed by the version and this recipe, and prints the
# directory holding them. cgo stays on: nvidia-ctk reaches NVML through
# go-nvml's dlopen wrapper. Built against the host's glibc, which must not be
# newer than the image's (Debian 12 on both sides in the supported set-up).
#
# NVIDIA's Makefile stamps the version into internal/info (CLI_VERSION_PACKAGE,
# "-X ….version=$(CLI_VERSION)" with CLI_VERSION = LIB_VERSION from
# versions.mk, e.g. 1.19.1); a plain `go install` leaves it "unknown", so the
# same -X is passed here. The module proxy has no commit for a tag, so
# gitCommit stays empty, as in a build from a source tarball.
set -euo pipefail
NVCT_VERSION=${NVCT_VERSION:-v1.19.1}
recipe=$(sha256sum "$0" | cut -c1-12)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/caa-gcp-t4/nvidia-ctk-$NVCT_VERSION-$recipe
want="version ${NVCT_VERSION#v}"
check() {
	local out
	out=$("$1/nvidia-ctk" --version 2>&1) || { echo "nvidia-tools: $1/nvidia-ctk --version failed: $out" >&2; return 1; }
	grep -q "$want" <<<"$out" || { echo "nvidia-tools: nvidia-ctk --version says '$out', want '$want'" >&2; return 1; }
}
if [ -x "$cache/bin/nvidia-ctk" ] && [ -x "$cache/bin/nvidia-cdi-hook" ] && check "$cache/bin"; then
	echo "$cache/bin"
	exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
pkg=github.com/NVIDIA/nvidia-container-toolkit
for cmd in nvidia-ctk nvidia-cdi-hook; do
	GOBIN="$tmp/bin" GOFLAGS=-trimpath CGO_ENABLED=1 GOWORK=off go install \
		-ldflags "-s -w -buildid= -X $pkg/internal/info.version=${NVCT_VERSION#v}" \
		"$pkg/cmd/$cmd@$NVCT_VERSION" >&2
done
check "$tmp/bin"
"$tmp/bin/nvidia-ctk" --version >&2
rm -rf "${cache:?}/bin"
mv "$tmp/bin" "$cache/bin"
echo "$cache/bin"
