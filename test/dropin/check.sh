#!/usr/bin/env bash
# Drop-in contract check: copy src/cloud-providers/gcpt4 into an upstream CAA
# checkout's src/cloud-providers, run `go mod tidy` there (the only change the
# contract allows) and build, vet and test the package in upstream's module.
# The upstream tree itself is never modified: it is copied to a temp dir.
#
#   test/dropin/check.sh /path/to/cloud-api-adaptor        (a work tree)
#   test/dropin/check.sh /path/to/cloud-api-adaptor.git [REF]  (a git dir: REF, default HEAD)
set -euo pipefail
upstream=${1:-}
ref=${2:-HEAD}
if [ -z "$upstream" ] || [ ! -d "$upstream" ]; then
	echo "usage: $0 UPSTREAM_CAA_CHECKOUT (a cloud-api-adaptor work tree or git dir)" >&2
	exit 2
fi
here=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ -d "$upstream/src/cloud-providers" ]; then
	cp -a "$upstream/src/cloud-providers" "$work/"
	rev=$(git -C "$upstream" rev-parse --short HEAD 2>/dev/null || echo unknown)
else
	git --git-dir="$upstream" archive "$ref" src/cloud-providers | tar -x -C "$work"
	mv "$work/src/cloud-providers" "$work/cloud-providers"
	rev="$ref ($(git --git-dir="$upstream" rev-parse --short "$ref^{commit}"))"
fi
cd "$work/cloud-providers"
echo "upstream $rev: $(grep -E '^go |cloud.google.com/go/compute |google.golang.org/api ' go.mod | tr '\n' ' ')"
# The tests need no workspace; upstream's own go.mod is the only one used.
export GOWORK=off
# shellcheck source=scripts/upstream-patch/common.sh
. "$here/scripts/upstream-patch/common.sh"
dropin_copy "$here" .
dropin_tidy .
dropin_test .
echo "drop-in check passed against upstream $rev"
