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
