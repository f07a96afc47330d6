#!/usr/bin/env bash
# Packs a built podVM for Compute Engine and prints (or runs) the commands
# that upload it and create the image. GCE wants a gzip'd tar holding one
# file named disk.raw, in the oldgnu tar format, whose size is a whole
# number of GiB.
#   gce-pack.sh <podvm dir> [output dir]
# Environment: GCE_IMAGE_NAME, GCE_BUCKET (gs://…), GCE_PROJECT,
#   GCE_IMAGE_FAMILY (default caa-gcp-t4-podvm), GCE_EXECUTE=1 to run them.
set -euo pipefail
dir=$1
out=${2:-$dir}
raw=$dir/podvm.raw
[ -f "$raw" ] || { echo "gce-pack: no $raw: run make podvm first" >&2; exit 1; }
# Only a production image goes to Compute Engine: a test image (stand-ins
# or empty guest slots, PODVM_IMAGE_KIND=test) boots and runs no pod.
kind=$(jq -r '."caa-gcp-t4".image_kind // "unknown"' "$dir/podvm.manifest" 2>/dev/null || echo unknown)
if [ "$kind" != production ]; then
	echo "gce-pack: $dir is a $kind image (podvm.manifest \"caa-gcp-t4\".image_kind), not a production one: refusing to pack it for upload. Build one with make podvm-binaries, then make podvm (docs/podvm-build-guide.md)" >&2
	exit 1
fi
mkdir -p "$out"

work=$(mktemp -d "$out/.gce-pack.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp --sparse=always "$raw" "$work/disk.raw"
gib=$((1024 * 1024 * 1024))
size=$(stat -c %s "$work/disk.raw")
rounded=$(( (size + gib - 1) / gib * gib ))
if [ "$rounded" -ne "$size" ]; then
	# Growing the file moves the backup GPT header away from the end; fix it
	# so firmware and the kernel see a consistent table.
	truncate -s "$rounded" "$work/disk.raw"
	if ! msg=$(sfdisk --relocate gpt-bak-std "$work/disk.raw" 2>&1); then
		echo "gce-pack: moving the backup GPT header failed: $msg" >&2
		exit 1
	fi
	sfdisk --verify "$work/disk.raw" >/dev/null || { echo "gce-pack: GPT does not verify after padding" >&2; exit 1; }
fi
# Fixed owner and mtime keep the tarball's metadata independent of the host.
tar --format=oldgnu --sparse --owner=0 --group=0 --numeric-owner \
	--mtime=@"${SOURCE_DATE_EPOCH:-1704067200}" -C "$work" -cf - disk.raw |
	gzip -n --fast >"$work/disk.tar.gz"
mv "$work/disk.tar.gz" "$out/podvm-gce.tar.gz"
sha=$(sha256sum "$out/podvm-gce.tar.gz" | cut -d' ' -f1)

key=$(jq -r '.key // "dev"' "$dir/build-info.json" 2>/dev/null || echo dev)
name=${GCE_IMAGE_NAME:-caa-gcp-t4-podvm-$key}
bucket=${GCE_BUCKET:-gs://YOUR_BUCKET}
family=${GCE_IMAGE_FAMILY:-caa-gcp-t4-podvm}
project=${GCE_PROJECT:+--project=$GCE_PROJECT}
# UEFI_COMPATIBLE: boots only through UEFI (no BIOS path in the image).
# GVNIC: the cloud kernel has the gve driver.
features=UEFI_COMPATIBLE,GVNIC,VIRTIO_SCSI_MULTIQUEUE
# Secure Boot: a signed build (podvm.db.der next to the image) carries its
# own signature database in the image: the certificate the UKI and the
# NVIDIA modules are signed with as PK, KEK and db, and nothing else (GCE's
# default Microsoft keys would let any Microsoft-signed loader boot), the
# same variables the boot test enrols. Files in DER, as the flags take them
# (gcloud compute images create --platform-key-file, --key-exchange-key-file,
# --signature-database-file). An unsigned build gets GCE's default keys and
# must boot with Secure Boot off.
sbflags=()
signed=$(jq -r '."caa-gcp-t4".secure_boot.signed // false' "$dir/podvm.manifest" 2>/dev/null || echo false)
if [ "$signed" = true ]; then
	der=$dir/podvm.db.der
	[ -f "$der" ] || { echo "gce-pack: the manifest says signed, but there is no $der" >&2; exit 1; }
	cp "$der" "$out/podvm-db.der"
	sbflags=(--platform-key-file="$out/podvm-db.der" --key-exchange-key-file="$out/podvm-db.der" --signature-database-file="$out/podvm-db.der")
	sbnote="signed: create the VMs with Shielded VM Secure Boot on (--shielded-secure-boot); db: $(openssl x509 -inform DER -in "$der" -noout -subject)"
else
	sbnote="UNSIGNED image: create the VMs with Secure Boot off (an organisation policy requiring Shielded VM Secure Boot will refuse them); sign with PODVM_SB_KEY/PODVM_SB_CERT (docs/podvm-build-guide.md)"
fi
upload=(gcloud storage cp "$out/podvm-gce.tar.gz" "$bucket/$name.tar.gz")
create=(gcloud compute images create "$name" ${project:+"$project"} --source-uri="$bucket/$name.tar.gz"
	--family="$family" --architecture=X86_64 --guest-os-features="$features"
	"${sbflags[@]}" --labels=caa-gcp-t4-key="$key")
echo "packed $out/podvm-gce.tar.gz (disk.raw $((rounded / gib)) GiB, sha256 $sha)"
echo "secure boot: $sbnote"
echo "${upload[*]}"
echo "${create[*]}"
if [ "${GCE_EXECUTE:-0}" = 1 ]; then
	[ -n "${GCE_BUCKET:-}" ] || { echo "gce-pack: GCE_EXECUTE=1 needs GCE_BUCKET=gs://…" >&2; exit 1; }
	"${upload[@]}"
	"${create[@]}"
fi
