#!/usr/bin/env bash
# Builds one containerd release from the Go module proxy and caches it
# outside the repository, keyed by version, so that the real-containerd
# tests of `gcp-t4-node remediate` run against the daemon GKE ships.
#
#   test/containerd/build.sh v2.2.1   -> prints the path of the binary
#   test/containerd/build.sh v1.7.29
#
# Most 2.x releases install directly. 1.7 and 2.0 carry `exclude`
# directives in their go.mod, which `go install pkg@version` refuses, so
# they build from the tool modules v1.7/ and v2.0/, whose go.mod pins the
# version: keep CONTAINERD17 / CONTAINERD2 in versions.mk and those go.mod
# files in step.
set -euo pipefail
version=${1:?usage: build.sh <containerd version, e.g. v2.2.1 or v1.7.29>}
here=$(cd "$(dirname "$0")" && pwd)
# Counted progress on stderr for the minutes of compiling: stdout is the path.
progress=$here/../../scripts/go-progress.sh
cache=${XDG_CACHE_HOME:-$HOME/.cache}/caa-gcp-t4/containerd-${version}
bin=$cache/bin/containerd
if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
	echo "$bin"
	exit 0
fi
if ! command -v go >/dev/null 2>&1; then
	echo "build.sh: go is not on PATH; Go 1.26 or newer is needed to build containerd $version" >&2
	exit 1
fi
mkdir -p "$cache/bin"
tmp=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# fromModule DIR MODULE PKG: build PKG from the tool module in DIR, which
# must pin MODULE at $version.
fromModule() {
	pinned=$(awk -v m="$2" '{ for (i = 1; i < NF; i++) if ($i == m) print $(i + 1) }' "$here/$1/go.mod")
	if [ "$pinned" != "$version" ]; then
		echo "build.sh: $here/$1/go.mod pins $2 $pinned, not $version; change one of them" >&2
		exit 1
	fi
	(cd "$here/$1" && GOWORK=off CGO_ENABLED=0 "$progress" build "$3" -tags tools -o "$tmp/containerd") >&2
}
case "$version" in
v1.7.*)
	fromModule v1.7 github.com/containerd/containerd github.com/containerd/containerd/cmd/containerd
	;;
v2.0.*)
	fromModule v2.0 github.com/containerd/containerd/v2 github.com/containerd/containerd/v2/cmd/containerd
	;;
v2.*)
	GOBIN=$tmp GOWORK=off CGO_ENABLED=0 "$progress" install "github.com/containerd/containerd/v2/cmd/containerd@$version" >&2
	;;
*)
	echo "build.sh: unsupported containerd version $version (want v1.7.x or v2.x)" >&2
	exit 1
	;;
esac
# Rename into place so that a build killed half-way never leaves a binary
# that the next run would trust.
mv -f "$tmp/containerd" "$bin"
"$bin" --version >&2
echo "$bin"
