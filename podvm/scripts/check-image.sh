#!/usr/bin/env bash
# Checks a built podVM directory: the package manifest lists the NVIDIA
# runtime at the pinned versions and no toolchain, and every binary no Debian
# package installed with its version and sha256; the disk's root filesystem
# holds the DKMS-built module for the image kernel, the init units and tools
# (each matching the manifest's sha256), the peer-pod guest contract (pause
# bundle, agent policy, /run/kata-containers source, enabled units) and no
# kernel headers. Reads the ext4 root with debugfs,
# so it needs neither root nor loop devices.
#   check-image.sh <dir with podvm.raw and podvm.manifest>
set -euo pipefail
dir=$1
raw=$dir/podvm.raw
manifest=$dir/podvm.manifest
driver=535.309.01-0+deb12u1
# Its own source package, pinned in pkgmngr/etc/apt/preferences.d.
persistenced=535.171.04-1~deb12u1
fail() { echo "check-image: $*" >&2; exit 1; }
[ -f "$raw" ] || fail "no $raw"
[ -f "$manifest" ] || fail "no $manifest (ManifestFormat=json)"

pkgver() { jq -r --arg n "$1" '.packages[] | select(.name == $n) | .version' "$manifest"; }
for p in nvidia-smi libcuda1 libnvidia-ml1 firmware-nvidia-gsp nvidia-kernel-support; do
	v=$(pkgver "$p")
	[ "$v" = "$driver" ] || fail "manifest: $p is '${v:-absent}', want $driver"
done
v=$(pkgver nvidia-persistenced)
[ "$v" = "$persistenced" ] || fail "manifest: nvidia-persistenced is '${v:-absent}', want $persistenced"
for p in nvidia-modprobe linux-image-cloud-amd64 systemd catatonit; do
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
wants=$(ls_root /etc/systemd/system/multi-user.target.wants)
for u in caa-gcp-t4-gpu-init.service caa-gcp-t4-slots.service 'netns@podns.service' 'run-kata\x2dcontainers.mount' \
	process-user-data.service attestation-agent.service confidential-data-hub.service kata-agent.service \
	agent-protocol-forwarder.path api-server-rest.service; do
	grep -qxF "$u" <<<"$wants" || fail "root fs: $u not enabled"
done

# Every binary no Debian package installed is in the manifest with a version
# and the sha256 of the file on the disk, and nothing unlisted sits in the slots.
nb=$(jq -r '."caa-gcp-t4".binaries // [] | length' "$manifest")
for n in gpu-init nvidia-ctk nvidia-cdi-hook; do
	jq -e --arg n "$n" '."caa-gcp-t4".binaries[]? | select(.name == $n)' "$manifest" >/dev/null ||
		fail "manifest: no caa-gcp-t4 binaries entry for $n"
done
while IFS=$'\t' read -r n sum ver path; do
	[[ "$sum" =~ ^[0-9a-f]{64}$ ]] || fail "manifest: $n has sha256 '$sum'"
	case "$ver" in "" | unknown | *unknown*) fail "manifest: $n has version '$ver'" ;; esac
	got=$(debugfs -R "cat $path" "$part" 2>/dev/null | sha256sum | cut -c1-64)
	[ "$got" = "$sum" ] || fail "root fs: $path has sha256 $got, the manifest says $sum"
done < <(jq -r '."caa-gcp-t4".binaries[] | [.name, .sha256, .version, .path] | @tsv' "$manifest")
for f in $(ls_root /usr/local/bin | grep -v '^\.\.\?$' || true); do
	jq -e --arg p "/usr/local/bin/$f" '."caa-gcp-t4".binaries[] | select(.path == $p)' "$manifest" >/dev/null ||
		fail "root fs: /usr/local/bin/$f is not in the manifest's caa-gcp-t4 binaries"
done

# The guest contract: the pause bundle, the agent's default policy (a
# symlink into /run/peerpod, replaced by initdata) and the bind-mount source.
for f in config.json rootfs/pause; do
	debugfs -R "stat /pause_bundle/$f" "$part" 2>/dev/null | grep -q 'Type: regular' || fail "root fs: /pause_bundle/$f missing"
done
jq -e '.process.args[0] == "/pause"' <(debugfs -R "cat /pause_bundle/config.json" "$part" 2>/dev/null) >/dev/null ||
	fail "root fs: /pause_bundle/config.json does not run /pause"
link=$(debugfs -R "stat /etc/kata-opa/default-policy.rego" "$part" 2>/dev/null | sed -n 's/^Fast link dest: "\(.*\)"$/\1/p')
[ "$link" = /run/peerpod/policy.rego ] || fail "root fs: /etc/kata-opa/default-policy.rego is not a symlink to /run/peerpod/policy.rego (${link:-not a fast symlink})"
grep -qx allow-all.rego <<<"$(ls_root /etc/kata-opa)" || fail "root fs: /etc/kata-opa/allow-all.rego missing"
debugfs -R "stat /var/lib/kata-containers" "$part" 2>/dev/null | grep -q 'Type: directory' || fail "root fs: /var/lib/kata-containers missing (the /run/kata-containers bind-mount source)"
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
echo "check-image: ok: kernel $kver, NVIDIA $driver, persistenced $persistenced, $nb non-Debian binaries with versions and sha256, pause bundle, agent policy, modules $(echo "$mods" | grep -c '\.ko') in updates/dkms, GSP firmware, headers removed, ESP with one UKI and no random seed" >&2
