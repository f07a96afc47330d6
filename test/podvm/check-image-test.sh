#!/usr/bin/env bash
# Shows that podvm/scripts/check-image.sh rejects what it must: runs it on a
# built image with a doctored package manifest or initrd (the disk shared
# through a symlink, never modified) or on a sparse copy of the disk with a
# file planted in its ESP.
#   check-image-test.sh <podvm dir>
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=0
refused() { # name (a directory under $work), expected message fragment
	local out
	if out=$(podvm/scripts/check-image.sh "$work/$1" 2>&1); then
		echo "check-image-test: $1: accepted, want a failure mentioning '$2'" >&2
		exit 1
	fi
	grep -q -- "$2" <<<"$out" || { echo "check-image-test: $1: '$out' lacks '$2'" >&2; exit 1; }
	n=$((n + 1))
}
case_() { # name, jq filter, expected message fragment
	mkdir -p "$work/$1"
	ln -s "$dir/podvm.raw" "$work/$1/podvm.raw"
	jq "$2" "$dir/podvm.manifest" >"$work/$1/podvm.manifest"
	refused "$1" "$3"
}
case_ mismatched-driver '(.packages[] | select(.name == "libcuda1") | .version) |= "535.261.03-1"' "libcuda1 is '535.261.03-1'"
case_ no-gsp-firmware 'del(.packages[] | select(.name == "firmware-nvidia-gsp"))' "firmware-nvidia-gsp is 'absent'"
case_ toolchain-left '.packages += [{"name": "gcc", "version": "4:12.2.0-3"}]' "gcc must not be in the image"
case_ ssh '.packages += [{"name": "openssh-server", "version": "1:9.2p1-2"}]' "openssh-server must not be in the image"
case_ persistenced-unpinned '(.packages[] | select(.name == "nvidia-persistenced") | .version) |= "535.216.03-1"' "nvidia-persistenced is '535.216.03-1'"
case_ no-ctk-record 'del(."caa-gcp-t4".binaries[] | select(.name == "nvidia-ctk"))' "no caa-gcp-t4 binaries entry for nvidia-ctk"
case_ ctk-version-unknown '(."caa-gcp-t4".binaries[] | select(.name == "nvidia-ctk") | .version) |= "unknown"' "nvidia-ctk has version 'unknown'"
case_ unlisted-slot 'del(."caa-gcp-t4".binaries[] | select(.name == "kata-agent"))' "/usr/local/bin/kata-agent is not in the manifest"
case_ gpu-init-other-sha '(."caa-gcp-t4".binaries[] | select(.name == "gpu-init") | .sha256) |= ("0" * 64)' "/usr/bin/gpu-init has sha256"
# An initrd that still carries a build-time log (the real disk, a made-up initrd).
mkdir -p "$work/initrd/tree/var/log" "$work/initrd/out"
echo "install dkms" >"$work/initrd/tree/var/log/dpkg.log"
ln -s "$dir/podvm.raw" "$work/initrd/out/podvm.raw"
cp "$dir/podvm.manifest" "$work/initrd/out/"
(cd "$work/initrd/tree" && find . | cpio -o -H newc --quiet) | zstd -q >"$work/initrd/out/podvm.initrd"
refused initrd/out "initrd: build-time files left: var/log/dpkg.log"

# A disk whose ESP carries a random seed again (a sparse copy; the original
# is never written).
mkdir -p "$work/seed"
cp --sparse=always "$dir/podvm.raw" "$work/seed/podvm.raw"
cp "$dir/podvm.manifest" "$work/seed/"
estart=$(sfdisk -J "$work/seed/podvm.raw" | jq -r '.partitiontable.partitions[] | select(.type == "C12A7328-F81F-11D2-BA4B-00A0C93EC93B") | .start')
head -c 32 /dev/urandom >"$work/random-seed"
MTOOLS_SKIP_CHECK=1 mcopy -o -i "$work/seed/podvm.raw@@$((estart * 512))" "$work/random-seed" ::/loader/random-seed
refused seed "random-seed is baked in"
echo "check-image-test: ok ($n cases)"
