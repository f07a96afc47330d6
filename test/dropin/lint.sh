#!/usr/bin/env bash
# Upstream's own lint settings on the drop-in: copy src/cloud-providers/gcpt4
# into an upstream CAA checkout's src/cloud-providers (as check.sh does) and
# run golangci-lint there with that tree's .golangci.yaml and the gcp_t4
# build tag, at the version upstream's CI pins, installed from the module
# proxy into the tool cache by version. The upstream tree is never modified.
#
#   test/dropin/lint.sh /path/to/cloud-api-adaptor        (a work tree)
#   test/dropin/lint.sh /path/to/cloud-api-adaptor.git [REF]  (a git dir: REF, default HEAD)
set -euo pipefail
upstream=${1:-}
ref=${2:-HEAD}
version=${GOLANGCI_LINT_VERSION:-v2.9.0}
if [ -z "$upstream" ] || [ ! -d "$upstream" ]; then
	echo "usage: $0 UPSTREAM_CAA_CHECKOUT [REF] (a cloud-api-adaptor work tree or git dir)" >&2
	exit 2
fi
here=$(cd "$(dirname "$0")/../.." && pwd)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/caa-gcp-t4
bin=$cache/golangci-lint-$version/golangci-lint
if [ ! -x "$bin" ]; then
	mkdir -p "$cache"
	exec 9>"$cache/.golangci-lint.lock"
	flock 9
	if [ ! -x "$bin" ]; then
		echo "lint.sh: installing golangci-lint $version into $(dirname "$bin") (cold: several minutes)" >&2
		tmp=$(mktemp -d "$cache/.golangci-lint.XXXXXX")
		(cd "$tmp" && GOWORK=off GOFLAGS='' GOBIN="$tmp" go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$version")
		mkdir -p "$(dirname "$bin")"
		mv -f "$tmp/golangci-lint" "$bin"
		rm -rf "$tmp"
	fi
	exec 9>&-
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -d "$upstream/src/cloud-providers" ]; then
	cp -a "$upstream/src/cloud-providers" "$upstream/.golangci.yaml" "$work/"
else
	git --git-dir="$upstream" archive "$ref" src/cloud-providers .golangci.yaml | tar -x -C "$work"
	mv "$work/src/cloud-providers" "$work/cloud-providers"
fi
[ -f "$work/.golangci.yaml" ] || { echo "lint.sh: the upstream tree has no .golangci.yaml" >&2; exit 1; }
cd "$work/cloud-providers"
export GOWORK=off
. "$here/scripts/upstream-patch/common.sh"
dropin_copy "$here" .
dropin_tidy .
"$bin" run --config "$work/.golangci.yaml" --build-tags gcp_t4 ./gcpt4/...
echo "upstream's lint settings: no findings in gcpt4"
