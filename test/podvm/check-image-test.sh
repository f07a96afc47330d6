#!/usr/bin/env bash
# Shows that podvm/scripts/check-image.sh rejects what it must: runs it on a
# built image with a doctored package manifest (the disk itself is shared
# through a symlink, never modified).
#   check-image-test.sh <podvm dir>
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=0
case_() { # name, jq filter, expected message fragment
	mkdir -p "$work/$1"
	ln -s "$dir/podvm.raw" "$work/$1/podvm.raw"
	jq "$2" "$dir/podvm.manifest" >"$work/$1/podvm.manifest"
	local out
	if out=$(podvm/scripts/check-image.sh "$work/$1" 2>&1); then
		echo "check-image-test: $1: accepted, want a failure mentioning '$3'" >&2
		exit 1
	fi
	grep -q -- "$3" <<<"$out" || { echo "check-image-test: $1: '$out' lacks '$3'" >&2; exit 1; }
	n=$((n + 1))
}
case_ mismatched-driver '(.packages[] | select(.name == "libcuda1") | .version) |= "535.261.03-1"' "libcuda1 is '535.261.03-1'"
case_ no-gsp-firmware 'del(.packages[] | select(.name == "firmware-nvidia-gsp"))' "firmware-nvidia-gsp is 'absent'"
case_ toolchain-left '.packages += [{"name": "gcc", "version": "4:12.2.0-3"}]' "gcc must not be in the image"
case_ ssh '.packages += [{"name": "openssh-server", "version": "1:9.2p1-2"}]' "openssh-server must not be in the image"
echo "check-image-test: ok ($n cases)"
