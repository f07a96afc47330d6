#!/usr/bin/env bash
# Shows that podvm/scripts/check-image.sh rejects what it must: runs it on a
# built image with a doctored package manifest or initrd (the disk shared
# through a symlink, never modified) or on a sparse copy of the disk with a
# file planted in its ESP (a boot menu, a random seed), a UKI whose command
# line mounts the root writable, a changed root block, or a UKI signed with
# another key or not at all; and (signed images, with the image's key at
# hand) a root, re-made to verify, whose NVIDIA module another key signed.
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
# linked DEST: the image's files linked (the manifest is for the case to write).
linked() {
	local f
	mkdir -p "$1"
	for f in "$dir"/podvm.*; do
		case "${f##*/}" in podvm.manifest | podvm.initrd) ;; *) ln -s "$f" "$1/${f##*/}" ;; esac
	done
}
# copied NAME: a sparse copy of the disk, the UKI and the manifest.
copied() {
	linked "$work/$1"
	rm "$work/$1/podvm.raw" "$work/$1/podvm.efi"
	cp --sparse=always "$dir/podvm.raw" "$work/$1/podvm.raw"
	cp "$dir/podvm.efi" "$dir/podvm.manifest" "$work/$1/"
}
esp_of() { echo "$1@@$(($(sfdisk -J "$1" | jq -r '.partitiontable.partitions[] | select(.type == "C12A7328-F81F-11D2-BA4B-00A0C93EC93B") | .start') * 512))"; }
# put_uki NAME FILE: FILE becomes the copy's UKI, on its ESP and as podvm.efi.
put_uki() {
	MTOOLS_SKIP_CHECK=1 mcopy -o -i "$(esp_of "$work/$1/podvm.raw")" "$2" ::/EFI/BOOT/BOOTX64.EFI
	cp "$2" "$work/$1/podvm.efi"
}
case_() { # name, jq filter, expected message fragment
	linked "$work/$1"
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
# The cache disk's dm-verity needs veritysetup and device-mapper's udev rules.
case_ no-veritysetup 'del(.packages[] | select(.name == "cryptsetup-bin"))' "cryptsetup-bin missing"
case_ no-dm-rules 'del(.packages[] | select(.name == "dmsetup"))' "dmsetup missing"
case_ gpu-init-other-sha '(."caa-gcp-t4".binaries[] | select(.name == "gpu-init") | .sha256) |= ("0" * 64)' "/usr/bin/gpu-init has sha256"
# An initrd that still carries a build-time log (the real disk, a made-up initrd).
mkdir -p "$work/initrd/tree/var/log" "$work/initrd/out"
echo "install dkms" >"$work/initrd/tree/var/log/dpkg.log"
linked "$work/initrd/out"
cp "$dir/podvm.manifest" "$work/initrd/out/"
(cd "$work/initrd/tree" && find . | cpio -o -H newc --quiet) | zstd -q >"$work/initrd/out/podvm.initrd"
refused initrd/out "initrd: build-time files left: var/log/dpkg.log"

case_ says-unsigned '."caa-gcp-t4".secure_boot.signed = false' "the manifest says unsigned but the UKI carries a signature"

# Sparse copies of the disk, changed; the original is never written.
# An ESP with a boot menu (systemd-boot's loader.conf, editable), then one
# with a random seed again.
copied menu
printf 'timeout 5\neditor yes\n' >"$work/loader.conf"
MTOOLS_SKIP_CHECK=1 mmd -i "$(esp_of "$work/menu/podvm.raw")" ::/loader
MTOOLS_SKIP_CHECK=1 mcopy -i "$(esp_of "$work/menu/podvm.raw")" "$work/loader.conf" ::/loader/loader.conf
refused menu "ESP: want only /EFI/BOOT/BOOTX64.EFI (the UKI), found: /EFI/BOOT/BOOTX64.EFI /loader/loader.conf"
rm -rf "$work/menu"
copied seed
head -c 32 /dev/urandom >"$work/random-seed"
MTOOLS_SKIP_CHECK=1 mmd -i "$(esp_of "$work/seed/podvm.raw")" ::/loader
MTOOLS_SKIP_CHECK=1 mcopy -i "$(esp_of "$work/seed/podvm.raw")" "$work/random-seed" ::/loader/random-seed
refused seed "/loader/random-seed"
rm -rf "$work/seed"

# edit_cmdline NAME FROM TO: the UKI with FROM replaced by TO (the same
# length, in place) on its command line, put on copy NAME's ESP.
edit_cmdline() {
	/usr/bin/python3 - "$dir/podvm.efi" "$work/$1.efi" "$2" "$3" <<'PY'
import sys, pefile
pe = pefile.PE(sys.argv[1], fast_load=True)
data = bytearray(open(sys.argv[1], "rb").read())
s = next(s for s in pe.sections if s.Name.rstrip(b"\0") == b".cmdline")
off, n = s.PointerToRawData, s.SizeOfRawData
cmd, old, new = bytes(data[off:off + n]), sys.argv[3].encode(), sys.argv[4].encode()
assert old in cmd and len(old) == len(new), cmd
data[off:off + n] = cmd.replace(old, new, 1)
open(sys.argv[2], "wb").write(data)
PY
	put_uki "$1" "$work/$1.efi"
}

# A UKI whose command line says rw instead of ro.
copied rw
edit_cmdline rw " ro " " rw "
refused rw "UKI command line: no 'ro'"
rm -rf "$work/rw"

# A UKI whose command line lacks no_timer_check (renamed): the boot panics
# on a loaded or emulated host.
copied timer
edit_cmdline timer no_timer_check no_timer_chekk
refused timer "UKI command line: no 'no_timer_check'"
rm -rf "$work/timer"

# One changed byte in the middle of the root partition.
copied block
read -r rstart rsize < <(sfdisk -J "$work/block/podvm.raw" | jq -r '.partitiontable.partitions[] | select(.type == "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709") | "\(.start) \(.size)"')
off=$(((rstart + rsize / 2) * 512 + 100))
/usr/bin/python3 -c 'import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 1]))' "$work/block/podvm.raw" "$off"
refused block "root: dm-verity does not verify the root partition"
rm -rf "$work/block"

# The UKI signed with another key, then with no signature at all.
openssl req -new -x509 -newkey rsa:2048 -nodes -sha256 -days 1 -subj "/CN=check-image-test other key/" \
	-keyout "$work/other.key" -out "$work/other.crt" 2>/dev/null
copied otherkey
osslsigncode remove-signature -in "$dir/podvm.efi" -out "$work/bare.efi" >/dev/null
osslsigncode sign -certs "$work/other.crt" -key "$work/other.key" -h sha256 -in "$work/bare.efi" -out "$work/other.efi" >/dev/null
put_uki otherkey "$work/other.efi"
refused otherkey "the UKI does not verify against podvm.db.crt"
put_uki otherkey "$work/bare.efi"
refused otherkey "the manifest says signed but the UKI on the ESP carries no signature"
rm -rf "$work/otherkey"
# An NVIDIA module signed by another key, in a root that is otherwise sound:
# the module re-signed as the kernel's sign-file signs (CMS, detached, no
# certificates, no attributes, sha256), the squashfs and its hash tree made
# again, the disk laid out again around them (same partition types, UUIDs
# and read-only flags; the ESP and state partition copied), the new root
# hash on the UKI's command line, and the UKI signed again with the image's
# own key (PODVM_SB_KEY/PODVM_SB_CERT, as run.sh exports them): dm-verity
# and the UKI verify, the module's signature must not.
if [ -n "${PODVM_SB_KEY:-}" ] && [ -n "${PODVM_SB_CERT:-}" ] && [ -f "$dir/podvm.db.crt" ]; then
	m=$work/modsig
	copied modsig
	mkdir -p "$m/w"
	json=$(sfdisk -J "$dir/podvm.raw")
	pr() { jq -r --arg t "$1" ".partitiontable.partitions[] | select(.type == \$t) | .$2" <<<"$json"; }
	T_ESP=C12A7328-F81F-11D2-BA4B-00A0C93EC93B T_ROOT=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709
	T_VERITY=2C7357ED-EBD2-46D9-AEC1-23D437EC2BF5 T_STATE=0FC63DAF-8483-4772-8E79-3D69D8477DE4
	for t in $T_ESP $T_ROOT $T_STATE; do
		dd if="$dir/podvm.raw" of="$m/w/$t.img" bs=512 skip="$(pr "$t" start)" count="$(pr "$t" size)" conv=sparse status=none
	done
	unsquashfs -q -d "$m/w/tree" "$m/w/$T_ROOT.img" >/dev/null
	kver=$(ls "$m/w/tree/usr/lib/modules")
	ko=$m/w/tree/usr/lib/modules/$kver/updates/dkms/nvidia-current.ko
	openssl req -new -x509 -newkey rsa:2048 -nodes -sha256 -days 1 -subj "/CN=check-image-test module key/" \
		-keyout "$m/w/mod.key" -out "$m/w/mod.crt" 2>/dev/null
	/usr/bin/python3 - "$ko" "$m/w/content" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
magic = b"~Module signature appended~\n"
assert data.endswith(magic), "module not signed"
sig_len = int.from_bytes(data[-len(magic) - 4 : -len(magic)], "big")
open(sys.argv[2], "wb").write(data[: len(data) - len(magic) - 12 - sig_len])
PY
	openssl cms -sign -binary -noattr -nosmimecap -nocerts -md sha256 -signer "$m/w/mod.crt" -inkey "$m/w/mod.key" \
		-outform DER -in "$m/w/content" -out "$m/w/sig.p7"
	/usr/bin/python3 - "$m/w/content" "$m/w/sig.p7" "$ko" <<'PY'
import struct, sys
content, sig = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
# struct module_signature: algo, hash, id_type (2: PKCS#7), signer_len,
# key_id_len, 3 bytes pad, sig_len (big-endian).
info = struct.pack(">BBBBB3xI", 0, 0, 2, 0, 0, len(sig))
open(sys.argv[3], "wb").write(content + sig + info + b"~Module signature appended~\n")
PY
	mksquashfs "$m/w/tree" "$m/w/root.sq" -noappend -quiet -no-progress -comp zstd -b 131072 >/dev/null
	roothash=$(veritysetup format "$m/w/root.sq" "$m/w/root.verity" --format=1 --hash=sha256 --data-block-size=4096 --hash-block-size=4096 |
		sed -n 's/^Root hash:[[:space:]]*\([0-9a-f]\{64\}\)$/\1/p')
	sectors() { local b blocks; b=$(stat -c %s "$1"); blocks=$(((b + 4095) / 4096)); echo $((blocks * 8)); }
	mib() { echo $((($1 + 2047) / 2048 * 2048)); } # sfdisk aligns each partition to 1 MiB
	rm -f "$m/podvm.raw"
	truncate -s $(((2048 + $(mib "$(pr $T_ESP size)") + $(mib "$(sectors "$m/w/root.sq")") + $(mib "$(sectors "$m/w/root.verity")") + $(mib "$(pr $T_STATE size)") + 2048) * 512)) "$m/podvm.raw"
	{
		echo "label: gpt"
		for t in $T_ESP $T_ROOT $T_VERITY $T_STATE; do
			case "$t" in "$T_ROOT") size=$(sectors "$m/w/root.sq") ;; "$T_VERITY") size=$(sectors "$m/w/root.verity") ;; *) size=$(pr "$t" size) ;; esac
			printf 'size=%s, type=%s, uuid=%s, name="%s"%s\n' "$size" "$t" "$(pr "$t" uuid)" "$(pr "$t" name)" "$(a=$(pr "$t" attrs); [ "$a" = null ] || printf ', attrs="%s"' "$a")"
		done
	} | sfdisk -q "$m/podvm.raw" >/dev/null
	nj=$(sfdisk -J "$m/podvm.raw")
	for f in "$T_ESP:$m/w/$T_ESP.img" "$T_ROOT:$m/w/root.sq" "$T_VERITY:$m/w/root.verity" "$T_STATE:$m/w/$T_STATE.img"; do
		start=$(jq -r --arg t "${f%%:*}" '.partitiontable.partitions[] | select(.type == $t) | .start' <<<"$nj")
		dd if="${f#*:}" of="$m/podvm.raw" bs=512 seek="$start" conv=notrunc,sparse status=none
	done
	# The new root hash on the UKI's command line (same length, in place),
	# the UKI signed again with the image's key.
	osslsigncode remove-signature -in "$dir/podvm.efi" -out "$m/w/bare.efi" >/dev/null
	/usr/bin/python3 - "$m/w/bare.efi" "$m/w/new.efi" "$(cat "$dir/podvm.roothash")" "$roothash" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
old, new = sys.argv[3].encode(), sys.argv[4].encode()
assert data.count(old) == 1, "root hash not once in the UKI"
open(sys.argv[2], "wb").write(data.replace(old, new))
PY
	osslsigncode sign -certs "$PODVM_SB_CERT" -key "$PODVM_SB_KEY" -h sha256 -in "$m/w/new.efi" -out "$m/w/signed.efi" >/dev/null
	put_uki modsig "$m/w/signed.efi"
	rm "$m/podvm.roothash"
	echo "$roothash" >"$m/podvm.roothash"
	rm -rf "$m/w"
	refused modsig "signatures: nvidia-current.ko is not signed by podvm.db.crt's key"
	rm -rf "$m"
fi
echo "check-image-test: ok ($n cases)"
