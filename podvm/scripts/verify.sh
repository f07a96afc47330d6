#!/usr/bin/env bash
# make podvm-verify: builds the image twice from scratch (no incremental
# cache, fresh output directories) and compares them: the input keys, the
# package manifests, every output file, and the disk partition by partition
# (so a difference is narrowed to the ESP/UKI or the root filesystem).
# Both builds see the same archive state only when the mirror is a snapshot
# (PODVM_DEBIAN_MIRROR / PODVM_SNAPSHOT=1) or they run back to back.
# PODVM_VERIFY_INCREMENTAL=1 reuses mkosi's package cache for both builds:
# quick, and checks everything after package installation.
set -euo pipefail
cd "$(dirname "$0")/../.."
cache=${PODVM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/caa-gcp-t4}
base=$cache/podvm-verify
rm -rf "$base"
mkdir -p "$base"
mode=()
if [ "${PODVM_VERIFY_INCREMENTAL:-0}" = 1 ]; then
	mode=(env PODVM_INCREMENTAL=1)
fi
"${mode[@]}" env PODVM_OUT="$base/a" podvm/scripts/build.sh >/dev/null
"${mode[@]}" env PODVM_OUT="$base/b" podvm/scripts/build.sh >/dev/null
status=0
ka=$(jq -r .key "$base/a/build-info.json")
kb=$(jq -r .key "$base/b/build-info.json")
if [ "$ka" != "$kb" ]; then
	echo "podvm-verify: the inputs changed between the two builds (key $ka, then $kb): the comparison below is not meaningful" >&2
	status=1
fi
if ! diff <(jq -S . "$base/a/podvm.manifest") <(jq -S . "$base/b/podvm.manifest"); then
	echo "podvm-verify: the package manifests differ" >&2
	status=1
fi
partitions() {
	sfdisk -J "$1/podvm.raw" | jq -r '.partitiontable.partitions[] | "\(.type) \(.start) \(.size)"' |
		while read -r type start size; do
			echo "$type $(dd if="$1/podvm.raw" bs=512 skip="$start" count="$size" status=none | sha256sum | cut -c1-64)"
		done
}
if ! diff <(partitions "$base/a") <(partitions "$base/b"); then
	echo "podvm-verify: partitions differ (C12A7328-… is the ESP with the UKI, 4F68BCE3-… the root filesystem)" >&2
	status=1
fi
if diff "$base/a/SHA256SUMS" "$base/b/SHA256SUMS"; then
	echo "podvm-verify: identical: $(grep podvm.raw "$base/a/SHA256SUMS")"
else
	echo "podvm-verify: output files differ between two builds of the same inputs (above)" >&2
	status=1
fi
exit "$status"
