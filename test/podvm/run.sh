#!/usr/bin/env bash
# make test's podVM part: static checks, the image build (reused from the
# cache when its inputs are unchanged), then the QEMU boot test.
set -euo pipefail
cd "$(dirname "$0")/../.."
podvm/scripts/lint.sh
test/podvm/stage-binaries-test.sh
dir=$(podvm/scripts/build.sh)
# Also on a cached image: the manifest and the disk hold what they must.
podvm/scripts/check-image.sh "$dir"
test/podvm/check-image-test.sh "$dir"
test/podvm/boot-test.sh "$dir" "$dir.boot"
# Same inputs, same bits: one more build on mkosi's cached package tree must
# reproduce every output of the cached image (make podvm-verify does this
# from scratch, twice).
# Next to the cached image (same filesystem as the build's staging
# directory, so the 1.1 GB image is renamed, not copied into a tmpfs).
again=$(mktemp -d "$(dirname "$dir")/podvm-again.XXXXXX")
trap 'rm -rf "$again"' EXIT
PODVM_OUT=$again/out PODVM_INCREMENTAL=1 podvm/scripts/build.sh >/dev/null
if ! diff "$dir/SHA256SUMS" "$again/out/SHA256SUMS"; then
	echo "podvm-test: a rebuild of the same inputs differs from the cached image (above); make podvm-verify narrows it down" >&2
	exit 1
fi
echo "podvm-test: rebuild reproduces the image: $(grep podvm.raw "$dir/SHA256SUMS")"
