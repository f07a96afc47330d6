#!/usr/bin/env bash
# Checks a built podVM directory: the package manifest lists the NVIDIA
# runtime at the pinned version and no toolchain, and the disk's root
# filesystem holds the DKMS-built module for the image kernel, the init
# units and tools, and no kernel headers. Reads the ext4 root with debugfs,
# so it needs neither root nor loop devices.
#   check-image.sh <dir with podvm.raw and podvm.manifest>
set -euo pipefail
dir=$1
raw=$dir/podvm.raw
manifest=$dir/podvm.manifest
driver=535.309.01-0+deb12u1
fail() { echo "check-image: $*" >&2; exit 1; }
[ -f "$raw" ] || fail "no $raw"
[ -f "$manifest" ] || fail "no $manifest (ManifestFormat=json)"

pkgver() { jq -r --arg n "$1" '.packages[] | select(.name == $n) | .version' "$manifest"; }
for p in nvidia-smi libcuda1 libnvidia-ml1 firmware-nvidia-gsp nvidia-kernel-support; do
	v=$(pkgver "$p")
	[ "$v" = "$driver" ] || fail "manifest: $p is '${v:-absent}', want $driver"
done
for p in nvidia-persistenced nvidia-modprobe linux-image-cloud-amd64 systemd; do
	[ -n "$(pkgver "$p")" ] || fail "manifest: $p missing"
done
for p in dkms gcc make linux-headers-cloud-amd64 openssh-server; do
	[ -z "$(pkgver "$p")" ] || fail "manifest: $p must not be in the image"
done
kver=$(jq -r '.packages[] | select(.name | test("^linux-image-[0-9].*-cloud-amd64$")) | .name' "$manifest" | sed 's/^linux-image-//')
[ -n "$kver" ] || fail "manifest: no linux-image-<version>-cloud-amd64"

# Root partition by GPT type (root x86-64), copied out sparsely for debugfs.
json=$(sfdisk -J "$raw")
ssz=$(jq -r '.partitiontable.sectorsize // 512' <<<"$json")
read -r start size < <(jq -r '.partitiontable.partitions[] | select(.type == "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709") | "\(.start) \(.size)"' <<<"$json")
[ -n "${start:-}" ] || fail "no x86-64 root partition in the GPT"
estart=$(jq -r '.partitiontable.partitions[] | select(.type == "C12A7328-F81F-11D2-BA4B-00A0C93EC93B") | .start' <<<"$json")
[ -n "$estart" ] || fail "no ESP in the GPT"
part=$(mktemp "$dir/.root.XXXXXX.tmp")
trap 'rm -f "$part"' EXIT
dd if="$raw" of="$part" bs="$ssz" skip="$start" count="$size" conv=sparse status=none
ls_root() { debugfs -R "ls -p $1" "$part" 2>/dev/null | awk -F/ 'NF > 5 {print $6}'; }
mods=$(ls_root "/usr/lib/modules/$kver/updates/dkms")
for m in nvidia-current.ko nvidia-current-uvm.ko nvidia-current-modeset.ko; do
	grep -qx "$m" <<<"$mods" || fail "root fs: /usr/lib/modules/$kver/updates/dkms/$m missing (have: $(echo "$mods" | tr '\n' ' '))"
done
debugfs -R "cat /usr/lib/modules/$kver/modules.dep" "$part" 2>/dev/null | grep -q '^updates/dkms/nvidia-current.ko' ||
	fail "root fs: nvidia-current.ko not in modules.dep (depmod not run after restoring the modules)"
# The module loads GSP firmware from this path (modinfo firmware=); Turing is tu10x.
fwver=${driver%%-*}
grep -qx gsp_tu10x.bin <<<"$(ls_root "/usr/lib/firmware/nvidia/$fwver")" ||
	fail "root fs: /usr/lib/firmware/nvidia/$fwver/gsp_tu10x.bin missing (firmware-nvidia-gsp)"
src=$(ls_root /usr/src | grep -v '^\.\.\?$' || true)
[ -z "$src" ] || fail "root fs: /usr/src still holds: $src (headers must be removed)"
for f in gpu-init nvidia-ctk nvidia-cdi-hook; do
	grep -qx "$f" <<<"$(ls_root /usr/bin)" || fail "root fs: /usr/bin/$f missing"
done
for u in caa-gcp-t4-gpu-init.service caa-gcp-t4-slots.service kata-agent.service; do
	grep -qx "$u" <<<"$(ls_root /etc/systemd/system/multi-user.target.wants)" || fail "root fs: $u not enabled"
done
grep -qx nvidia-current.ko <<<"$mods"

# ESP (read in place with mtools at its byte offset): the UKI and the boot
# loader, and no baked-in random seed (mkosi.finalize).
esp="$raw@@$((estart * ssz))"
ls_esp() { MTOOLS_SKIP_CHECK=1 mdir -b -i "$esp" "::$1" 2>/dev/null || true; }
ukis=$(ls_esp /EFI/Linux | grep -c '\.efi$' || true)
[ "$ukis" = 1 ] || fail "ESP: want exactly one UKI in /EFI/Linux, found ${ukis:-0}"
ls_esp /EFI/BOOT | grep -qi 'BOOTX64.EFI$' || fail "ESP: /EFI/BOOT/BOOTX64.EFI missing"
stray=$(ls_esp / | grep -E '/(vmlinuz|config|System\.map)-' || true)
[ -z "$stray" ] || fail "ESP: kernel files outside the UKI: $(echo "$stray" | tr '\n' ' ')"
if ls_esp /loader | grep -q 'random-seed$'; then
	fail "ESP: /loader/random-seed is baked in (every podVM would share it; mkosi.finalize removes it)"
fi
# The initrd carries no build-time logs or caches (podvm/initrd/mkosi.conf).
if [ -f "$dir/podvm.initrd" ]; then
	left=$(zstdcat "$dir/podvm.initrd" | cpio -t --quiet 2>/dev/null | grep -E '^(\./)?var/(log|cache)/.' || true)
	[ -z "$left" ] || fail "initrd: build-time files left: $(echo "$left" | tr '\n' ' ')"
fi
echo "check-image: ok: kernel $kver, NVIDIA $driver, modules $(echo "$mods" | grep -c '\.ko') in updates/dkms, GSP firmware, headers removed, ESP with one UKI and no random seed" >&2
