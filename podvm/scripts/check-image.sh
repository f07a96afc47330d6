#!/usr/bin/env bash
# Checks a built podVM directory and refuses an image that is not what the
# trust boundary needs. Reads the disk's partitions as files (squashfs with
# unsquashfs, ext4 with debugfs, the ESP with mtools at its offset, the
# UKI's PE sections with python3-pefile), so it needs neither root nor loop
# devices.
#   check-image.sh <dir with podvm.raw, podvm.efi, podvm.manifest, podvm.roothash>
#
# The boot path: the ESP holds the UKI as /EFI/BOOT/BOOTX64.EFI and nothing
# else (no boot loader, no loader.conf, no entries: no menu to edit); the
# UKI is podvm.efi, its sections do not overlap, and its command line names
# a read-only root (ro, root=/dev/mapper/root), the root hash, and the two
# partitions the GPT has, and nothing that opens a shell.
# The root: a squashfs (a file system that cannot be written) whose dm-verity
# hash tree, on the root-verity partition, verifies against that root hash
# (veritysetup verify reads every block); both partitions flagged read-only.
# The state: an ext4 partition, last on the disk (it grows at boot), seeded
# with /var (/var/lib/kata-containers, the /run/kata-containers source).
# Signatures, when the manifest says the image is signed: the UKI (on the
# ESP and podvm.efi) verifies against podvm.db.crt (sbverify), and so does
# every NVIDIA module's (openssl cms); a signed manifest without them fails.
# Content: the package manifest lists the NVIDIA runtime at the pinned
# versions and no toolchain, and every binary no Debian package installed
# with its version and sha256; the root holds the DKMS-built modules for the
# image kernel, the init units and tools (each matching the manifest), the
# peer-pod guest contract (pause bundle, agent policy, enabled units), the
# shells masked, and no kernel headers; the initrd has no build-time logs and
# no shell on failure.
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
[ -f "$dir/podvm.efi" ] || fail "no $dir/podvm.efi (the UKI)"

pkgver() { jq -r --arg n "$1" '.packages[] | select(.name == $n) | .version' "$manifest"; }
for p in nvidia-smi libcuda1 libnvidia-ml1 firmware-nvidia-gsp nvidia-kernel-support; do
	v=$(pkgver "$p")
	[ "$v" = "$driver" ] || fail "manifest: $p is '${v:-absent}', want $driver"
done
v=$(pkgver nvidia-persistenced)
[ "$v" = "$persistenced" ] || fail "manifest: nvidia-persistenced is '${v:-absent}', want $persistenced"
for p in nvidia-modprobe linux-image-cloud-amd64 systemd catatonit tpm2-tools dmsetup cryptsetup-bin; do
	[ -n "$(pkgver "$p")" ] || fail "manifest: $p missing"
done
for p in dkms gcc make linux-headers-cloud-amd64 openssh-server systemd-boot; do
	[ -z "$(pkgver "$p")" ] || fail "manifest: $p must not be in the image"
done
kver=$(jq -r '.packages[] | select(.name | test("^linux-image-[0-9].*-cloud-amd64$")) | .name' "$manifest" | sed 's/^linux-image-//')
[ -n "$kver" ] || fail "manifest: no linux-image-<version>-cloud-amd64"
signed=$(jq -r '."caa-gcp-t4".secure_boot.signed | if . == null then "absent" else tostring end' "$manifest")
case "$signed" in true | false) ;; *) fail "manifest: no caa-gcp-t4.secure_boot.signed (true or false): the build must say whether it signed" ;; esac

work=$(mktemp -d "$dir/.check-image.XXXXXX")
trap 'rm -rf "$work"' EXIT

# --- The GPT: ESP, root, root-verity, state (last). ---------------------------
json=$(sfdisk -J "$raw")
ssz=$(jq -r '.partitiontable.sectorsize // 512' <<<"$json")
T_ESP=C12A7328-F81F-11D2-BA4B-00A0C93EC93B
T_ROOT=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709
T_VERITY=2C7357ED-EBD2-46D9-AEC1-23D437EC2BF5
T_GENERIC=0FC63DAF-8483-4772-8E79-3D69D8477DE4
types=$(jq -r '[.partitiontable.partitions[].type] | join(" ")' <<<"$json")
[ "$types" = "$T_ESP $T_ROOT $T_VERITY $T_GENERIC" ] ||
	fail "GPT: partitions are [$types], want ESP, root (x86-64), root-verity (x86-64), then the state partition last"
part() { jq -r --arg t "$1" ".partitiontable.partitions[] | select(.type == \$t) | .$2" <<<"$json"; }
extract() { # type, file
	dd if="$raw" of="$2" bs="$ssz" skip="$(part "$1" start)" count="$(part "$1" size)" conv=sparse status=none
}
for t in $T_ROOT $T_VERITY; do
	# GPT attribute bit 60: read-only (systemd's discoverable partitions).
	attrs=$(part "$t" attrs)
	grep -qw 'GUID:60' <<<"${attrs//,/ }" || fail "GPT: partition type $t is not flagged read-only (attribute 60; attrs '${attrs:-none}')"
done
extract $T_ROOT "$work/root.img"
extract $T_VERITY "$work/verity.img"
extract $T_GENERIC "$work/state.img"

# --- The ESP: the UKI and nothing else. ----------------------------------------
esp="$raw@@$(( $(part $T_ESP start) * ssz ))"
export MTOOLS_SKIP_CHECK=1
esp_files=$(mdir -/ -b -i "$esp" :: 2>/dev/null | sed 's|^::||' | grep -v '/$' | LC_ALL=C sort || true)
[ "$esp_files" = /EFI/BOOT/BOOTX64.EFI ] ||
	fail "ESP: want only /EFI/BOOT/BOOTX64.EFI (the UKI), found: $(tr '\n' ' ' <<<"$esp_files")(a boot loader, loader.conf or entries would be a menu to edit; a random seed would be shared by every podVM)"
mcopy -n -i "$esp" ::/EFI/BOOT/BOOTX64.EFI "$work/bootx64.efi"
cmp -s "$work/bootx64.efi" "$dir/podvm.efi" || fail "ESP: /EFI/BOOT/BOOTX64.EFI is not podvm.efi"

# --- The UKI: sections and command line. -----------------------------------------
/usr/bin/python3 - "$work/bootx64.efi" >"$work/uki.json" <<'PY' || fail "UKI: not a PE image pefile can read"
import json, sys
import pefile
pe = pefile.PE(sys.argv[1], fast_load=True)
secs = [(s.Name.rstrip(b"\0").decode(), s.VirtualAddress, s.Misc_VirtualSize) for s in pe.sections]
overlap = []
spans = sorted(secs, key=lambda s: s[1])
for a, b in zip(spans, spans[1:]):
    if a[1] + a[2] > b[1]:
        overlap.append(f"{a[0]}+{b[0]}")
cmdline = ""
for s in pe.sections:
    if s.Name.rstrip(b"\0") == b".cmdline":
        cmdline = s.get_data()[: s.Misc_VirtualSize].rstrip(b"\0").decode()
sec = pe.OPTIONAL_HEADER.DATA_DIRECTORY[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_SECURITY"]]
print(json.dumps({"sections": [s[0] for s in secs], "overlap": overlap, "cmdline": cmdline,
                  "section_alignment": pe.OPTIONAL_HEADER.SectionAlignment, "signed": sec.VirtualAddress != 0}))
PY
for s in .linux .initrd .cmdline .osrel; do
	jq -e --arg s "$s" '.sections | index($s)' "$work/uki.json" >/dev/null || fail "UKI: no $s section: /EFI/BOOT/BOOTX64.EFI is not a unified kernel image"
done
ov=$(jq -r '.overlap | join(" ")' "$work/uki.json")
[ -z "$ov" ] || fail "UKI: PE sections overlap in memory ($ov; section alignment $(jq .section_alignment "$work/uki.json")): build it with systemd >= 254's stub"
cmdline=$(jq -r .cmdline "$work/uki.json")
read -r -a args <<<"$cmdline"
has() { local a; for a in "${args[@]}"; do [ "$a" = "$1" ] && return 0; done; return 1; }
val() { local a v=""; for a in "${args[@]}"; do case "$a" in "$1="*) v=${a#"$1="} ;; esac; done; printf '%s' "$v"; }
has ro || fail "UKI command line: no 'ro' (the root must be mounted read-only): $cmdline"
! has rw || fail "UKI command line: 'rw' makes the root writable: $cmdline"
has no_timer_check || fail "UKI command line: no 'no_timer_check' (a late timer interrupt on a loaded or emulated host panics the kernel at boot: podvm/mkosi.conf): $cmdline"
[ "$(val root)" = /dev/mapper/root ] || fail "UKI command line: root=$(val root), want root=/dev/mapper/root (the dm-verity device): the root is unverified"
roothash=$(val roothash)
[[ "$roothash" =~ ^[0-9a-f]{64}$ ]] || fail "UKI command line: no roothash= (64 hex digits): the root is unverified: $cmdline"
for a in "${args[@]}"; do
	case "$a" in
	systemd.verity=0 | systemd.verity=no | systemd.verity=false | rd.systemd.verity=*) fail "UKI command line: '$a' turns dm-verity off" ;;
	systemd.verity_root_options=*ignore-corruption* | systemd.verity_root_options=*ignore-zero-blocks*) fail "UKI command line: '$a' lets a changed block through" ;;
	init=* | rdinit=* | systemd.debug_shell* | rd.systemd.debug_shell* | systemd.unit=* | rd.systemd.unit=* | single | emergency | rescue | -b | systemd.setenv=* | rd.systemd.setenv=*)
		fail "UKI command line: '$a' can open a shell on the console" ;;
	esac
done
[ -f "$dir/podvm.roothash" ] || fail "no $dir/podvm.roothash"
[ "$(cat "$dir/podvm.roothash")" = "$roothash" ] || fail "UKI command line: roothash=$roothash, but the build recorded $(cat "$dir/podvm.roothash")"
for k in systemd.verity_root_data:$T_ROOT systemd.verity_root_hash:$T_VERITY; do
	want="PARTUUID=$(part "${k#*:}" uuid | tr '[:upper:]' '[:lower:]')"
	[ "$(val "${k%%:*}")" = "$want" ] || fail "UKI command line: ${k%%:*}=$(val "${k%%:*}"), but the GPT's partition is $want"
done

# --- The root: squashfs, verified. ----------------------------------------------
magic=$(head -c 4 "$work/root.img")
case "$magic" in
hsqs) ;;
*)
	if [ "$(od -An -j 1080 -N 2 -tx2 "$work/root.img" | tr -d ' ')" = ef53 ]; then
		fail "root: an ext4 file system: writable, not the read-only squashfs the verity root needs"
	fi
	fail "root: not a squashfs (magic '$(od -An -N 4 -c "$work/root.img" | tr -s ' ')')"
	;;
esac
veritysetup verify "$work/root.img" "$work/verity.img" "$roothash" >"$work/verity.txt" 2>&1 ||
	fail "root: dm-verity does not verify the root partition against the UKI's root hash $roothash ($(tr '\n' ' ' <"$work/verity.txt")): the booted VM would refuse it"
unsquashfs -d '' -lln "$work/root.img" >"$work/root.list" 2>/dev/null || fail "root: unsquashfs cannot list it"
# ls_root DIR: the names in DIR; cat_root FILE: its content; link_root PATH: a symlink's target.
ls_root() { awk -v d="$1/" '{p=$6; if (index(p, d) == 1) {r=substr(p, length(d)+1); if (r != "" && index(r, "/") == 0) print r}}' "$work/root.list"; }
cat_root() { unsquashfs -cat "$work/root.img" "$1" 2>/dev/null; }
link_root() { awk -v p="$1" '$6 == p && $7 == "->" {print $8}' "$work/root.list"; }
type_root() { awk -v p="$1" '$6 == p {print substr($1, 1, 1)}' "$work/root.list"; }

mods=$(ls_root "/usr/lib/modules/$kver/updates/dkms")
for m in nvidia-current.ko nvidia-current-uvm.ko nvidia-current-modeset.ko; do
	grep -qx "$m" <<<"$mods" || fail "root fs: /usr/lib/modules/$kver/updates/dkms/$m missing (have: $(echo "$mods" | tr '\n' ' '))"
done
grep -q '^updates/dkms/nvidia-current.ko' <<<"$(cat_root "/usr/lib/modules/$kver/modules.dep")" ||
	fail "root fs: nvidia-current.ko not in modules.dep (depmod not run after restoring the modules)"
# The module loads GSP firmware from this path (modinfo firmware=); Turing is tu10x.
fwver=${driver%%-*}
grep -qx gsp_tu10x.bin <<<"$(ls_root "/usr/lib/firmware/nvidia/$fwver")" ||
	fail "root fs: /usr/lib/firmware/nvidia/$fwver/gsp_tu10x.bin missing (firmware-nvidia-gsp)"
src=$(ls_root /usr/src)
[ -z "$src" ] || fail "root fs: /usr/src still holds: $src (headers must be removed)"
for f in gpu-init podvm-notice podvm-cache-mirror podvm-cache-store nvidia-ctk nvidia-cdi-hook tpm2_pcrextend tpm2_pcrread; do
	grep -qx "$f" <<<"$(ls_root /usr/bin)" || fail "root fs: /usr/bin/$f missing"
done
wants=$(ls_root /etc/systemd/system/multi-user.target.wants)
for u in caa-gcp-t4-gpu-init.service caa-gcp-t4-slots.service 'netns@podns.service' 'run-kata\x2dcontainers.mount' \
	process-user-data.service attestation-agent.service confidential-data-hub.service kata-agent.path \
	caa-gcp-t4-cdh-check.service agent-protocol-forwarder.path api-server-rest.service \
	caa-gcp-t4-notice.socket caa-gcp-t4-notice.service caa-gcp-t4-layer-sweep.service; do
	grep -qxF "$u" <<<"$wants" || fail "root fs: $u not enabled"
done
# The cache mirror starts only where the cache disk is (udev wants it on the
# disk's label); no boot waits for a disk it may not have.
! grep -qxF caa-gcp-t4-cache-mirror.service <<<"$wants" || fail "root fs: caa-gcp-t4-cache-mirror.service is enabled; only udev's rule on the cache disk's label may start it"
grep -q 'ENV{ID_FS_LABEL}=="caa-gcp-t4-cache", .*ENV{SYSTEMD_WANTS}+="caa-gcp-t4-cache-mirror.service"' <<<"$(cat_root /usr/lib/udev/rules.d/70-caa-gcp-t4-cache.rules)" ||
	fail "root fs: no udev rule starting the cache mirror on the cache disk's label (/usr/lib/udev/rules.d/70-caa-gcp-t4-cache.rules)"
! grep -qxF caa-gcp-t4-cache-store.service <<<"$wants" || fail "root fs: caa-gcp-t4-cache-store.service is enabled; only udev's rule on the cache disk's label may start it"
grep -q 'ENV{ID_FS_LABEL}=="caa-gcp-t4-cache", .*ENV{SYSTEMD_WANTS}+="caa-gcp-t4-cache-store.service"' <<<"$(cat_root /usr/lib/udev/rules.d/70-caa-gcp-t4-cache.rules)" ||
	fail "root fs: no udev rule starting caa-gcp-t4-cache-store.service on the cache disk's label"
# The disk is read only through dm-verity with the admin's root hash: the
# mount's device is the verity device the open unit attaches, never the
# raw disk, and udev's rule never takes the verity device for the disk.
! grep -qxF caa-gcp-t4-cache-open.service <<<"$wants" || fail "root fs: caa-gcp-t4-cache-open.service is enabled; only the cache mount may pull it in"
# (Each file is read whole before grep: grep -q on a pipe ends it at the
# first match, and pipefail would then fail a check that matched.)
# unsquashfs takes a name as a pattern: a backslash in it is written twice.
grep -qx 'What=/dev/mapper/caa-gcp-t4-cache' <<<"$(cat_root '/usr/lib/systemd/system/run-caa\\x2dgcp\\x2dt4-cache.mount')" ||
	fail "root fs: the cache mount does not read the dm-verity device /dev/mapper/caa-gcp-t4-cache"
grep -qx 'Requires=caa-gcp-t4-cache-open.service' <<<"$(cat_root '/usr/lib/systemd/system/run-caa\\x2dgcp\\x2dt4-cache.mount')" ||
	fail "root fs: the cache mount does not require caa-gcp-t4-cache-open.service (dm-verity)"
grep -q 'KERNEL!="dm-\*", ENV{ID_FS_LABEL}=="caa-gcp-t4-cache", SYMLINK+="caa-gcp-t4-cache-raw"' <<<"$(cat_root /usr/lib/udev/rules.d/70-caa-gcp-t4-cache.rules)" ||
	fail "root fs: the cache disk's udev rule does not link the raw disk (not dm-*) as /dev/caa-gcp-t4-cache-raw"
# The guest-components commit podvm-cache-store checks a store against is the
# pinned CDH's (build.sh writes it from podvm/guest-artefacts.pins).
pinned=$(awk '$1 == "confidential-data-hub" {print $2}' "$(dirname "$0")/../guest-artefacts.pins")
pinned=${pinned##*:}
pinned=${pinned%%-*}
[ "$(cat_root /usr/lib/caa-gcp-t4/guest-components)" = "$pinned" ] ||
	fail "root fs: /usr/lib/caa-gcp-t4/guest-components is '$(cat_root /usr/lib/caa-gcp-t4/guest-components)', the pinned CDH is guest-components $pinned"
# kata-agent is started by kata-agent.path on CDH's socket, never by the boot.
! grep -qxF kata-agent.service <<<"$wants" || fail "root fs: kata-agent.service is enabled; only kata-agent.path (on CDH's socket) may start it"
pcr_units="systemd-pcrmachine.service systemd-pcrfs-root.service systemd-pcrfs@.service systemd-pcrphase@.service systemd-pcrphase-initrd.service systemd-pcrphase-sysinit.service systemd-pcrphase.service"
for u in $pcr_units; do
	[ "$(link_root "/etc/systemd/system/$u")" = /dev/null ] || fail "root fs: $u is not masked (upstream masks systemd's PCR units)"
done
# No shell and nothing around dm-verity: gettys, debug-shell and sysext
# masked; the emergency and rescue units report and power off instead.
for u in getty@.service serial-getty@.service console-getty.service debug-shell.service systemd-sysext.service; do
	[ "$(link_root "/etc/systemd/system/$u")" = /dev/null ] || fail "root fs: $u is not masked"
done
for u in emergency rescue; do
	grep -qx "ExecStart=/usr/lib/caa-gcp-t4/boot-failed $u" <<<"$(cat_root "/usr/lib/systemd/system/$u.service.d/caa-gcp-t4.conf")" ||
		fail "root fs: $u.service still starts a shell (no caa-gcp-t4.conf drop-in running boot-failed)"
done
grep -qx 'ExecStartPost=/usr/lib/caa-gcp-t4/measure-initdata' <<<"$(cat_root /usr/lib/systemd/system/process-user-data.service)" ||
	fail "root fs: process-user-data.service does not measure the initdata digest (ExecStartPost=/usr/lib/caa-gcp-t4/measure-initdata)"
[ "$(type_root /usr/lib/caa-gcp-t4/measure-initdata)" = - ] || fail "root fs: /usr/lib/caa-gcp-t4/measure-initdata missing"
# The fallback stub mkosi built the UKI from is not left in the root.
[ -z "$(ls_root /usr/lib/systemd/boot/efi)" ] || fail "root fs: /usr/lib/systemd/boot/efi still holds the UKI stub"

# Every binary no Debian package installed is in the manifest with a version
# and the sha256 of the file on the disk, and nothing unlisted sits in the slots.
nb=$(jq -r '."caa-gcp-t4".binaries // [] | length' "$manifest")
for n in gpu-init podvm-notice podvm-cache-mirror podvm-cache-store nvidia-ctk nvidia-cdi-hook; do
	jq -e --arg n "$n" '."caa-gcp-t4".binaries[]? | select(.name == $n)' "$manifest" >/dev/null ||
		fail "manifest: no caa-gcp-t4 binaries entry for $n"
done
while IFS=$'\t' read -r n sum ver path; do
	[[ "$sum" =~ ^[0-9a-f]{64}$ ]] || fail "manifest: $n has sha256 '$sum'"
	case "$ver" in "" | unknown | *unknown*) fail "manifest: $n has version '$ver'" ;; esac
	got=$(cat_root "$path" | sha256sum | cut -c1-64)
	[ "$got" = "$sum" ] || fail "root fs: $path has sha256 $got, the manifest says $sum"
done < <(jq -r '."caa-gcp-t4".binaries[] | [.name, .sha256, .version, .path] | @tsv' "$manifest")
for f in $(ls_root /usr/local/bin); do
	jq -e --arg p "/usr/local/bin/$f" '."caa-gcp-t4".binaries[] | select(.path == $p)' "$manifest" >/dev/null ||
		fail "root fs: /usr/local/bin/$f is not in the manifest's caa-gcp-t4 binaries"
done

# The image's kind, in the three places it is recorded, agreeing; a
# production image has the four programs a pod needs (build.sh refuses
# one without them, stage-binaries.sh).
kind=$(jq -r '."caa-gcp-t4".image_kind // "absent"' "$manifest")
case "$kind" in production | test) ;; *) fail "manifest: caa-gcp-t4.image_kind is '$kind', want production or test" ;; esac
[ "$(cat_root /usr/lib/caa-gcp-t4/image-kind)" = "$kind" ] || fail "root fs: /usr/lib/caa-gcp-t4/image-kind is '$(cat_root /usr/lib/caa-gcp-t4/image-kind)', the manifest says $kind"
variant=$(cat_root /usr/lib/os-release | sed -n 's/^VARIANT_ID=//p')
want_variant=caa-gcp-t4-podvm
[ "$kind" = production ] || want_variant=caa-gcp-t4-podvm-test
[ "$variant" = "$want_variant" ] || fail "root fs: os-release VARIANT_ID is '$variant', want $want_variant for a $kind image"
if [ "$kind" = production ]; then
	for n in kata-agent agent-protocol-forwarder process-user-data confidential-data-hub; do
		jq -e --arg p "/usr/local/bin/$n" '."caa-gcp-t4".binaries[] | select(.path == $p)' "$manifest" >/dev/null ||
			fail "manifest: a production image without $n"
	done
fi

# The guest contract: the pause bundle, the agent's default policy (a
# symlink into /run/peerpod, replaced by initdata).
for f in config.json rootfs/pause; do
	[ "$(type_root "/pause_bundle/$f")" = - ] || fail "root fs: /pause_bundle/$f missing"
done
jq -e '.process.args[0] == "/pause"' <(cat_root /pause_bundle/config.json) >/dev/null ||
	fail "root fs: /pause_bundle/config.json does not run /pause"
link=$(link_root /etc/kata-opa/default-policy.rego)
[ "$link" = /run/peerpod/policy.rego ] || fail "root fs: /etc/kata-opa/default-policy.rego is not a symlink to /run/peerpod/policy.rego (${link:-not a symlink})"
grep -qx allow-all.rego <<<"$(ls_root /etc/kata-opa)" || fail "root fs: /etc/kata-opa/allow-all.rego missing"

# --- The state partition: ext4, seeded with /var, mounted on /var. -------------
[ "$(od -An -j 1080 -N 2 -tx2 "$work/state.img" | tr -d ' ')" = ef53 ] || fail "state: the last partition is not ext4"
grep -q 'Type: directory' <<<"$(debugfs -R "stat /lib/kata-containers" "$work/state.img" 2>/dev/null)" ||
	fail "state: no /lib/kata-containers (/var/lib/kata-containers, the /run/kata-containers bind-mount source)"
fstab=$(cat_root /etc/fstab)
state_uuid=$(part $T_GENERIC uuid | tr '[:upper:]' '[:lower:]')
grep -Eq "^PARTUUID=${state_uuid}[[:space:]]+/var[[:space:]]+ext4[[:space:]].*x-systemd\.growfs" <<<"$fstab" ||
	fail "root fs: /etc/fstab does not mount the state partition (PARTUUID=$state_uuid) on /var with x-systemd.growfs"
grep -Eq '^tmpfs[[:space:]]+/tmp[[:space:]]+tmpfs[[:space:]]' <<<"$fstab" ||
	fail "root fs: /etc/fstab mounts no tmpfs on /tmp (the root is read-only: units with PrivateTmp=, systemd-resolved's among them, fail)"
if grep -Eq '^[^#[:space:]]+[[:space:]]+/[[:space:]]' <<<"$fstab"; then
	fail "root fs: /etc/fstab has a line for / (the root is the dm-verity device, read-only)"
fi

# --- Signatures. ---------------------------------------------------------------
uki_signed=$(jq -r .signed "$work/uki.json")
if [ "$signed" = true ]; then
	cert=$dir/podvm.db.crt
	[ -f "$cert" ] || fail "signatures: the manifest says signed but there is no podvm.db.crt"
	[ "$(openssl x509 -in "$cert" -outform DER | sha256sum | cut -c1-64)" = "$(jq -r '."caa-gcp-t4".secure_boot.certificate.sha256_der' "$manifest")" ] ||
		fail "signatures: podvm.db.crt is not the certificate the manifest names"
	[ "$uki_signed" = true ] || fail "signatures: the manifest says signed but the UKI on the ESP carries no signature"
	sbverify --cert "$cert" "$work/bootx64.efi" >"$work/sbverify.txt" 2>&1 ||
		fail "signatures: the UKI does not verify against podvm.db.crt: $(tr '\n' ' ' <"$work/sbverify.txt")"
	while read -r m; do
		cat_root "/usr/lib/modules/$kver/updates/dkms/$m" >"$work/mod.ko"
		/usr/bin/python3 - "$work/mod.ko" "$work/mod.content" "$work/mod.p7" <<'PY' || fail "signatures: $m: $(cat "$work/mod.err")"
import struct, sys
# The kernel's module signature: PKCS#7 DER, then struct module_signature
# (12 bytes, the signature length big-endian last), then the magic string.
data = open(sys.argv[1], "rb").read()
magic = b"~Module signature appended~\n"
err = open(sys.argv[1].rsplit("/", 1)[0] + "/mod.err", "w")
if not data.endswith(magic):
    err.write("no module signature"); sys.exit(1)
info = data[-len(magic) - 12 : -len(magic)]
id_type, sig_len = info[2], struct.unpack(">I", info[8:12])[0]
if id_type != 2:
    err.write("signature id type %d, not PKCS#7" % id_type); sys.exit(1)
end = len(data) - len(magic) - 12
open(sys.argv[2], "wb").write(data[: end - sig_len])
open(sys.argv[3], "wb").write(data[end - sig_len : end])
PY
		openssl cms -verify -binary -inform DER -in "$work/mod.p7" -content "$work/mod.content" -certfile "$cert" -nointern -noverify -out /dev/null >"$work/cms.txt" 2>&1 ||
			fail "signatures: $m is not signed by podvm.db.crt's key: $(tr '\n' ' ' <"$work/cms.txt")"
	done < <(grep '\.ko$' <<<"$mods")
	jq -e '.signed == true' <(cat_root /usr/lib/caa-gcp-t4/nvidia-modules.json) >/dev/null || fail "signatures: nvidia-modules.json does not record the modules as signed"
	sigstate="signed: UKI and $(grep -c '\.ko$' <<<"$mods") modules verify against $(openssl x509 -in "$cert" -noout -subject -nameopt RFC2253 | sed 's/^subject=//')"
else
	[ "$uki_signed" = false ] || fail "signatures: the manifest says unsigned but the UKI carries a signature"
	sigstate="UNSIGNED (manifest says so): boot with Secure Boot off"
fi

# --- The initrd: no build-time files, no shell on failure. ---------------------
if [ -f "$dir/podvm.initrd" ]; then
	zstdcat "$dir/podvm.initrd" | cpio -t --quiet 2>/dev/null | sed 's|^\./||' >"$work/initrd.list" || true
	left=$(grep -E '^var/(log|cache)/.' "$work/initrd.list" || true)
	[ -z "$left" ] || fail "initrd: build-time files left: $(echo "$left" | tr '\n' ' ')"
	for f in usr/lib/systemd/system/emergency.service.d/caa-gcp-t4.conf usr/lib/systemd/system/rescue.service.d/caa-gcp-t4.conf usr/lib/caa-gcp-t4/boot-failed; do
		grep -qx "$f" "$work/initrd.list" || fail "initrd: $f missing (a failed boot would stop at a shell prompt)"
	done
	grep -qx usr/lib/udev/rules.d/99-zz-caa-gcp-t4-verity-root.rules "$work/initrd.list" ||
		fail "initrd: no verity-root udev rule (a corrupted root would wait out the 90 s device timeout)"
	for u in $pcr_units; do
		grep -qx "etc/systemd/system/$u" "$work/initrd.list" || fail "initrd: $u is not masked (upstream masks systemd's PCR units in the initrd too)"
	done
fi
echo "check-image: ok: kernel $kver, NVIDIA $driver, persistenced $persistenced, $kind image, $nb non-Debian binaries with versions and sha256, pause bundle, agent policy, modules $(echo "$mods" | grep -c '\.ko') in updates/dkms, GSP firmware, headers removed; ESP with the UKI only, no menu; command line ro root=/dev/mapper/root roothash=${roothash:0:12}…; squashfs root verified by dm-verity; state partition last; $sigstate" >&2
