#!/usr/bin/env bash
# make test's podVM part: static checks, the guest-binaries staging and
# fetch-verify paths, the image build (reused from the cache when its inputs
# are unchanged), then the QEMU boot test.
#
# The image tested is a TEST image (PODVM_IMAGE_KIND=test, marked so in the
# slot report, the manifest and os-release, and refused by gce-pack.sh) of
# the product configuration with test/podvm/standin in five of the six
# guest slots (attestation-agent left empty on purpose): the stand-ins
# record what the units give them and listen where the real programs would,
# so the boot test checks the guest contract end to end. The first boot has
# a cache disk attached (test/podvm/cache-fixture.sh, built with
# `gcp-t4 cache build -disk`): the boot test pulls through the podVM's mirror.
set -euo pipefail
cd "$(dirname "$0")/../.."
podvm/scripts/lint.sh
test/podvm/stage-binaries-test.sh
test/podvm/podvm-binaries-test.sh
test/podvm/refusal-test.sh
test/podvm/build-caa-programs-test.sh
test/podvm/docs-test.sh
test/podvm/starved-test.sh
test/podvm/measure-initdata-test.sh

cache=${PODVM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/caa-gcp-t4}
mkdir -p "$cache"
standin_slots="kata-agent agent-protocol-forwarder process-user-data confidential-data-hub api-server-rest"
bins=$(mktemp -d "$cache/podvm-standins.XXXXXX")
trap 'rm -rf "$bins"' EXIT
(cd test/podvm/standin && GOWORK=off CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w -buildid=" -o "$bins/standin" .)
src=$(cd test/podvm/standin && cat go.mod ./*.go | sha256sum | cut -c1-12)
for s in $standin_slots; do
	cp "$bins/standin" "$bins/$s"
	echo "$s test-standin-$src test/podvm/standin (boot-test stand-in, not a real guest binary)" >>"$bins/VERSIONS"
done
rm "$bins/standin"
# shellcheck disable=SC2086 # slot names
(cd "$bins" && sha256sum $standin_slots >SHA256SUMS)

# A throwaway Secure Boot key for the test, made once per cache (the image,
# signed with it, stays cached): the build signs the UKI and the NVIDIA
# modules with it and the boot test enrols its certificate in OVMF's db.
keydir=$cache/podvm-test-key
if [ ! -f "$keydir/db.crt" ] || [ ! -f "$keydir/db.key" ]; then
	rm -rf "$keydir.tmp"
	mkdir -m 0700 "$keydir.tmp"
	openssl req -new -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 \
		-subj "/CN=caa-gcp-t4 boot test Secure Boot key (throwaway)/" \
		-keyout "$keydir.tmp/db.key" -out "$keydir.tmp/db.crt" 2>/dev/null
	rm -rf "$keydir"
	mv "$keydir.tmp" "$keydir"
fi
export PODVM_SB_KEY=$keydir/db.key PODVM_SB_CERT=$keydir/db.crt
export PODVM_IMAGE_KIND=test
dir=$(PODVM_BINARIES=$bins podvm/scripts/build.sh)
# Also on a cached image: the manifest and the disk hold what they must.
podvm/scripts/check-image.sh "$dir"
# The boot test runs beside the refusal cases and the rebuild below: they
# share nothing but the cached image, which all of them only read (QEMU
# runs on a qcow2 overlay), and the boot spends much of its time waiting on
# the guest, time the rebuild's CPU-bound steps can use.
bootlog=$(mktemp "$cache/podvm-boot.XXXXXX")
cachedisk=$(mktemp -d "$cache/podvm-cache-disk.XXXXXX")
trap 'rm -rf "$bins" "$bootlog" "$cachedisk"' EXIT
# skopeo and docker-registry: test/cache/deps.sh (make podvm-test runs it).
# PODVM_BENCH_STORE_MIB sizes the first image (docs/benchmarks.md: 1100).
test/podvm/cache-fixture.sh "$cachedisk" ${PODVM_BENCH_STORE_MIB:+"$PODVM_BENCH_STORE_MIB"}
PODVM_BOOT_CACHE=$cachedisk PODVM_BOOT_STANDINS=$standin_slots test/podvm/boot-test.sh "$dir" "$dir.boot" >"$bootlog" 2>&1 &
bootpid=$!
trap 'kill "$bootpid" 2>/dev/null || true; rm -rf "$bins" "$bootlog" "$cachedisk"' EXIT
# boot_result: wait for the boot test, print what it said, and pass on its
# status (called on every path out of the foreground steps).
boot_result() {
	local rc=0
	wait "$bootpid" || rc=$?
	cat "$bootlog"
	return "$rc"
}
if ! test/podvm/check-image-test.sh "$dir"; then
	boot_result || true
	exit 1
fi
# Same inputs, same bits: one more build on mkosi's cached package tree must
# reproduce every output of the cached image (make podvm-verify does this
# from scratch, twice). Once per image: a rebuild that reproduced it leaves
# $dir.reproduced holding its SHA256SUMS, and a later run that reuses the
# image unchanged (its inputs, and so its key, the same) has nothing new to
# prove; an image built anew, from changed inputs or an empty cache, is
# rebuilt and compared.
marker=$dir.reproduced
if [ -f "$marker" ] && cmp -s "$marker" "$dir/SHA256SUMS"; then
	boot_result
	echo "podvm-test: image unchanged since its rebuild reproduced it ($(grep podvm.raw "$dir/SHA256SUMS")); no rebuild (make podvm-verify builds twice from scratch)"
	exit 0
fi
# Next to the cached image (same filesystem as the build's staging
# directory, so the 1.1 GB image is renamed, not copied into a tmpfs).
again=$(mktemp -d "$(dirname "$dir")/podvm-again.XXXXXX")
trap 'kill "$bootpid" 2>/dev/null || true; rm -rf "$bins" "$bootlog" "$cachedisk" "$again"' EXIT
rebuilt=0
PODVM_BINARIES=$bins PODVM_OUT=$again/out PODVM_INCREMENTAL=1 podvm/scripts/build.sh >/dev/null || rebuilt=$?
boot_result
[ "$rebuilt" -eq 0 ] || { echo "podvm-test: the rebuild failed (exit $rebuilt)" >&2; exit 1; }
if ! diff "$dir/SHA256SUMS" "$again/out/SHA256SUMS"; then
	echo "podvm-test: a rebuild of the same inputs differs from the cached image (above); make podvm-verify narrows it down" >&2
	exit 1
fi
cp "$dir/SHA256SUMS" "$marker.tmp" && mv "$marker.tmp" "$marker"
echo "podvm-test: rebuild reproduces the image: $(grep podvm.raw "$dir/SHA256SUMS")"
