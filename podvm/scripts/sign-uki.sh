#!/usr/bin/env bash
# Signs a built podVM's UKI for UEFI Secure Boot and puts the signed UKI in
# the disk's ESP, in place of the unsigned one mkosi wrote:
#   sign-uki.sh <podvm dir> <key.pem> <cert.pem>
# <dir>/podvm.efi is replaced by the signed UKI and <dir>/podvm.raw's
# /EFI/BOOT/BOOTX64.EFI by the same bytes; <dir>/podvm.db.crt (PEM) and
# podvm.db.der get the certificate, for the VM's signature database (db).
#
# osslsigncode, not mkosi's sbsign: sbsign stamps the current time into the
# signature's signed attributes, so two builds of the same inputs would
# differ in the UKI, the ESP and the disk. osslsigncode -time sets that
# signing time to SOURCE_DATE_EPOCH, and an RSA PKCS#1 v1.5 signature is a
# function of the key and the data only: same inputs, same bits. The result
# is checked with sbverify (the tool Debian's signing tooling uses) against
# the certificate, and the ESP is read back and compared.
set -euo pipefail
dir=$1
key=$2
cert=$3
epoch=${SOURCE_DATE_EPOCH:-1704067200}
fail() { echo "sign-uki: $*" >&2; exit 1; }
uki=$dir/podvm.efi
raw=$dir/podvm.raw
[ -f "$uki" ] || fail "no $uki"
[ -f "$raw" ] || fail "no $raw"
work=$(mktemp -d "$dir/.sign-uki.XXXXXX")
trap 'rm -rf "$work"' EXIT

osslsigncode sign -certs "$cert" -key "$key" -h sha256 -time "$epoch" -in "$uki" -out "$work/signed.efi" >"$work/log" 2>&1 ||
	{ cat "$work/log" >&2; fail "osslsigncode could not sign $uki"; }
sbverify --cert "$cert" "$work/signed.efi" >"$work/verify" 2>&1 ||
	{ cat "$work/verify" >&2; fail "the signed UKI does not verify against $cert"; }

# The ESP, found by its GPT type, holds the UKI as the fallback loader;
# mcopy overwrites it in place (the same bytes in gives the same FAT out),
# dated SOURCE_DATE_EPOCH like everything else in the image.
json=$(sfdisk -J "$raw")
ssz=$(jq -r '.partitiontable.sectorsize // 512' <<<"$json")
estart=$(jq -r '.partitiontable.partitions[] | select(.type == "C12A7328-F81F-11D2-BA4B-00A0C93EC93B") | .start' <<<"$json")
[ -n "$estart" ] || fail "no ESP in $raw"
esp="$raw@@$((estart * ssz))"
export MTOOLS_SKIP_CHECK=1
mcopy -n -i "$esp" ::/EFI/BOOT/BOOTX64.EFI "$work/on-esp.efi" 2>/dev/null || fail "ESP: no /EFI/BOOT/BOOTX64.EFI"
cmp -s "$work/on-esp.efi" "$uki" || fail "ESP: /EFI/BOOT/BOOTX64.EFI is not $uki (mkosi's UKI); refusing to replace it"
touch -d "@$epoch" "$work/signed.efi"
mcopy -o -m -i "$esp" "$work/signed.efi" ::/EFI/BOOT/BOOTX64.EFI
rm -f "$work/on-esp.efi"
mcopy -n -i "$esp" ::/EFI/BOOT/BOOTX64.EFI "$work/on-esp.efi"
cmp -s "$work/on-esp.efi" "$work/signed.efi" || fail "ESP: the UKI read back differs from the signed one"
mv "$work/signed.efi" "$uki"
openssl x509 -in "$cert" -outform PEM -out "$dir/podvm.db.crt"
openssl x509 -in "$cert" -outform DER -out "$dir/podvm.db.der"
echo "sign-uki: signed $uki and the ESP's /EFI/BOOT/BOOTX64.EFI ($(openssl x509 -in "$cert" -noout -subject))" >&2
