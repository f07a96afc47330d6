#!/usr/bin/env bash
# Builds one containerd release from the Go module proxy and caches it
# outside the repository, keyed by version, so that the real-containerd
# tests of `gcp-t4-node remediate` run against the daemon GKE ships.
#
#   test/containerd/build.sh v2.2.1            -> prints the path of the binary
#   test/containerd/build.sh v1.7.29
#   test/containerd/build.sh v2.99.0 v2.0.14   -> v2.0.14's code, reporting
#       itself as v2.99.0 (`--version` and CRI): the tests' stand-in for a
#       release line a test adds as one row of the release table
#   CONTAINERD_CMD=ctr test/containerd/build.sh v2.4.2
#       -> another command of the release into the same bin directory: ctr
#       or containerd-shim-runc-v2, which the node harness (test/node) runs
#
# Most releases install directly. A release whose go.mod carries `exclude`
# directives (1.7, 2.0) is refused by `go install pkg@version`; its line
# has a tool module here, v<MAJOR.MINOR>/, whose go.mod pins the release,
# and is built from that: keep versions.mk and those go.mod files in step
# (this script refuses a mismatch). Which lines need one is the tool
# modules present, not a list in this script.
set -euo pipefail
usage="usage: build.sh <containerd version, e.g. v2.2.1 or v1.7.29> [<release whose code to build>]"
version=${1:?$usage}
source=${2:-$version}
cmd=${CONTAINERD_CMD:-containerd}
case $cmd in
containerd | ctr) check=--version ;;
containerd-shim-runc-v2) check=-v ;;
*)
	echo "build.sh: CONTAINERD_CMD=$cmd is not one this script builds (containerd, ctr, containerd-shim-runc-v2)" >&2
	exit 2
	;;
esac
here=$(cd "$(dirname "$0")" && pwd)
# Counted progress on stderr for the minutes of compiling: stdout is the path.
progress=$here/../../scripts/go-progress.sh
for v in "$version" "$source"; do
	if ! [[ $v =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+ ]]; then
		echo "build.sh: $v is not a containerd release tag (vMAJOR.MINOR.PATCH); $usage" >&2
		exit 1
	fi
done
[[ $source =~ ^v([0-9]+)\.([0-9]+)\. ]]
major=${BASH_REMATCH[1]}
line=${BASH_REMATCH[1]}.${BASH_REMATCH[2]}
name=containerd-$version
if [ "$source" != "$version" ]; then
	name=containerd-$version-from-$source
fi
cache=${XDG_CACHE_HOME:-$HOME/.cache}/caa-gcp-t4/$name
bin=$cache/bin/$cmd
if [ -x "$bin" ] && "$bin" "$check" >/dev/null 2>&1; then
	echo "$bin"
	exit 0
fi
if ! command -v go >/dev/null 2>&1; then
	echo "build.sh: go is not on PATH; Go 1.26 or newer is needed to build containerd $version" >&2
	exit 1
fi
# Go's module path rule: a major version from 2 on is part of the path.
module=github.com/containerd/containerd
if [ "$major" -ge 2 ]; then
	module=$module/v$major
fi
ldflags=""
if [ "$source" != "$version" ]; then
	# containerd reports version.Version, filled at link time.
	ldflags="-X $module/version.Version=$version"
fi
mkdir -p "$cache/bin"
tmp=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if [ -f "$here/v$line/go.mod" ]; then
	pinned=$(awk -v m="$module" '{ for (i = 1; i < NF; i++) if ($i == m) print $(i + 1) }' "$here/v$line/go.mod")
	if [ "$pinned" != "$source" ]; then
		echo "build.sh: $here/v$line/go.mod pins $module $pinned, not $source; change one of them" >&2
		exit 1
	fi
	(cd "$here/v$line" && GOWORK=off CGO_ENABLED=0 "$progress" build "$module/cmd/$cmd" -tags tools -ldflags="$ldflags" -o "$tmp/$cmd") >&2
else
	GOBIN=$tmp GOWORK=off CGO_ENABLED=0 "$progress" install "$module/cmd/$cmd@$source" -ldflags="$ldflags" >&2
fi
# Rename into place so that a build killed half-way never leaves a binary
# that the next run would trust.
mv -f "$tmp/$cmd" "$bin"
"$bin" "$check" >&2
echo "$bin"
